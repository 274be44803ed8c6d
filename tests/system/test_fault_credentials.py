"""Fault 5: the key stops working mid-run (the simulator's api_key is switched at runtime via /_sim/config).
The sweep fails fast — no retry storm (401s counted at the simulator) — with a message naming the profile's
environment variable, never the key; once the key works again the same command resumes and completes."""

from __future__ import annotations

import json
import threading

import pytest
from fixtures_faults import FAULT_KEY, clean_tokens, fault_rig, record, recording, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.services]

ROTATED = "sk-rotated-9999999999999999abcd"


def test_401_mid_run_fails_fast_names_env_var_and_resumes(tmp_path, make_sim, monkeypatch):
    from elo_per_token.coordinator.status import failed_jobs, run_status
    from elo_per_token.coordinator.sweep import execute
    from elo_per_token.coordinator.sweep_tally import EGRESS_ABORT_AFTER
    from elo_per_token.egress.profiles import get_profile

    sim = make_sim(api_key=FAULT_KEY, latency_ms=40, seed=5)
    concurrency = 2
    rig = fault_rig(tmp_path, sim.url, name="cred", ledger=str(tmp_path / "ledger"), executor="local", per_family=15,
                    concurrency=concurrency)  # fmt: skip
    rig.use_in_process(monkeypatch)
    plan, jobs, keys, led = rig.plan, rig.jobs, rig.keys, rig.open_ledger()
    assert len(jobs) == 90
    prof = get_profile("fault-sim")

    result = {}
    t = threading.Thread(target=lambda: result.update(out=execute(plan, jobs, profile=prof, analyze=False)))
    t.start()
    wait_until(lambda: len(led.list_jobs("cred")) >= 15, 60, "15 jobs done")
    sim.control.set(api_key=ROTATED)  # the provider revokes our key
    t.join(120)
    assert not t.is_alive()
    out = result["out"]
    n401 = sim.control.stats()["by_status"].get("401", 0)
    # Fail fast: credential errors are never retried, and the sweep stops after a short streak of them instead
    # of sending one doomed request per remaining job (jobs already in flight may still each send one).
    assert out.tally.failed >= 1 and set(out.tally.failures) == {"credential"}, dict(out.tally.failures)
    # Bound: the streak that stops the sweep plus the jobs already submitted (2 x concurrency queued + running),
    # each sending at most its budget (3) of parallel samples — against one doomed job per remaining job before.
    bound = (EGRESS_ABORT_AFTER + 3 * concurrency) * 3
    assert n401 <= bound, (n401, bound, len(jobs) - out.tally.done)
    assert out.tally.failed <= EGRESS_ABORT_AFTER + 3 * concurrency < len(jobs) - out.tally.done
    assert not out.completed
    fails = led.list_failures("cred")
    assert fails and all(f["class"] == "credential" and f["attempts"] == 1 for f in fails.values())
    msg = next(iter(fails.values()))["message"]
    assert "EPT_SIM_API_KEY" in msg, msg
    blob = json.dumps(fails) + json.dumps(led.get_manifest("cred")) + str(out.tally.messages)
    assert FAULT_KEY not in blob and ROTATED not in blob

    # Fixed (the provider accepts the key again): the same sweep resumes; nothing that landed runs again.
    done_before = led.list_jobs("cred")
    first_requests = sim.control.stats()["requests"]
    sim.control.set(api_key=FAULT_KEY)
    sim.control.reset()
    st = run_status(led, "cred")
    assert st.failed == {"credential": len(fails)}
    again = execute(plan, jobs, profile=prof, analyze=False)
    assert again.ok and again.already_done == len(done_before)
    facts = rig.facts()
    assert facts.jobs == len(keys) and facts.lost == 0 and facts.duplicates == 0
    assert led.list_failures("cred") == {} and failed_jobs(run_status(led, "cred")) == []
    by_job = sim.control.stats()["by_job"]
    assert set(by_job) == keys - done_before
    assert all(by_job[k] == facts.calls_by_job[k] for k in by_job)
    if recording():
        record(
            "5: credential 401",
            f"key revoked after {len(done_before)} of 90 jobs; fixed; same sweep rerun",
            facts,
            len(keys),
            first_requests + sim.control.stats()["requests"],
            clean_tokens(tmp_path, rig.suite, 15, 5),
            f"{n401} requests got 401 before the sweep stopped ({out.tally.failed} jobs failed fast, attempts=1)",
        )
