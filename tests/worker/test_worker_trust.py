"""A Celery message cannot choose where a worker's key goes or where it writes (issue 23 item 9), and a
delivery that already ran is never run again by a redelivered copy (issue 26 item 2).

Real Redis, real `ept worker` subprocesses, the simulator over HTTP (a second simulator plays the attacker)."""

from __future__ import annotations

import os
import time
import uuid
from unittest import mock

import pytest
from fixtures_faults import FAULT_KEY, fault_rig
from fixtures_services import start_celery_workers
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.worker.trust import Untrusted, check_base_url, check_ledger


def test_allow_lists_take_exact_entries_and_prefixes_only(tmp_path):
    env = {"EPT_WORKER_LEDGERS": f"s3://ept-ledger/sweeps, {tmp_path}/ok/*",
           "EPT_WORKER_BASE_URLS": "http://simulator:8765/v1"}  # fmt: skip
    assert check_ledger("s3://ept-ledger/sweeps/", env) == "s3://ept-ledger/sweeps/"
    assert check_ledger(str(tmp_path / "ok" / "a"), env)
    for bad in (
        "s3://ept-ledger/sweeps2",
        "s3://other/sweeps",
        str(tmp_path / "ok" / ".." / "no"),
        "/any/path",
        "",
    ):
        with pytest.raises(Untrusted, match="EPT_WORKER_LEDGERS"):
            check_ledger(bad, env)
    assert check_base_url(None, env) is None
    assert check_base_url("http://simulator:8765/v1/", env)
    with pytest.raises(Untrusted, match="EPT_WORKER_BASE_URLS"):
        check_base_url("http://attacker/v1", env)
    with pytest.raises(Untrusted, match="unset"):
        check_ledger("s3://ept-ledger/sweeps", {})


WORKER_KEY = "sk-worker-own-key-0123456789abcd"


@settings(max_examples=300, deadline=None, derandomize=True)
@given(url=st.text(max_size=3000), entries=st.lists(st.text(max_size=50), max_size=5))
def test_hostile_message_urls_are_decided_fast_and_never_leak_a_key(url, entries):
    """Any string a message carries: allowed or Untrusted, nothing else, in bounded time; the worker's own key
    echoed in it is masked in the error."""
    env = {"EPT_WORKER_LEDGERS": ",".join(entries), "EPT_WORKER_BASE_URLS": ",".join(entries)}
    hostile = f"{url}{WORKER_KEY}"
    t0 = time.perf_counter()
    with mock.patch.dict(os.environ, {"EPT_FUZZ_API_KEY": WORKER_KEY}):
        for check in (check_ledger, check_base_url):
            try:
                check(hostile, env)
            except Untrusted as e:
                assert WORKER_KEY not in str(e) and len(str(e)) < 2000
            except (ValueError, OSError):  # realpath on an embedded NUL: refused by the OS, still no write
                pass
    assert time.perf_counter() - t0 < 1.0


def _send(app, job, ctx, task_id=None, timeout=60):
    res = app.send_task("ept.run_job", args=[job.to_dict(), ctx], queue=job_queue[0], task_id=task_id)
    return res.get(timeout=timeout)


job_queue: list[str] = []


@pytest.fixture
def rig_and_worker(tmp_path, redis_server, make_sim):
    sim = make_sim(api_key=FAULT_KEY, seed=3)
    rig = fault_rig(
        tmp_path, sim.url, name="trust", ledger=str(tmp_path / "ledger"), per_family=1, max_retries=0,
        patience=0,  # a server answering only 5xx fails its jobs at once (no outage waited out)
    )  # fmt: skip
    rig.record()  # the run's manifest and task digests, as its coordinator writes them before enqueueing
    env = {**rig.env(), "EPT_WORKER_LEDGERS": rig.ledger}
    env.pop("EPT_WORKER_BASE_URLS", None)
    job_queue[:] = [rig.plan.queue]
    ws = start_celery_workers(1, redis_server.url, tmp_path / "w", env={**env, "EPT_WORKER_BASE_URLS": ""},
                              concurrency=2, queue=rig.plan.queue)  # fmt: skip
    from elo_per_token.worker.celery_app import make_app

    app = make_app(redis_server.url)
    yield sim, rig, app, ws
    app.close()
    ws.stop()


@pytest.mark.services
def test_a_hostile_message_sends_no_key_and_writes_nothing(tmp_path, rig_and_worker, make_sim):
    sim, rig, app, _ws = rig_and_worker
    attacker = make_sim()  # counts every request it gets, and would see the Authorization header
    target = tmp_path / "any" / "path"
    job = rig.jobs[0]
    out = _send(app, job, {"base_url": attacker.url, "ledger": str(target)})
    assert out["status"] == "failed" and "EPT_WORKER_LEDGERS" in out["message"], out
    # The trusted ledger with a hostile endpoint: refused as well, before any request.
    out2 = _send(app, job, {"base_url": attacker.url, "ledger": rig.ledger})
    assert out2["status"] == "failed" and "EPT_WORKER_BASE_URLS" in out2["message"], out2
    assert attacker.control.stats()["requests"] == 0 and sim.control.stats()["requests"] == 0
    assert not target.exists() and not (tmp_path / "any").exists()
    led = rig.open_ledger()
    assert not led.list_jobs(rig.run_id) and not led.list_failures(rig.run_id)
    assert FAULT_KEY not in repr(out) + repr(out2)
    # The same worker runs a message that names only what it trusts.
    ok = _send(app, job, {"base_url": None, "ledger": rig.ledger})
    assert ok["status"] == "done", ok
    assert sim.control.stats()["requests"] >= 1 and attacker.control.stats()["requests"] == 0


@pytest.mark.services
def test_a_failed_delivery_is_not_run_again_by_its_redelivered_copy(rig_and_worker):
    """The same message (task id) delivered twice, as Redis does after a visibility timeout: the job fails
    (every request a 5xx, retries exhausted) once; the copy returns that outcome and calls nothing."""
    sim, rig, app, _ws = rig_and_worker
    sim.control.set(rate_500=1.0)
    job = rig.jobs[0]
    tid = f"{rig.run_id}:{uuid.uuid4().hex}"
    first = _send(app, job, {"base_url": None, "ledger": rig.ledger}, task_id=tid)
    assert first["status"] == "failed" and first["class"] == "transient", first
    paid = sim.control.stats()["completion_requests"]
    assert paid == first["calls"] == first["spent_calls"] >= 1
    again = _send(app, job, {"base_url": None, "ledger": rig.ledger}, task_id=tid)
    assert again == first
    assert sim.control.stats()["completion_requests"] == paid
    # A new message for the same job (a resumed sweep, `ept retry`) does run it again.
    sim.control.set(rate_500=0.0)
    third = _send(app, job, {"base_url": None, "ledger": rig.ledger})
    assert third["status"] == "done" and sim.control.stats()["completion_requests"] > paid


@pytest.mark.services
@settings(max_examples=80, deadline=None, derandomize=True)
@given(raw=st.one_of(st.binary(max_size=300), st.builds(lambda v: __import__("json").dumps(v).encode(),
                                                         st.recursive(st.none() | st.integers() | st.text(max_size=8),
                                                                      lambda c: st.lists(c, max_size=3)
                                                                      | st.dictionaries(st.sampled_from(["key", "status", "x"]), c, max_size=3),
                                                                      max_leaves=10))))  # fmt: skip
def test_a_hostile_ran_marker_never_replaces_a_run(redis_server, raw):
    """Whatever sits under a task's ran marker on the broker: it is returned only if it is a finished summary of
    that very job; anything else is ignored (the job runs), never raised, fast."""
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.worker.celery_job import _ran_before, _ran_key

    r = redis_server.client()
    job = Job("r", {"task_id": "t", "family": "f"}, "greedy", 1)
    tid = f"t-{uuid.uuid4().hex}"
    r.set(_ran_key(tid), raw, ex=60)
    t0 = time.perf_counter()
    got = _ran_before(r, tid, job)
    assert time.perf_counter() - t0 < 1.0
    assert got is None or (
        isinstance(got, dict) and got["key"] == job.key and got["status"] in ("done", "duplicate", "failed")
    )
