"""Issue 23 item 14: a provider that returns no usage on any call. The sweep says that usage is missing and how
to get it (not a bare `N calls · 0 tokens`), and the analysis says the same instead of "found []"."""

from __future__ import annotations

import io

from fixtures_faults import FAULT_KEY, fault_rig
from rich.console import Console


def test_sweep_and_analysis_say_usage_is_missing_and_how_to_get_it(tmp_path, make_sim, monkeypatch):
    from elo_per_token.coordinator.sweep import execute, print_summary
    from elo_per_token.egress.profiles import get_profile

    sim = make_sim(api_key=FAULT_KEY, seed=3, rate_missing_usage=1.0)
    rig = fault_rig(tmp_path, sim.url, name="nousage", ledger=str(tmp_path / "ledger"), executor="local",
                    per_family=2, timeout=5.0, max_retries=1)  # fmt: skip
    rig.use_in_process(monkeypatch)
    out = execute(rig.plan, rig.jobs, profile=get_profile("fault-sim"), analyze=True)
    assert (
        out.tally.calls >= len(rig.jobs) and out.tally.tokens == 0
    )  # the calls happened; no usage came back
    buf = io.StringIO()
    print_summary(out, Console(file=buf, width=400, color_system=None))
    text = buf.getvalue()
    assert "usage missing" in text and "stream = false" in text and "LiteLLM" in text, text
    assert out.analysis is None and out.analysis_error and "no `usage`" in out.analysis_error, (
        out.analysis_error
    )
    assert "found []" not in out.analysis_error
