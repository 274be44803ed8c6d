"""Fault 4: provider faults from the simulator during a sweep — 429 storms with Retry-After, 5xx bursts, hangs
past the timeout, malformed JSON, missing `usage`, fewer choices than asked. Each is retried or recorded per
its error class; missing usage is flagged on the record and in the token report, never counted as zero."""

from __future__ import annotations

import json

import pytest
from fixtures_faults import FAULT_KEY, clean_tokens, fault_rig, record, recording

pytestmark = [pytest.mark.slow, pytest.mark.services]

# Every fault once, in this order, before the rates take over (the simulator's `script`).
# hang_s far beyond the client's 1.5 s timeout: a hung request must still be hanging when the stats are read (with
# 3 s, the end-of-sweep compaction gave the hung handlers time to answer, and the count below came out short).
SCRIPT = ["429", "429", "429", "500", "500", "hang", "malformed_json", "missing_usage", "fewer_choices", "ok"]
RATES = dict(rate_429=0.06, retry_after=0.2, rate_500=0.06, rate_hang=0.02, hang_s=60.0, rate_malformed_json=0.04,
             rate_missing_usage=0.08, rate_fewer_choices=0.25)  # fmt: skip


def test_provider_faults_are_retried_or_recorded_and_missing_usage_is_flagged(
    tmp_path, make_sim, monkeypatch
):
    from elo_per_token.coordinator.sweep import execute
    from elo_per_token.egress.profiles import get_profile

    sim = make_sim(api_key=FAULT_KEY, seed=8, script=SCRIPT, **RATES)
    rig = fault_rig(tmp_path, sim.url, name="prov", ledger=str(tmp_path / "ledger"), executor="local", per_family=8,
                    timeout=1.5, max_retries=4, supports_n=True)  # fmt: skip
    rig.use_in_process(monkeypatch)
    jobs, keys = rig.jobs, rig.keys
    out = execute(rig.plan, jobs, profile=get_profile("fault-sim"), analyze=False)
    stats = sim.control.stats()
    faults = stats["by_fault"]
    for f in ("429", "500", "hang", "malformed_json", "missing_usage", "fewer_choices"):
        assert faults.get(f, 0) >= 1, faults

    led = rig.open_ledger()
    facts = rig.facts()
    # Nothing lost: every job has its result or a recorded failure of a retryable class (retries exhausted).
    assert facts.lost == 0 and facts.duplicates == 0, facts
    fails = led.list_failures("prov")
    assert {f["class"] for f in fails.values() if f["job"]["run_id"] == "prov"} <= {"transient", "rate_limit"}
    assert out.tally.done + out.tally.failed == len(jobs)
    assert facts.jobs >= len(jobs) - 3, (facts.jobs, len(jobs))

    lines = [
        json.loads(x) for k in led.list_jobs("prov") for x in led.get_job("prov", k).decode().splitlines()
    ]
    calls = [x for x in lines if x["kind"] == "call"]
    # Retries are visible on the records: attempts > 1 where a 429/5xx/hang/malformed reply came first, and the
    # server never saw fewer requests than the recorded attempts of the stored jobs.
    assert sum(c["attempts"] for c in calls) > len(calls)
    by_job = stats["by_job"]
    per_job_attempts: dict[str, int] = {}
    for c in calls:
        per_job_attempts[c["job_key"]] = per_job_attempts.get(c["job_key"], 0) + c["attempts"]
    assert all(by_job.get(k, 0) >= n for k, n in per_job_attempts.items())
    # Hung requests never got a status: the client gave up at its timeout and retried.
    assert stats["requests"] - sum(stats["by_status"].values()) == faults["hang"]

    # Missing usage: null on the record AND flagged, never zeros.
    missing = [c for c in calls if c["usage"] is None]
    assert missing and all(c["usage_missing"] for c in missing)
    assert all(c["usage"]["prompt_tokens"] > 0 for c in calls if c["usage"] is not None)
    # Fewer choices than asked is recorded as such (the strategy makes up the shortfall with more calls).
    assert any(c["n_returned"] < c["n_requested"] for c in calls), "no short reply recorded"

    # The token report flags the calls without usage per arm and gives no per-task cost for their tasks.
    from elo_per_token.analysis.io import read_records
    from elo_per_token.analysis.tokens import arm_tokens

    records = read_records([str(led.run_url("prov")) + "/jobs"])
    table = {r["arm"]: r for r in arm_tokens(records.calls).to_dicts()}
    for arm in {c["arm"] for c in missing}:
        n_missing = sum(1 for c in missing if c["arm"] == arm)
        assert table[arm]["calls_missing_usage"] == n_missing, table[arm]
    known = {}
    for c in calls:
        if c["usage"] is not None and c.get("role") != "judge":
            known[c["arm"]] = (
                known.get(c["arm"], 0) + c["usage"]["prompt_tokens"] + c["usage"]["completion_tokens"]
            )
    for arm, row in table.items():
        assert row["total_tokens"] == known[arm], (arm, row)
    if recording():
        injected = ", ".join(f"{k} x{v}" for k, v in sorted(faults.items()) if k != "ok")
        record(
            "4: provider faults",
            f"simulator faults over {stats['requests']} requests: {injected}",
            facts,
            len(keys),
            stats["requests"],
            clean_tokens(tmp_path, rig.suite, 8, 8, supports_n=True),
            f"{len(missing)} calls without usage flagged (not zero); short replies made up by extra calls, "
            "so tokens differ from the clean run by design",
        )
