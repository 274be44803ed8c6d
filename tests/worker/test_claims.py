"""Job leases in Redis (worker.celery_job.Claims) against a real redis-server."""

from __future__ import annotations

import time

import pytest

from elo_per_token.contracts.jobs import Job
from elo_per_token.worker.celery_job import Claims

pytestmark = pytest.mark.services


def _job(task: str = "math-001") -> Job:
    return Job(run_id="claims", task={"task_id": task, "family": "math"}, strategy="greedy", budget_n=1)


def test_one_holder_at_a_time_and_release_frees_it(redis_server):
    r = redis_server.client()
    a, b = Claims(r, "host-a"), Claims(r, "host-b")
    job = _job()
    assert a.acquire(job)
    assert not b.acquire(job)  # another worker's duplicate delivery waits
    assert not a.acquire(job)  # so does a second thread of the same worker
    assert b.acquire(_job("math-002"))  # other jobs are independent
    a.release(job)
    assert r.get(Claims.key(job)) is None
    assert b.acquire(job)


def test_a_late_release_never_deletes_a_later_holders_lease(redis_server):
    r = redis_server.client()
    a, b = Claims(r, "host-a", ttl_ms=300), Claims(r, "host-b")
    job = _job("math-003")
    assert a.acquire(job)
    r.delete(Claims.key(job))  # a's lease is gone (as if it expired while a was stalled)
    assert b.acquire(job)
    a.release(job)
    assert r.get(Claims.key(job)) is not None and r.get(Claims.key(job)).decode().startswith("host-b")


def test_held_leases_are_renewed_and_a_dead_holders_lease_expires(redis_server):
    r = redis_server.client()
    live = Claims(r, "host-live", ttl_ms=400)
    job = _job("math-004")
    assert live.acquire(job)
    time.sleep(1.2)  # three lease lengths: only renewal keeps it
    assert r.pttl(Claims.key(job)) > 0
    live.release(job)

    dead = Claims(r, "host-dead", ttl_ms=400)
    job2 = _job("math-005")
    assert dead.acquire(job2)
    dead._held.clear()  # what a dead process renews: nothing
    time.sleep(0.8)
    assert r.get(Claims.key(job2)) is None
    assert Claims(r, "host-next").acquire(job2)
