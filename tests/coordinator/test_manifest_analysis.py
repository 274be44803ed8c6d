"""A run's analysis settings travel as plain data in its manifest (contracts/manifest.py): the coordinator
writes them, `ept report RUN` reads them without importing the coordinator. Older manifests (no `analysis`
entry) are read from their stored plan; values that make no sense give the defaults with a note."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.analysis.io.sources import plan_run
from elo_per_token.analysis.pipeline import AnalysisOptions
from elo_per_token.analysis.surface_options import _settings, run_options
from elo_per_token.contracts.errors import InputError
from elo_per_token.coordinator.manifest import analysis_settings
from elo_per_token.coordinator.plan import parse_plan
from elo_per_token.coordinator.sweep import plan_analysis_options
from elo_per_token.ledger import open_ledger

PLAN = """
name = "wtest"
suites = ["math"]
seed = 11
bootstrap_rounds = 37
anchor = "greedy@1"
[weights]
math = 2.0
code = 0.5
[[arms]]
strategy = "greedy"
budgets = [1]
"""
PROFILE = {"name": "p", "price_in_per_1m": 0.15, "price_out_per_1m": 0.6}


def _run_with(tmp_path: Path, manifest: dict[str, Any]) -> str:
    led = open_ledger(str(tmp_path / "ledger"))
    led.put_manifest("wtest", manifest)
    return led.run_url("wtest")


def _expected() -> AnalysisOptions:
    plan = parse_plan(PLAN)
    return dataclasses.replace(plan_analysis_options(plan), prices="in=0.15,out=0.6")


def test_the_report_reads_the_settings_the_coordinator_wrote(tmp_path: Path) -> None:
    plan = parse_plan(PLAN)
    url = _run_with(tmp_path, {"plan": {"name": "other"}, "profile": PROFILE,
                               "analysis": analysis_settings(plan, PROFILE)})  # fmt: skip
    opts, source = run_options([url])
    assert opts == _expected()
    assert opts.weights == "code=0.5,math=2.0" and opts.rounds == 37 and opts.seed == 11
    assert "wtest's plan" in source


def test_an_older_manifest_is_read_from_its_stored_plan(tmp_path: Path) -> None:
    plan = parse_plan(PLAN)
    url = _run_with(tmp_path, {"plan": plan.raw, "profile": PROFILE})
    opts, _ = run_options([url])
    assert opts == _expected()


def test_a_stored_plan_with_nonsense_gives_the_defaults_with_a_note(tmp_path: Path) -> None:
    url = _run_with(tmp_path, {"plan": {"name": "wtest", "seed": "seven"}, "profile": PROFILE})
    opts, source = run_options([url])
    assert opts == AnalysisOptions(prices="in=0.15,out=0.6")
    assert "defaults" in source and "seed" in source


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)
KEYS = st.sampled_from(["weights", "anchor", "rounds", "seed", "bootstrap_rounds", "prices", "x"])


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.dictionaries(KEYS, JSON, max_size=6), plan=st.booleans())
def test_any_manifest_entry_gives_options_or_a_reason(data: dict[str, Any], plan: bool) -> None:
    """Manifests come from other tools too: whatever the entry holds, the answer is valid options or a
    reason, fast, never an exception."""
    t0 = time.perf_counter()
    out, problem = _settings(data, plan=plan)
    assert time.perf_counter() - t0 < 1.0
    if problem is None:
        opts = AnalysisOptions(**out)
        assert isinstance(opts.rounds, int) and 0 <= opts.rounds <= 100_000
        assert isinstance(opts.seed, int) and 0 <= opts.seed < 2**63
        assert opts.weights is None or isinstance(opts.weights, str)
    else:
        assert out == {} and isinstance(problem, str) and problem


def test_a_plan_file_names_its_run_and_ledger(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text(PLAN)
    assert plan_run(str(f)) == ("wtest", "./ept-out/ledger")
    f.write_text('ledger = "/data/led"\n' + PLAN)
    assert plan_run(str(f)) == ("wtest", "/data/led")
    f.write_text("name = [\n")
    with pytest.raises(InputError) as e:
        plan_run(str(f))
    assert e.value.file == str(f) and "not a valid plan" in e.value.message
    f.write_text('suites = ["math"]\n')
    with pytest.raises(InputError) as e:
        plan_run(str(f))
    assert e.value.field == "name"
