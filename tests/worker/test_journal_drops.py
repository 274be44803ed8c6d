"""A delivery's call journals are dropped in the round trip that gives its claim up (issue 39:
CallJournal.defer_drops, Claims.release(drops=...)), not one round trip each, and never before the calls
they hold are durable; whatever else the broker holds under those keys, the ran marker is set and the claim
released."""

from __future__ import annotations

import uuid

import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from test_claims import _HOSTILE, _put

from elo_per_token.contracts.jobs import Job
from elo_per_token.worker.celery_job import Claims
from elo_per_token.worker.journal import CallJournal, journal_set_key

pytestmark = pytest.mark.services


def _job() -> Job:
    task = {"task_id": f"math-{uuid.uuid4().hex[:8]}", "family": "math"}
    return Job(run_id="drops", task=task, strategy="greedy", budget_n=1)


def _journaled(r, job: Job) -> tuple[CallJournal, Claims, str]:
    """A held claim and an attempt with one call and the commit mark journaled, then ended (deferred)."""
    claims, journal = Claims(r, "host-d"), CallJournal(r)
    assert claims.acquire(job)
    journal.defer_drops(job)
    attempt = journal.begin(job)
    journal._push(job, attempt, {"kind": "call", "n": 1})
    journal.commit(job, attempt)
    journal.end(job, attempt)
    return journal, claims, attempt


def _commands(r) -> list[str]:
    """Every round trip the client makes from now on: single commands by name, pipelines as "PIPELINE"."""
    sent: list[str] = []
    one, pipe = r.execute_command, r.pipeline

    def spy_one(*args, **kw):
        sent.append(str(args[0]))
        return one(*args, **kw)

    def spy_pipe(*args, **kw):
        p = pipe(*args, **kw)
        run = p.execute

        def execute(*a, **k):
            sent.append("PIPELINE")
            return run(*a, **k)

        p.execute = execute
        return p

    r.execute_command, r.pipeline = spy_one, spy_pipe
    return sent


def test_an_ended_journal_stays_until_the_claims_release_drops_it_in_the_same_round_trip(redis_server):
    r = redis_server.client()
    job = _job()
    journal, claims, attempt = _journaled(r, job)
    lk = f"ept:journal:{job.run_id}:{job.key}:{attempt}"
    # Ended but not dropped yet: the claim is held, so no other delivery reads it meanwhile.
    assert r.llen(lk) == 2 and r.sismember(journal_set_key(job.run_id, job.key), attempt)
    sent = _commands(r)
    drops = journal.take_drops(job)
    journal.release(job)  # nothing left deferred: no round trip of its own
    marker = f"ept:ran:{uuid.uuid4().hex}"
    claims.release(job, (marker, "{}", 60), drops)
    assert sent == ["PIPELINE"], sent
    assert not r.exists(lk) and not r.exists(journal_set_key(job.run_id, job.key))
    assert r.get(marker) == b"{}" and r.get(Claims.key(job)) is None


def test_drops_not_taken_are_run_when_the_journal_is_released(redis_server):
    """The failure path (an exception before the release with the marker): journal.release drops them."""
    r = redis_server.client()
    job = _job()
    journal, claims, attempt = _journaled(r, job)
    journal.release(job)
    claims.release(job)
    assert not r.exists(f"ept:journal:{job.run_id}:{job.key}:{attempt}")
    assert not r.exists(journal_set_key(job.run_id, job.key)) and r.get(Claims.key(job)) is None
    assert journal.take_drops(job) == []  # deferring ended with the release
    journal.end(job, journal.begin(job))  # journaled nothing: nothing to drop, nothing deferred


def test_without_deferring_a_journal_is_dropped_when_it_ends(redis_server):
    """The local executor's and the sweep end's path (recover_run): drops are not held back."""
    r = redis_server.client()
    job, journal = _job(), CallJournal(r)
    attempt = journal.begin(job)
    journal._push(job, attempt, {"kind": "call"})
    journal.end(job, attempt)
    assert not r.exists(f"ept:journal:{job.run_id}:{job.key}:{attempt}")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jset=_HOSTILE, jlist=_HOSTILE)
def test_whatever_the_broker_holds_under_the_journal_keys_the_release_still_marks_and_frees(
    redis_server, jset, jlist
):
    """Keys of another type under the journal's set or list (anything with the broker's password can write
    them): the release's round trip still sets the ran marker and frees the claim, fast, and nothing raises."""
    r = redis_server.client()
    job = _job()
    journal, claims, attempt = _journaled(r, job)
    _put(r, journal_set_key(job.run_id, job.key), jset)
    _put(r, f"ept:journal:{job.run_id}:{job.key}:{attempt}", jlist)
    marker = f"ept:ran:{uuid.uuid4().hex}"

    def release() -> None:
        drops = journal.take_drops(job)
        journal.release(job)
        claims.release(job, (marker, "{}", 60), drops)

    bounded(release, time_s=1.0, memory_mb=10)
    assert r.get(marker) == b"{}" and r.get(Claims.key(job)) is None
