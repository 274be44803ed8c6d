"""Issue 12: the statistics' edge cases, reproduced with synthetic data of known truth (testkit/fixtures_stats.py)
through `analyze` (and the CLI where the exit code matters). Each test failed before the fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_ept
from fixtures_stats import ELO_SCALE, Arm, Experiment, pseudo_true_theta, write_experiment

from elo_per_token.analysis.pipeline import AnalysisOptions, analyze

ROOT = Path(__file__).resolve().parents[2]
ARMS = [Arm("greedy", 1, 0.0, 1000.0), Arm("vote", 4, 0.5, 4000.0), Arm("best", 8, 0.8, 8000.0)]


def _row(result, arm: str) -> dict:
    return next(r for r in result.table.iter_rows(named=True) if r["arm"] == arm)


def test_one_task_family_is_left_out_with_a_warning(tmp_path: Path) -> None:
    # Case 1: a family of one task (nearly separated comparisons) used to swing the global Elo by hundreds
    # of points with a tight interval (every round redraws the same task) and no warning.
    exp = Experiment(ARMS, {"math": 80, "code": 80, "tiny": 1}, mode="judgment")
    f = write_experiment(tmp_path / "e.jsonl", exp, seed=4)
    res = analyze([str(f)], AnalysisOptions(rounds=300, seed=1))
    assert res.excluded_families == ["tiny"]
    assert res.family_weights["tiny"] == 0.0 and res.family_weights["math"] == pytest.approx(0.5)
    assert any(w.startswith("family tiny: only 1 task(s), below the minimum of 5") for w in res.warnings)
    truth = 1000 + ELO_SCALE * (np.array([a.theta for a in ARMS]) - ARMS[0].theta)
    for a, t in zip(ARMS, truth, strict=True):
        r = _row(res, a.label)
        assert r["elo_lo"] <= t <= r["elo_hi"], (a.label, r["elo_lo"], t, r["elo_hi"])
    # --min-tasks 0 keeps it (the user's call), still with the small-sample warning.
    kept = analyze([str(f)], AnalysisOptions(rounds=50, seed=1, min_tasks=0))
    assert kept.excluded_families == [] and kept.family_weights["tiny"] > 0
    assert any("family tiny: only 1 task(s)" in w and "no interval" in w for w in kept.warnings)
    # ... and since one task cannot be resampled, nothing merged with it gets an interval (not a fake one).
    assert all(r["elo_lo"] is None for r in kept.table.iter_rows(named=True))


def test_small_family_widens_its_interval_and_warns(tmp_path: Path) -> None:
    # A family of 12 tasks stays in the merge, but its bootstrap deviations are stretched (expanded
    # percentile: sqrt(n/(n-1)) * t/z = 1.17 at 12 tasks) and a warning says the interval is approximate.
    exp = Experiment(ARMS, {"math": 12}, mode="judgment")
    f = write_experiment(tmp_path / "e.jsonl", exp, seed=2)
    res = analyze([str(f)], AnalysisOptions(rounds=400, seed=3))
    assert any("family math: only 12 task(s) (fewer than 30)" in w for w in res.warnings)
    from elo_per_token.analysis.bootstrap import small_sample_factor

    s = small_sample_factor(12)
    assert 1.15 < s < 1.2
    # The spread of the rounds around the point is s times that of a plain percentile bootstrap.
    d = res.elo_samples[:, 2] - res.elo_samples[:, 0]
    point = res.elo[2] - res.elo[0]
    plain = point + (d - point) / s
    assert np.std(d) == pytest.approx(s * np.std(plain))


def test_tokens_are_weighted_like_elo(tmp_path: Path) -> None:
    # Case 5: `--weights math=1` changed Elo but not tokens per task (pooled over all families).
    arms = [Arm("greedy", 1, 0.0, 1000.0), Arm("vote", 4, 0.5, 4000.0)]
    a = write_experiment(tmp_path / "a.jsonl", Experiment(arms, {"math": 40}), seed=1)
    b = write_experiment(tmp_path / "b.jsonl", Experiment([Arm("greedy", 1, 0.0, 3000.0), Arm("vote", 4, 0.5, 12000.0)],
                                                         {"code": 40}), seed=2)  # fmt: skip
    both = analyze([str(a), str(b)], AnalysisOptions(rounds=0))
    math_only = analyze([str(a), str(b)], AnalysisOptions(rounds=0, weights="math=1"))
    alone = analyze([str(a)], AnalysisOptions(rounds=0))
    for arm in ("greedy@1", "vote@4"):
        # Weighted: exactly the math-only figure; the unweighted pooled figure is kept as its own column.
        assert _row(math_only, arm)["tokens_per_task"] == pytest.approx(_row(alone, arm)["tokens_per_task"])
        assert _row(math_only, arm)["tokens_per_task_unweighted"] == pytest.approx(
            _row(both, arm)["tokens_per_task"]
        )
        assert (
            _row(math_only, arm)["tokens_per_task_unweighted"] > 1.5 * _row(math_only, arm)["tokens_per_task"]
        )


def test_token_step_not_resolved_says_so(tmp_path: Path) -> None:
    # Case 3: 4000 vs 4050 tokens (1% apart). The ratio is not printed as a number; the cell and a
    # warning say why.
    arms = [Arm("a", 1, 0.0, 4000.0), Arm("b", 1, 0.1, 4050.0)]
    f = write_experiment(tmp_path / "e.jsonl", Experiment(arms, {"math": 100, "code": 100}), seed=5)
    res = analyze([str(f)], AnalysisOptions(rounds=300, seed=0))
    r = res.table.row(1, named=True)
    assert r["per_1k_resolved"] is False and r["d_elo_per_1k"] is None
    assert r["per_1k_nonpositive_rounds"] > 0
    assert any(w.startswith("ΔElo per 1k tokens not reported for b@1") for w in res.warnings)
    from elo_per_token.analysis.report_rows import returns_rows

    assert "token step unresolved" in returns_rows(res.table)[1]


def test_no_signal_warns_and_drop_ties_stops_clearly(tmp_path: Path) -> None:
    # Case 6: every score equal -> every arm 1000 [1000, 1000], all "on the frontier", no warning; and
    # --drop-ties stopped with "found []".
    rows = []
    for t in range(20):
        for strat, tok in (("greedy", 100), ("vote", 400)):
            rows.append({"task_id": f"math-{t}", "strategy": strat, "budget_n": 1,
                         "usage": {"prompt_tokens": tok, "completion_tokens": 10}})  # fmt: skip
            rows.append(
                {"kind": "outcome", "task_id": f"math-{t}", "strategy": strat, "budget_n": 1, "score": 1.0}
            )
    f = tmp_path / "ties.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = analyze([str(f)], AnalysisOptions(rounds=50))
    assert any(w.startswith("no signal: every comparison is a tie") for w in res.warnings)
    proc = run_ept("analyze", str(f), "--drop-ties", "--rounds", "10", cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    err = " ".join(proc.stderr.split())
    assert (
        "field '--drop-ties': all 20 comparisons are ties (equal scores), so dropping ties leaves nothing"
        in err
    )
    assert "found []" not in err


def test_frontier_probability_and_vs_frontier_view(tmp_path: Path) -> None:
    # Case 4: a dominated arm (weaker and dearer than vote@4) sits between vote@4 and best@8; the vs-frontier
    # view measures best@8 against vote@4, and every arm carries its bootstrap frontier probability.
    arms = [*ARMS, Arm("bad", 2, -0.6, 6000.0)]
    f = write_experiment(
        tmp_path / "e.jsonl", Experiment(arms, {"math": 150, "code": 150}, mode="judgment"), seed=8
    )
    res = analyze([str(f)], AnalysisOptions(rounds=300, seed=2))
    probs = dict(zip(res.table["arm"], res.table["frontier_prob"], strict=True))
    assert probs["bad@2"] < 0.05 and probs["greedy@1"] == 1.0 and probs["best@8"] > 0.95
    vs = {r["arm"]: r for r in res.vs_frontier.iter_rows(named=True)}
    assert vs["best@8"]["vs"] == "vote@4" and vs["bad@2"]["vs"] == "vote@4"
    assert vs["best@8"]["d_elo"] == pytest.approx(_row(res, "best@8")["elo"] - _row(res, "vote@4")["elo"])
    doc = res.to_json()
    assert doc["vs_frontier"] and "frontier_prob" in doc["table"][0]


def test_pseudo_truth_shrinks_binary_theta() -> None:
    # What theta means for binary outcomes (docs/statistics.md): ties between equal scores shrink it.
    th = np.array([0.0, 0.5, 1.0])
    pt = pseudo_true_theta(th)
    assert np.all(np.abs(np.diff(pt)) < np.diff(th))
    assert np.allclose(pseudo_true_theta(th, "judgment"), th - th.mean())
