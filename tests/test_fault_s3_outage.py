"""Fault 3: S3 unreachable for ~20 s mid-sweep (SeaweedFS stopped, then restarted on the same ports and data
dir). Job writes retry with backoff; nothing is lost; no partial objects."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from fixtures_faults import (
    FAULT_KEY,
    clean_tokens,
    ledger_facts,
    record,
    recording,
    start_weed_on,
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

OUTAGE_S = 20


def test_s3_outage_mid_sweep_loses_nothing(tmp_path, redis_server, make_sim, monkeypatch):
    from contracts.ledger import open_ledger
    from contracts.records import JobResult
    from coordinator.plan import load_plan
    from coordinator.sweep import plan_jobs

    weed = start_weed_on(tmp_path / "weed")
    try:
        for k, v in weed.s3_env().items():
            monkeypatch.setenv(k, v)
        sim = make_sim(api_key=FAULT_KEY, latency_ms=150, seed=6)
        suite = write_suite(tmp_path / "suite.jsonl")
        profiles = write_profiles(tmp_path / "profiles.toml", sim.url)
        queue = "fs-" + uuid.uuid4().hex[:8]
        bucket = "ept-" + uuid.uuid4().hex[:10]
        ledger = f"s3://{bucket}/ledger"
        plan_path = write_plan(tmp_path / "plan.toml", name="s3out", suite=suite, ledger=ledger, queue=queue)
        jobs = plan_jobs(load_plan(plan_path))
        keys = {j.key for j in jobs}
        env = {**weed.s3_env(), **worker_env(tmp_path), "EPT_PROFILES": str(profiles), "EPT_SIM_API_KEY": FAULT_KEY}
        workers = start_celery_workers(2, redis_server.url, tmp_path / "w", env=env, concurrency=2, queue=queue)
        log = tmp_path / "sweep.log"
        led = open_ledger(ledger)
        try:
            coord = sweep_proc(plan_path, {**env, "EPT_BROKER_URL": redis_server.url}, log)
            wait_until(lambda: len(led.list_jobs("s3out")) >= 10, 90, "10 jobs in the ledger")
            weed.stop()
            down_at = time.monotonic()
            time.sleep(OUTAGE_S)
            weed.start(ready=weed.ready)
            outage = time.monotonic() - down_at
            rc = coord.wait(timeout=150)
            assert rc == 0, tail(log)
        finally:
            workers.stop()
        assert outage >= OUTAGE_S
        facts = ledger_facts(ledger, "s3out", keys)
        assert facts.jobs == len(keys) and facts.lost == 0 and facts.failed == 0 and facts.duplicates == 0, facts
        assert facts.extra_keys == 0
        # No partial objects: every object is complete JSONL ending with the job's outcome line.
        by_key = {j.key: j for j in jobs}
        for k in keys:
            lines = [json.loads(x) for x in led.get_job("s3out", k).decode().splitlines()]
            r = JobResult.from_lines(lines, by_key[k])
            assert lines[-1]["kind"] == "outcome" and len(r.calls) == facts.calls_by_job[k] >= 1
        # Nothing stray under the run (temporary or multipart leftovers).
        objs = weed.client().list_objects_v2(Bucket=bucket, Prefix="ledger/runs/s3out/")
        names = [o["Key"] for o in objs.get("Contents", [])]
        assert all(n.endswith("manifest.json") or "/jobs/" in n or "/failures/" in n for n in names), names
        assert not [n for n in names if "/failures/" in n]
        assert weed.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
        if recording():
            record("3: S3 outage", f"SeaweedFS stopped {outage:.0f} s after 10 of 60 jobs, restarted on its ports/dir",
                   facts, len(keys), sim.control.stats()["requests"], clean_tokens(tmp_path, suite, 10, 6),
                   "no partial objects, no multipart leftovers, no failure records")
    finally:
        weed.stop()
