"""A resumed sweep that runs no job still compacts the run (issue 26): an earlier session that stopped before
compacting (killed, or run with compaction off) leaves job objects that no segment holds."""

from __future__ import annotations

import pytest
from fixtures_faults import FAULT_KEY, fault_rig


@pytest.mark.services
def test_a_resume_with_nothing_to_run_compacts_what_an_earlier_session_left(tmp_path, make_sim, monkeypatch):
    from elo_per_token.coordinator.sweep import execute
    from elo_per_token.egress.profiles import get_profile

    sim = make_sim(api_key=FAULT_KEY, seed=2)
    rig = fault_rig(
        tmp_path, sim.url, name="resume", ledger=str(tmp_path / "ledger"), executor="local", per_family=2
    )
    rig.use_in_process(monkeypatch)
    prof = get_profile("fault-sim")
    first = execute(rig.plan, rig.jobs, profile=prof, analyze=False, compact=False)
    assert first.ok
    led = rig.open_ledger()
    assert not led.list_blobs("resume", "compact/")
    requests = sim.control.stats()["requests"]
    again = execute(rig.plan, rig.jobs, profile=prof, analyze=False)
    assert again.tally.done == 0 and sim.control.stats()["requests"] == requests  # nothing ran
    assert any(n.endswith(".parquet") for n in led.list_blobs("resume", "compact/")), led.list_blobs(
        "resume", "compact/"
    )
    assert again.compact_note and "compacted" in again.compact_note
    # A third resume has nothing new to fold and says nothing about it.
    third = execute(rig.plan, rig.jobs, profile=prof, analyze=False)
    assert third.compact_note is None
