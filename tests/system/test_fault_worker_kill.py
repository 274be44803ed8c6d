"""Fault 1: SIGKILL one Celery worker mid-sweep, then another. The sweep completes; every job key is in the
ledger exactly once; per-arm token totals equal a clean (local) run's with the same seed."""

from __future__ import annotations

import os
import signal
import time

import pytest
from fixtures_faults import (
    FAULT_KEY,
    fault_rig,
    ledger_facts,
    n_jobs,
    record,
    tail,
    wait_until,
    write_plan,
    write_profiles,
)
from fixtures_services import busy_worker

pytestmark = [pytest.mark.slow, pytest.mark.services]


def clean_run(tmp, sim, suite, monkeypatch, name: str, per_family: int = 10) -> dict[str, int]:
    """The same plan on the local executor into a folder: the reference token totals per arm."""
    from elo_per_token.coordinator.plan import load_plan
    from elo_per_token.coordinator.sweep import execute, plan_jobs
    from elo_per_token.egress.profiles import get_profile

    profiles = write_profiles(tmp / "profiles-clean.toml", sim.url)
    monkeypatch.setenv("EPT_PROFILES", str(profiles))
    monkeypatch.setenv("EPT_SIM_API_KEY", FAULT_KEY)
    plan = load_plan(write_plan(tmp / "clean.toml", name=name, suite=suite, ledger=str(tmp / "clean"),
                                executor="local", per_family=per_family))  # fmt: skip
    jobs = plan_jobs(plan)
    out = execute(plan, jobs, profile=get_profile("fault-sim"), analyze=False)
    assert out.ok
    return ledger_facts(str(tmp / "clean"), name, {j.key for j in jobs}).tokens_by_arm


def test_sigkill_two_workers_mid_sweep(tmp_path, redis_server, s3_env, s3_bucket, make_sim, monkeypatch):
    # 400 ms per reply: a job that is running spends nearly all its time waiting on the server, so a worker
    # seen running a job has a request in flight when it is killed.
    sim = make_sim(api_key=FAULT_KEY, latency_ms=400, seed=3)
    rig = fault_rig(tmp_path, sim.url, name="kill", ledger=f"s3://{s3_bucket}/ledger", s3=s3_env.env())
    jobs, keys, coord_log = rig.jobs, rig.keys, rig.log
    assert len(jobs) == n_jobs() == 60

    workers = rig.start_workers(3, redis_server.url)
    try:
        coord = rig.sweep(redis_server.url)
        led = rig.open_ledger()
        # Kill a worker once a sixth of the jobs have landed, a second one at half. Each victim is one seen
        # running a job (Celery's inspect), not a process picked blindly: a worker between jobs would show
        # nothing about recovery.
        alive = [p.pid for p in workers.procs]
        for landed in (10, 30):
            wait_until(lambda n=landed: len(led.list_jobs("kill")) >= n, 90, f"{landed} jobs in the ledger")
            victim, _ = busy_worker(redis_server.url, alive, time.monotonic() + 30)
            os.kill(victim, signal.SIGKILL)
            alive.remove(victim)
        # The survivor finishes; the killed workers' unacked jobs come back after the visibility timeout.
        rc = coord.wait(timeout=120)
        assert rc == 0, tail(coord_log)
    finally:
        workers.stop()
    facts = rig.facts()
    assert facts.jobs == len(keys) and facts.lost == 0 and facts.failed == 0, facts
    assert facts.duplicates == 0 and facts.extra_keys == 0
    # Every job's calls were recorded once: (job, call_index) unique and as many as the arm's budget.
    assert facts.calls_by_job == {j.key: j.budget_n for j in jobs}, facts.calls_by_job
    # Requests the killed workers had in flight were paid for but never recorded: the server saw at least as
    # many requests per job as the ledger has calls, never fewer.
    by_job = sim.control.stats()["by_job"]
    assert all(by_job.get(k, 0) >= n for k, n in facts.calls_by_job.items())
    # The calls the killed workers had made are recovered from their journals (spent objects); only requests in
    # flight at the kill (at most 2 jobs x 3 parallel calls per killed worker) can be paid and unrecorded.
    killed_waste = sum(by_job.values()) - facts.calls - facts.spent_calls
    assert 0 <= killed_waste <= 12, (killed_waste, facts.spent_by_job)
    # The kills caught work in flight (else this test would show nothing about recovery): each killed worker
    # was inside a job, so its journaled calls came back as spent objects or its open requests went unrecorded.
    assert facts.spent_calls + killed_waste >= 1, (killed_waste, facts.spent_by_job)
    requests = sim.control.stats()["requests"]

    sim.control.reset()
    reference = clean_run(tmp_path, sim, rig.suite, monkeypatch, "kill")
    record(
        "1: worker SIGKILL",
        "SIGKILL 2 of 3 Celery workers (at 10 and 30 of 60 jobs landed)",
        facts,
        len(keys),
        requests,
        reference,
        f"{killed_waste} requests were in flight in the killed workers (paid, not recorded); "
        f"{facts.spent_calls} calls of their jobs recovered from the journals",
    )
    assert facts.tokens_by_arm == reference and sum(reference.values()) > 0
