"""Fault 2: restart Redis (broker + result backend) mid-sweep. Workers and the coordinator reconnect; the sweep
completes with nothing lost or duplicated. Redis runs with an append-only file, as a production broker would, so
queued and unacknowledged messages survive the restart."""

from __future__ import annotations

import time
import uuid

import pytest
from fixtures_faults import (
    FAULT_KEY,
    clean_tokens,
    ledger_facts,
    record,
    recording,
    redis_url,
    start_redis_on,
    sweep_proc,
    tail,
    wait_until,
    worker_env,
    write_plan,
    write_profiles,
    write_suite,
)
from fixtures_services import start_celery_workers

pytestmark = [pytest.mark.slow, pytest.mark.services]

PASSWORD = "ept-fault-redis-pw"
DOWN_S = 3


@pytest.mark.parametrize("aof", [True, False], ids=["aof", "no-persistence"])
def test_redis_restart_mid_sweep(tmp_path, s3_env, s3_bucket, make_sim, aof):
    """With an append-only file the queue survives; without one (the compose default) Redis comes back empty and
    the coordinator enqueues the unfinished jobs again."""
    from contracts.ledger import open_ledger
    from coordinator.plan import load_plan
    from coordinator.sweep import plan_jobs

    redis = start_redis_on(tmp_path / "redis", PASSWORD, aof=aof)
    url = redis_url(redis, PASSWORD)
    try:
        sim = make_sim(api_key=FAULT_KEY, latency_ms=150, seed=7)
        suite = write_suite(tmp_path / "suite.jsonl")
        profiles = write_profiles(tmp_path / "profiles.toml", sim.url)
        queue = "fr-" + uuid.uuid4().hex[:8]
        ledger = f"s3://{s3_bucket}/ledger"
        plan_path = write_plan(tmp_path / "plan.toml", name="redis", suite=suite, ledger=ledger, queue=queue)
        jobs = plan_jobs(load_plan(plan_path))
        keys = {j.key for j in jobs}
        env = {**s3_env.env(), **worker_env(tmp_path), "EPT_PROFILES": str(profiles), "EPT_SIM_API_KEY": FAULT_KEY}
        workers = start_celery_workers(2, url, tmp_path / "w", env=env, concurrency=2, queue=queue)
        log = tmp_path / "sweep.log"
        led = open_ledger(ledger)
        try:
            coord = sweep_proc(plan_path, {**env, "EPT_BROKER_URL": url}, log)
            wait_until(lambda: len(led.list_jobs("redis")) >= 10, 90, "10 jobs in the ledger")
            redis.stop()
            time.sleep(DOWN_S)
            redis.start()
            rc = coord.wait(timeout=150)
            assert rc == 0, tail(log)
            assert all(p.poll() is None for p in workers.procs), "a worker died with the broker"
        finally:
            workers.stop()
        assert redis.starts == 2
        # The coordinator noticed the outage; without persistence it enqueued the unfinished jobs again.
        text = log.read_text()
        assert "lost the broker" in text and (("came back empty" in text) != aof), tail(log)
        facts = ledger_facts(ledger, "redis", keys)
        assert facts.jobs == len(keys) and facts.lost == 0 and facts.failed == 0 and facts.duplicates == 0, facts
        # No job ran twice across the restart: requests per job at the simulator = recorded calls.
        by_job = sim.control.stats()["by_job"]
        diff = {k: (by_job.get(k), v) for k, v in facts.calls_by_job.items() if by_job.get(k) != v}
        if aof:
            assert not diff, diff
        else:
            # The per-job claims lived in the Redis that was wiped: a job still running at the restart could in
            # principle run again beside its re-sent copy (the ledger keeps one). Never fewer requests than calls.
            assert all(by_job.get(k, 0) >= v for k, v in facts.calls_by_job.items()), diff
        if recording():
            record(f"2{'a' if aof else 'b'}: Redis restart", f"Redis ({'AOF' if aof else 'no persistence'}) stopped for {DOWN_S} s after 10 of 60 jobs, restarted on its port",
                   facts, len(keys), sim.control.stats()["requests"], clean_tokens(tmp_path, suite, 10, 7))
    finally:
        redis.stop()
