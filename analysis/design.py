"""Polars frames -> analysis.bootstrap.PairData: the one place comparisons become the fit's arrays.

`ept analyze` (arms) and `ept compare` (players = run x arm) each number their tasks and players, then hand
the indexed frames here; the numpy layout of PairData is built nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from elo_per_token.analysis.bootstrap import OutcomeGroups, PairData

__all__ = ["pair_data"]


def pair_data(
    task_family: pl.Series,
    families: Sequence[str],
    pairs: pl.DataFrame,
    tokens: pl.DataFrame,
    n_arms: int,
    *,
    groups: pl.DataFrame | None = None,
    tie_weight: float = 0.5,
) -> PairData:
    """Indexed frames as PairData.

    task_family: the family name of task t at position t (task indices are positions in this series).
    pairs: task, winner, loser (integer indices), weight. tokens: task, arm, tokens (one row per task and
    arm that ran it; the rest of the [T, K] grid is NaN). groups (optional): task, arm, level, mass, see
    PairData.outcome_groups; tie_weight 0 when ties are dropped.

    Args:
        task_family: The family name of each task, by task index (position in the series).
        families: The family names, in index order.
        pairs: Explicit comparisons: task, winner, loser (integer indices), weight.
        tokens: task, arm, tokens: one row per task and arm that ran it.
        n_arms: K, the number of arms (indices 0..K-1).
        groups: Outcome groups with integer task and arm (analysis.pairs.outcome_groups; None: none).
        tie_weight: The win weight each side of a tie gets (0.5; 0 with --drop-ties).
    """
    # Canonical row order: the frames come out of hash joins whose order varies from run to run, and the
    # fit's float sums follow array order, so without this the same records give bootstrap bounds that
    # differ in the last digits between reads (e.g. a run read by its id and the same run read from its job
    # objects).
    pairs = pairs.sort("task", "winner", "loser", "weight")
    if groups is not None:
        groups = groups.sort("task", "arm", "level", "mass")
    fam_idx = {f: i for i, f in enumerate(families)}
    grid = np.full((task_family.len(), int(n_arms)), np.nan)
    grid[tokens["task"].to_numpy(), tokens["arm"].to_numpy()] = tokens["tokens"].to_numpy()
    og = None
    if groups is not None and groups.height:
        og = OutcomeGroups(
            task=groups["task"].to_numpy(),
            arm=groups["arm"].to_numpy(),
            level=groups["level"].to_numpy(),
            mass=groups["mass"].to_numpy().astype(float),
            tie_weight=tie_weight,
        )
    return PairData(
        task_family=task_family.replace_strict(fam_idx, return_dtype=pl.Int64).to_numpy(),
        task=pairs["task"].to_numpy(),
        winner=pairs["winner"].to_numpy(),
        loser=pairs["loser"].to_numpy(),
        weight=pairs["weight"].to_numpy().astype(float),
        n_arms=int(n_arms),
        families=families,
        task_tokens=grid,
        outcome_groups=og,
    )
