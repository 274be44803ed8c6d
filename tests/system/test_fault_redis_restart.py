"""Fault 2: restart Redis (broker + result backend) mid-sweep. Workers and the coordinator reconnect; the sweep
completes with nothing lost or duplicated. Redis runs with an append-only file, as a production broker would, so
queued and unacknowledged messages survive the restart."""

from __future__ import annotations

import time

import pytest
from fixtures_faults import (
    FAULT_KEY,
    clean_tokens,
    fault_rig,
    record,
    recording,
    redis_url,
    start_redis_on,
    tail,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.services]

PASSWORD = "ept-fault-redis-pw"
DOWN_S = 3
_KOMBU_RACE = "Unrecoverable error: AttributeError(\"'NoneType' object has no attribute 'hostname'\")"


@pytest.mark.parametrize("aof", [True, False], ids=["aof", "no-persistence"])
def test_redis_restart_mid_sweep(tmp_path, s3_env, s3_bucket, make_sim, aof):
    """With an append-only file the queue survives; without one (the compose default) Redis comes back empty and
    the coordinator enqueues the unfinished jobs again."""
    redis = start_redis_on(tmp_path / "redis", PASSWORD, aof=aof)
    url = redis_url(redis, PASSWORD)
    try:
        sim = make_sim(api_key=FAULT_KEY, latency_ms=150, seed=7)
        rig = fault_rig(tmp_path, sim.url, name="redis", ledger=f"s3://{s3_bucket}/ledger", s3=s3_env.env())
        keys, log, led = rig.keys, rig.log, rig.open_ledger()
        workers = rig.start_workers(2, url)
        try:
            coord = rig.sweep(url)
            wait_until(lambda: len(led.list_jobs("redis")) >= 10, 90, "10 jobs in the ledger")
            redis.stop()
            time.sleep(DOWN_S)
            redis.start()
            rc = coord.wait(timeout=150)
            assert rc == 0, tail(log)
            for proc, wlog in zip(workers.procs, workers.logs, strict=True):
                if proc.poll() is not None:
                    # Known upstream race (kombu 5.x, celery/kombu#582, #970): closing the channel after the
                    # broker went away restores unacked messages through a connection already released, and
                    # the worker exits "Unrecoverable error: AttributeError(... 'hostname')". Seen once in
                    # this project's CI runs so far. The sweep must still finish on the other worker (asserted
                    # above and below); deployments restart such a worker (docker-compose.yml: restart:
                    # on-failure). Any other death is a failure.
                    assert _KOMBU_RACE in wlog.read_text(), f"a worker died with the broker: {tail(wlog)}"
        finally:
            workers.stop()
        assert redis.starts == 2
        # The coordinator noticed the outage; without persistence it enqueued the unfinished jobs again.
        text = log.read_text()
        assert "lost the broker" in text and (("came back empty" in text) != aof), tail(log)
        facts = rig.facts()
        assert facts.jobs == len(keys) and facts.lost == 0 and facts.failed == 0 and facts.duplicates == 0, (
            facts
        )
        # Every request the simulator answered is recorded: in the job's object, or as a spent/ call (a failed
        # attempt, a losing copy, a journal recovered). Without persistence a job running at the restart may run
        # again beside its re-sent copy (its claim lived in the wiped Redis); the losing copy's calls are spent/.
        by_job = sim.control.stats()["by_job"]
        recorded = {k: facts.calls_by_job.get(k, 0) + facts.spent_by_job.get(k, 0) for k in keys}
        diff = {k: (by_job.get(k, 0), v) for k, v in recorded.items() if by_job.get(k, 0) != v}
        assert not diff, diff
        assert sum(by_job.values()) == sum(recorded.values())
        # No stale failure record: a job that failed at the restart and then succeeded has no failure object.
        stale = set(led.list_failures(rig.run_id)) & led.list_jobs(rig.run_id)
        assert not stale, stale
        if recording():
            record(
                f"2{'a' if aof else 'b'}: Redis restart",
                f"Redis ({'AOF' if aof else 'no persistence'}) stopped for {DOWN_S} s after 10 of 60 jobs, restarted on its port",
                facts,
                len(keys),
                sim.control.stats()["requests"],
                clean_tokens(tmp_path, rig.suite, 10, 7),
            )
    finally:
        redis.stop()
