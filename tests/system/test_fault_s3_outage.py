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
    fault_rig,
    record,
    recording,
    start_weed_on,
    tail,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.services]

OUTAGE_S = 20


def test_s3_outage_mid_sweep_loses_nothing(tmp_path, redis_server, make_sim, monkeypatch):
    from elo_per_token.contracts.records import JobResult

    weed = start_weed_on(tmp_path / "weed")
    try:
        for k, v in weed.s3_env().items():
            monkeypatch.setenv(k, v)
        sim = make_sim(api_key=FAULT_KEY, latency_ms=150, seed=6)
        bucket = "ept-" + uuid.uuid4().hex[:10]
        rig = fault_rig(tmp_path, sim.url, name="s3out", ledger=f"s3://{bucket}/ledger", s3=weed.s3_env())
        jobs, keys, log, led = rig.jobs, rig.keys, rig.log, rig.open_ledger()
        workers = rig.start_workers(2, redis_server.url)
        try:
            coord = rig.sweep(redis_server.url)
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
        facts = rig.facts()
        assert facts.jobs == len(keys) and facts.lost == 0 and facts.failed == 0 and facts.duplicates == 0, (
            facts
        )
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
        # job objects, failure records, the manifest, the Parquet segments the sweep compacts them into, and the
        # run's declared key space (planned/keys-*.parquet), its tasks' content digests (identity/tasks-*.json),
        # the jobs' transcripts (transcripts/), the calls of attempts that failed during the outage (spent/) and
        # the run's lease (lease/<generation>.json, coordinator/runlease.py; released, kept as the last holder)
        allowed = ("/jobs/", "/failures/", "/compact/part-", "/planned/keys-", "/identity/tasks-", "/transcripts/",
                   "/spent/", "/lease/")  # fmt: skip
        stray = [n for n in names if not n.endswith("manifest.json") and not any(p in n for p in allowed)]
        assert not stray, stray
        assert not [n for n in names if "/failures/" in n]
        assert weed.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
        if recording():
            record(
                "3: S3 outage",
                f"SeaweedFS stopped {outage:.0f} s after 10 of 60 jobs, restarted on its ports/dir",
                facts,
                len(keys),
                sim.control.stats()["requests"],
                clean_tokens(tmp_path, rig.suite, 10, 6),
                "no partial objects, no multipart leftovers, no failure records",
            )
    finally:
        weed.stop()
