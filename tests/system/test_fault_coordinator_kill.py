"""Fault 6: SIGKILL the coordinator (`ept sweep` subprocess, Celery executor) mid-run, then rerun it. The rerun
resumes, and no job runs twice: requests per job at the simulator equal the calls the ledger recorded."""

from __future__ import annotations

import signal

import pytest
from fixtures_faults import FAULT_KEY, clean_tokens, fault_rig, record, recording, tail, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.services]


def test_coordinator_sigkill_then_rerun_runs_no_job_twice(
    tmp_path, redis_server, s3_env, s3_bucket, make_sim
):
    sim = make_sim(api_key=FAULT_KEY, latency_ms=150, seed=4)
    rig = fault_rig(tmp_path, sim.url, name="coord", ledger=f"s3://{s3_bucket}/ledger", s3=s3_env.env())
    keys, log, led = rig.keys, rig.log, rig.open_ledger()
    workers = rig.start_workers(2, redis_server.url)
    try:
        first = rig.sweep(redis_server.url)
        wait_until(lambda: len(led.list_jobs("coord")) >= 12, 90, "12 jobs in the ledger")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        landed_at_kill = len(led.list_jobs("coord"))
        assert landed_at_kill < len(keys)
        # Rerun at once: the first run's queued messages are still being worked on; the rerun enqueues the jobs
        # not yet in the ledger again, and the claim + existence checks turn the second copies into no-ops.
        second = rig.sweep(redis_server.url)
        assert second.wait(timeout=120) == 0, tail(log)
    finally:
        workers.stop()
    assert "already in" in log.read_text()
    facts = rig.facts()
    assert facts.jobs == len(keys) and facts.lost == 0 and facts.failed == 0 and facts.duplicates == 0, facts
    by_job = sim.control.stats()["by_job"]
    assert by_job == facts.calls_by_job, {
        k: (by_job.get(k), v) for k, v in facts.calls_by_job.items() if by_job.get(k) != v
    }
    assert len(led.get_manifest("coord")["sessions"]) == 2
    if recording():
        record(
            "6: coordinator SIGKILL",
            f"SIGKILL `ept sweep` at {landed_at_kill} of 60 jobs, rerun at once",
            facts,
            len(keys),
            sim.control.stats()["requests"],
            clean_tokens(tmp_path, rig.suite, 10, 4),
        )
