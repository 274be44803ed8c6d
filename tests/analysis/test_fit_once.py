"""Each family is fitted ONCE per analysis (issue 18).

"Once" means: the point Bradley-Terry fit of a family on all of its comparisons (analysis.bt.fit_bt_counts
on the family's K x K win-count matrix) runs exactly one time per `analyze` / `compare_runs`. The point
estimate, the fit diagnostics (report.json "fits") and the bootstrap's small-sample stretch all reuse it.
Bootstrap rounds are a different thing: resampled count matrices, fitted in batches by
analysis.bt.newton_batch (every round of every family exactly once, R rounds per family).

The fits run for real: the wrappers below count the calls and forward them to the real functions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from elo_per_token.analysis import bootstrap as bootstrap_mod
from elo_per_token.analysis import bt as bt_mod
from elo_per_token.analysis.pipeline import AnalysisOptions, analyze

ROOT = Path(__file__).resolve().parents[2]
LOGS = str(ROOT / "examples" / "logs")


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[np.ndarray]]:
    """Count every single fit (fit_bt_counts) and every batched fit (newton_batch), wherever it is called
    from: both the module that defines them and the module that calls them are patched."""
    seen: dict[str, list[np.ndarray]] = {"single": [], "batch": []}
    real_single, real_batch = bt_mod.fit_bt_counts, bt_mod.newton_batch

    def single(wins: np.ndarray, *args: object, **kw: object) -> bt_mod.BTFit:
        seen["single"].append(np.array(wins, dtype=float, copy=True))
        return real_single(wins, *args, **kw)

    def batch(wins: np.ndarray, *args: object, **kw: object) -> bt_mod.BatchFit:
        seen["batch"].append(np.asarray(wins).shape)
        return real_batch(wins, *args, **kw)

    for mod in (bt_mod, bootstrap_mod):
        monkeypatch.setattr(mod, "fit_bt_counts", single)
        monkeypatch.setattr(mod, "newton_batch", batch)
    return seen


def _family_wins(pairs: pl.DataFrame, arms: list[str], family: str) -> np.ndarray:
    """The family's K x K win counts, rebuilt here from the result's comparison rows."""
    k = len(arms)
    idx = {a: i for i, a in enumerate(arms)}
    rows = pairs.filter(pl.col("family").cast(pl.String) == family)
    wins = np.zeros((k, k))
    np.add.at(
        wins,
        (
            np.array([idx[a] for a in rows["winner"].cast(pl.String).to_list()], dtype=int),
            np.array([idx[a] for a in rows["loser"].cast(pl.String).to_list()], dtype=int),
        ),
        rows["weight"].to_numpy(),
    )
    return wins


@pytest.mark.parametrize("rounds", [0, 60])
def test_analyze_fits_each_family_once(counted: dict[str, list], rounds: int) -> None:
    res = analyze([LOGS], AnalysisOptions(rounds=rounds, seed=3, weights="math=0.4,code=0.4,tool_use=0.2"))
    assert len(res.families) == 3
    # Exactly one point fit per family, and each one is of a different family's full win matrix.
    assert len(counted["single"]) == len(res.families), [w.sum() for w in counted["single"]]
    for fam, fit in zip(res.families, res.fits, strict=True):
        expected = _family_wins(res.pairs, res.arms, fam)
        matches = [w for w in counted["single"] if w.shape == expected.shape and np.allclose(w, expected)]
        assert len(matches) == 1, fam
        assert fit.comparisons == pytest.approx(expected.sum())
    # Bootstrap rounds: batched fits only, covering rounds x families count matrices exactly once.
    if rounds == 0:
        assert counted["batch"] == []
    else:
        assert all(len(shape) == 3 for shape in counted["batch"])
        assert sum(shape[0] for shape in counted["batch"]) == rounds * len(res.families)
        assert res.elo_samples is not None and res.elo_samples.shape == (rounds, len(res.arms))


def test_point_fits_passed_in_give_the_same_numbers(counted: dict[str, list]) -> None:
    """point_estimate/bootstrap with fits= (what analyze does) equal their own-fitting form, without refitting."""
    from test_bootstrap import _data  # the bootstrap tests' synthetic two-family data

    from elo_per_token.analysis.bootstrap import bootstrap, fit_families, point_estimate

    data = _data(np.random.default_rng(5), np.array([[0.0, 0.3, 0.8], [0.0, 0.5, 0.2]]), 40, reps=1)
    w = np.array([0.5, 0.5])
    alone = point_estimate(data, w, anchor=0), bootstrap(data, w, anchor=0, rounds=20, seed=1)
    counted["single"].clear()
    fits = fit_families(data)
    shared = (
        point_estimate(data, w, anchor=0, fits=fits),
        bootstrap(data, w, anchor=0, rounds=20, seed=1, fits=fits),
    )
    assert len(counted["single"]) == 2  # fit_families: one per family; nothing else fitted a family again
    np.testing.assert_array_equal(alone[0][0], shared[0][0])
    np.testing.assert_array_equal(alone[1].elo, shared[1].elo)
    with pytest.raises(ValueError, match="one fit per family"):
        point_estimate(data, w, anchor=0, fits={"f0": fits["f0"]})


def test_compare_fits_each_family_once(counted: dict[str, list]) -> None:
    from test_compare import make_run

    from elo_per_token.analysis.compare import compare_runs
    from elo_per_token.analysis.compare_gate import FailRule

    res = compare_runs(make_run(1, n_tasks=40), make_run(2, n_tasks=40), rule=FailRule(), rounds=50, seed=0)
    assert len(counted["single"]) == len(res.families) == 2
    assert sum(shape[0] for shape in counted["batch"]) == 50 * len(res.families)
