"""Fault 6: SIGKILL the coordinator (`ept sweep` subprocess, Celery executor) mid-run, then rerun it. The rerun
resumes, and no job runs twice: requests per job at the simulator equal the calls the ledger recorded."""

from __future__ import annotations

import signal
import uuid

import pytest
from fixtures_faults import (
    FAULT_KEY,
    clean_tokens,
    ledger_facts,
    record,
    recording,
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


def test_coordinator_sigkill_then_rerun_runs_no_job_twice(tmp_path, redis_server, s3_env, s3_bucket, make_sim):
    from contracts.ledger import open_ledger
    from coordinator.plan import load_plan
    from coordinator.sweep import plan_jobs

    sim = make_sim(api_key=FAULT_KEY, latency_ms=150, seed=4)
    suite = write_suite(tmp_path / "suite.jsonl")
    profiles = write_profiles(tmp_path / "profiles.toml", sim.url)
    queue = "fc-" + uuid.uuid4().hex[:8]
    ledger = f"s3://{s3_bucket}/ledger"
    plan_path = write_plan(tmp_path / "plan.toml", name="coord", suite=suite, ledger=ledger, queue=queue)
    jobs = plan_jobs(load_plan(plan_path))
    keys = {j.key for j in jobs}
    env = {**s3_env.env(), **worker_env(tmp_path), "EPT_PROFILES": str(profiles), "EPT_SIM_API_KEY": FAULT_KEY}
    workers = start_celery_workers(2, redis_server.url, tmp_path / "w", env=env, concurrency=2, queue=queue)
    log = tmp_path / "sweep.log"
    led = open_ledger(ledger)
    try:
        first = sweep_proc(plan_path, {**env, "EPT_BROKER_URL": redis_server.url}, log)
        wait_until(lambda: len(led.list_jobs("coord")) >= 12, 90, "12 jobs in the ledger")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        landed_at_kill = len(led.list_jobs("coord"))
        assert landed_at_kill < len(keys)
        # Rerun at once: the first run's queued messages are still being worked on; the rerun enqueues the jobs
        # not yet in the ledger again, and the claim + existence checks turn the second copies into no-ops.
        second = sweep_proc(plan_path, {**env, "EPT_BROKER_URL": redis_server.url}, log)
        assert second.wait(timeout=120) == 0, tail(log)
    finally:
        workers.stop()
    assert "already in" in log.read_text()
    facts = ledger_facts(ledger, "coord", keys)
    assert facts.jobs == len(keys) and facts.lost == 0 and facts.failed == 0 and facts.duplicates == 0, facts
    by_job = sim.control.stats()["by_job"]
    assert by_job == facts.calls_by_job, {k: (by_job.get(k), v) for k, v in facts.calls_by_job.items() if by_job.get(k) != v}
    assert len(led.get_manifest("coord")["sessions"]) == 2
    if recording():
        record("6: coordinator SIGKILL", f"SIGKILL `ept sweep` at {landed_at_kill} of 60 jobs, rerun at once", facts,
               len(keys), sim.control.stats()["requests"], clean_tokens(tmp_path, suite, 10, 4))
