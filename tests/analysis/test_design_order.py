"""PairData does not depend on the row order of the frames it is built from.

The frames reach analysis.design.pair_data through hash joins whose output order changes from run to run,
and the fit sums in array order: before pair_data sorted its input, arms.csv of a run read by run id and of
its job objects differed in the last digits of the bootstrap bounds, in about one run out of three
(issue 13, tests/ledger/test_keyspace.py).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from elo_per_token.analysis.bootstrap import bootstrap, fit_families
from elo_per_token.analysis.design import pair_data


def _frames(rng: np.random.Generator) -> tuple[pl.Series, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    n_tasks, n_arms = 40, 4
    fam = pl.Series("family", ["a" if t < 20 else "b" for t in range(n_tasks)])
    # Replicates: several rows per (task, winner, loser), weights 1/(n_a*n_b) as outcome_pairs makes them
    # (not exact in binary, so their sums depend on order).
    rows = [(t, w, lo, 1.0 / int(rng.choice([3, 6, 7, 12]))) for t in range(n_tasks) for w in range(n_arms)
            for lo in range(n_arms) for _ in range(int(rng.integers(0, 4))) if w != lo]  # fmt: skip
    pairs = pl.DataFrame(rows, schema=["task", "winner", "loser", "weight"], orient="row")
    tokens = pl.DataFrame(
        [(t, a, float(rng.integers(100, 5000))) for t in range(n_tasks) for a in range(n_arms)],
        schema=["task", "arm", "tokens"],
        orient="row",
    )
    groups = pl.DataFrame(
        [
            (t, a, int(rng.integers(0, 3)), int(rng.integers(1, 4)))
            for t in range(n_tasks)
            for a in range(n_arms)
        ],
        schema=["task", "arm", "level", "mass"],
        orient="row",
    )
    return fam, pairs, tokens, groups


def _build(fam, pairs, tokens, groups):
    return pair_data(fam, ["a", "b"], pairs, tokens, 4, groups=groups)


def test_pair_data_is_the_same_for_any_row_order():
    rng = np.random.default_rng(3)
    fam, pairs, tokens, groups = _frames(rng)
    ref = _build(fam, pairs, tokens, groups)
    for seed in range(5):
        shuf = [f.sample(fraction=1.0, shuffle=True, seed=seed) for f in (pairs, tokens, groups)]
        got = _build(fam, *shuf)
        for name in ("task", "winner", "loser", "weight", "task_family"):
            assert np.array_equal(getattr(ref, name), getattr(got, name)), name
        assert np.array_equal(ref.task_tokens, got.task_tokens, equal_nan=True)
        for name in ("task", "arm", "level", "mass"):
            assert np.array_equal(getattr(ref.outcome_groups, name), getattr(got.outcome_groups, name)), name


def test_bootstrap_bounds_are_bit_identical_for_any_row_order():
    rng = np.random.default_rng(4)
    fam, pairs, tokens, groups = _frames(rng)
    weights = np.array([0.5, 0.5])
    out = []
    for seed in (None, 1, 2):
        frames = (
            (pairs, tokens, groups)
            if seed is None
            else [f.sample(fraction=1.0, shuffle=True, seed=seed) for f in (pairs, tokens, groups)]
        )
        data = _build(fam, *frames)
        fits = fit_families(data, l2=0.01)
        out.append(bootstrap(data, weights, anchor=0, rounds=30, seed=7, l2=0.01, fits=fits))
    for other in out[1:]:
        for a, b in zip(_arrays(out[0]), _arrays(other), strict=True):
            assert a.tobytes() == b.tobytes()


def _arrays(result) -> list[np.ndarray]:
    arrs = [np.asarray(v) for v in vars(result).values() if isinstance(v, np.ndarray)]
    assert arrs, "bootstrap result exposes no arrays"
    return arrs
