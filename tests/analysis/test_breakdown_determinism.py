"""Costs per task are the same, to the last bit, every time the same records are analysed.

polars' group_by returns groups in a different order from run to run; the per-arm mean cost is a float sum over
those groups, so without a fixed order report.json's costs moved in the last bits between two analyses of one
ledger (seen on the demo's report.json).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from elo_per_token.analysis.breakdown import Prices, task_costs


def _calls(n_tasks: int = 20_000, seed: int = 7) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = n_tasks * 3
    return pl.DataFrame(
        {
            "task_id": [f"t{i % n_tasks:05d}" for i in range(n)],
            "arm": [f"arm{i // n_tasks}" for i in range(n)],
            "strategy": ["greedy"] * n,
            "role": ["solver"] * n,
            "replicate": [0] * n,
            "prompt_tokens": rng.integers(1, 5000, n),
            "completion_tokens": rng.integers(1, 5000, n),
            "cached_tokens": rng.integers(0, 50, n),
            "cache_creation_tokens": pl.Series([None] * n, dtype=pl.Int64),
        }
    )


def test_task_costs_have_one_order_and_one_mean() -> None:
    calls = _calls()
    prices = Prices(input=0.15, output=0.6, cached_input=0.075)
    runs = [task_costs(calls.sample(fraction=1.0, shuffle=True, seed=s), prices) for s in range(4)]
    for r in runs[1:]:
        assert r.equals(runs[0])
    means = {
        r.group_by("arm").agg(pl.col("cost").mean()).sort("arm")["cost"].to_list().__repr__() for r in runs
    }
    assert len(means) == 1
