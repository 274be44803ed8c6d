"""The run's cancel marker read in the claim's round trip (issue 39: one round trip per job fewer when the
claims live on the broker): a cancelled job never waits for a claim another delivery holds, never takes one it
keeps, and a hostile value under the marker's key reads as what EXISTS says."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from test_claims import _HOSTILE, _put

from elo_per_token.contracts.jobs import Job, cancel_key
from elo_per_token.worker.celery_job import Claims, _await_claim, _claim_reads, _is_set, celery_run_job

pytestmark = pytest.mark.services


def _job() -> Job:
    return Job(run_id=f"cc-{uuid.uuid4().hex[:8]}", task={"task_id": "math-001", "family": "math"},
               strategy="greedy", budget_n=1)  # fmt: skip


class _NoLedger:
    """A ledger a cancelled job must never read (a read fails the test)."""

    def has_job(self, *_a: object) -> bool:
        raise AssertionError("a cancelled job read the ledger")


def test_the_cancel_marker_is_the_last_claim_read_only_when_asked():
    job = _job()
    assert _claim_reads(job, "t1", cancel=True)[-1] == ("exists", cancel_key(job.run_id))
    assert all(cmd != "exists" for cmd, _ in _claim_reads(job, "t1"))
    assert _is_set(1) and _is_set(True) and not _is_set(0) and not _is_set(b"1") and not _is_set(Exception())


def test_a_cancelled_job_does_not_wait_for_a_claim_another_delivery_holds(redis_server):
    r = redis_server.client()
    job = _job()
    other, mine = Claims(r, "host-other"), Claims(r, "host-mine")
    assert other.acquire(job)
    r.set(cancel_key(job.run_id), "1")
    t0 = time.monotonic()
    got = _await_claim(mine, job, _NoLedger(), _claim_reads(job, "t1", cancel=True), cancel=True)  # type: ignore[arg-type]
    assert got is not None and _is_set(got[1][-1]) and time.monotonic() - t0 < 0.4
    mine.release(job)  # what celery_run_job does: a no-op here, the other holder's lease stays
    assert r.get(Claims.key(job)).decode().startswith("host-other")


def test_a_cancelled_job_gives_back_the_claim_it_took_and_an_uncancelled_one_reads_zero(redis_server):
    r = redis_server.client()
    job, claims = _job(), Claims(r, "host-c")
    got = _await_claim(claims, job, _NoLedger(), _claim_reads(job, None, cancel=True), cancel=True)  # type: ignore[arg-type]
    assert got is not None and got[1][-1] == 0 and not _is_set(got[1][-1])
    claims.release(job)
    r.set(cancel_key(job.run_id), "1")
    got = _await_claim(claims, job, _NoLedger(), _claim_reads(job, None, cancel=True), cancel=True)  # type: ignore[arg-type]
    assert got is not None and _is_set(got[1][-1])
    claims.release(job)
    assert r.get(Claims.key(job)) is None


def test_celery_run_job_returns_cancelled_from_the_claims_round_trip_and_leaves_no_claim(
    redis_server, tmp_path
):
    """The task body itself, its broker the claims' Redis, a recorded run that is cancelled: the summary says
    so, the job's ledger entry is never looked up, and the claim is free again."""
    from fixtures_faults import fault_rig

    from elo_per_token.worker.celery_job import JobSettings

    rig = fault_rig(
        tmp_path, "http://127.0.0.1:9/v1", name="cancel", ledger=str(tmp_path / "ledger"), per_family=1
    )
    rig.record()  # the run's task digests: the job passes the forged-task check and reaches its claim
    job, r = rig.jobs[0], redis_server.client()
    r.set(cancel_key(job.run_id), "1")
    task = SimpleNamespace(app=SimpleNamespace(conf={"broker_url": redis_server.url}),
                           request=SimpleNamespace(id=uuid.uuid4().hex, hostname="h", delivery_info={}))  # fmt: skip
    limits = JobSettings(ledgers=f"{tmp_path}/*", base_urls="http://127.0.0.1:*")
    ctx = {"ledger": rig.ledger, "base_url": None, "check_ledger": True}
    out = celery_run_job(task, job.to_dict(), ctx, str(rig.profiles), limits)  # type: ignore[arg-type]
    assert out["status"] == "cancelled" and "stopped" in (out["message"] or ""), out
    assert r.get(Claims.key(job)) is None
    r.delete(cancel_key(job.run_id))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(marker=_HOSTILE)
def test_whatever_is_under_the_cancel_key_the_claim_round_trip_answers_fast(redis_server, marker):
    """Any type under the run's cancel key: the read is EXISTS's answer (there or not), never an error."""
    r = redis_server.client()
    job, claims = _job(), Claims(r, "host-h")
    _put(r, cancel_key(job.run_id), marker)
    reads = _claim_reads(job, "t", cancel=True)
    got = bounded(lambda: _await_claim(claims, job, _NoLedger(), reads, cancel=True), 1.0, 10)  # type: ignore[arg-type]
    claims.release(job)
    assert got is not None and _is_set(got[1][-1]) == (marker is not None)
