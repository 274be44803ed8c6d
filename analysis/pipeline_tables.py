"""The pipeline's table stage: returns tables, per strategy, vs the frontier, per family, per arm, cost."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.analysis.breakdown import arm_breakdown, cost_arrays, parse_prices
from elo_per_token.analysis.result import AnalysisOptions
from elo_per_token.analysis.stages import (
    ArmSelection,
    Comparisons,
    Design,
    Inputs,
    Intervals,
    PointFit,
    Tables,
)

if TYPE_CHECKING:
    from elo_per_token.analysis.curve import ArmCurve


def label_strings(df: pl.DataFrame) -> pl.DataFrame:
    """The result's tables hold labels as strings, as before the records frame went Categorical: views and
    reports join them with their own string columns.

    Args:
        df: A result table.
    """
    return df.with_columns(pl.col(pl.Categorical).cast(pl.String))


def make_tables(
    inp: Inputs,
    sel: ArmSelection,
    design: Design,
    point: PointFit,
    iv: Intervals,
    opt: AnalysisOptions,
    comp: Comparisons | None = None,
) -> Tables:
    """The returns table (and over cost when priced), per strategy, vs the frontier, per family, per arm.

    The headline table (analysis.frontier.headline_table) is against the previous frontier arm, with
    partial arms marked and off the frontier.

    Args:
        inp: the run's records.
        sel: the arms analysed.
        design: the comparison design.
        point: the point fit.
        iv: the bootstrap intervals.
        opt: the analysis options.
        comp: the comparisons; adds each arm's tie share (analysis.ties).
    """
    from elo_per_token.analysis.curve import ArmCurve
    from elo_per_token.analysis.frontier import families_seen, headline_table
    from elo_per_token.analysis.returns import frontier_steps_table, per_strategy_table

    arms, elo, tok, elo_s, tok_s = sel.arms, point.elo, point.tokens, iv.elo, iv.tokens
    strategies = sel.info["strategy"].to_list()
    budgets = [int(b) for b in sel.info["budget_n"].to_list()]
    partial = families_seen(point.per_family_theta, design.weights, arms)
    eligible = np.array([a not in partial for a in arms])  # partial arms are off every table's frontier
    curve = ArmCurve(arms, strategies, budgets, tok, elo, elo_s, tok_s, level=opt.level, eligible=eligible)
    table = headline_table(
        curve,
        partial=partial,
        per_family_theta=point.per_family_theta,
        round_theta=None if iv.boot is None else iv.boot.family_theta,
        weights=design.weights,
    )
    prices = parse_prices(opt.prices)
    # Lazy: the breakdown's queries read their few columns of the analysed arms' rows, no copy of the frame.
    breakdown = label_strings(arm_breakdown(inp.frame.lazy().filter(pl.col("arm").is_in(arms)), prices))
    cost_table = None if prices is None else _cost_table(curve, (arms, tok, tok_s), breakdown)
    unweighted = pl.DataFrame({"arm": arms, "tokens_per_task_unweighted": point.tokens_unweighted})
    table = table.join(unweighted.with_columns(pl.col(pl.Float64).fill_nan(None)), on="arm", how="left")
    if comp is not None:
        table = _with_ties(table, comp, design, inp, arms)
    return Tables(
        strategies=strategies,
        budgets=budgets,
        table=table,
        per_strategy=per_strategy_table(curve),
        vs_frontier=frontier_steps_table(curve),
        breakdown=breakdown,
        cost_table=cost_table,
        per_family=_per_family_table(design, arms, point.per_family_theta, iv, opt.level),
        partial=partial,
    )


def _cost_table(
    curve: ArmCurve,
    arm_tokens: tuple[list[str], NDArray[np.float64], NDArray[np.float64] | None],
    breakdown: pl.DataFrame,
) -> pl.DataFrame:
    """The returns table over cost (priced runs): cost_per_task in USD, returns per $1. arm_tokens: (arms,
    tokens per task, bootstrap tokens or None) the cost is priced from."""
    from elo_per_token.analysis.returns import returns_table

    cost, cost_s = cost_arrays(*arm_tokens, breakdown)
    # The returns table over cost: "per 1k" of (USD x 1000) is per $1.
    cost_curve = replace(curve, tokens=cost * 1000, tokens_samples=None if cost_s is None else cost_s * 1000)
    cost_table = returns_table(cost_curve).rename(
        lambda c: c.replace("tokens_per_task", "cost_per_task").replace("per_1k", "per_usd")
    )
    return cost_table.with_columns(pl.col("cost_per_task") / 1000)


def _with_ties(
    table: pl.DataFrame, comp: Comparisons, design: Design, inp: Inputs, arms: list[str]
) -> pl.DataFrame:
    """The headline table with each arm's tie share and the pairs separating it from its `vs` arm."""
    from elo_per_token.analysis.ties import separating_pairs, tie_stats

    groups = comp.groups_full.filter(pl.col("family").is_in(design.families))
    table = table.join(tie_stats(groups, inp.judgments, arms), on="arm", how="left")
    vs_pairs = list(zip(table["arm"].to_list(), table["vs"].to_list(), strict=True))
    return table.with_columns(
        pl.Series("separating_vs", separating_pairs(groups, inp.judgments, vs_pairs), dtype=pl.Int64)
    )


def _per_family_table(
    design: Design,
    arms: list[str],
    per_family_theta: dict[str, NDArray[np.float64]],
    iv: Intervals | None = None,
    level: float = 0.95,
) -> pl.DataFrame:
    """family, weight, arm, theta (centred), elo and its interval (elo_lo, elo_hi: percentiles of the
    family's own bootstrap rounds, null without rounds or where the family never observed the arm)."""
    import warnings

    from elo_per_token.analysis.merge import ELO_BASE, ELO_SCALE

    rows = []
    q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
    for f in design.families:
        th = np.asarray(per_family_theta[f], dtype=float)
        centred = th - np.nanmean(th)
        lo = hi = np.full(len(arms), np.nan)
        if iv is not None and iv.boot is not None and f in iv.boot.family_theta:
            r = iv.boot.family_theta[f]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # an arm the family never saw: all NaN
                lo, hi = ELO_BASE + ELO_SCALE * np.nanpercentile(
                    r - np.nanmean(r, axis=1, keepdims=True), q, axis=0
                )
        rows += [
            {
                "family": f,
                "weight": design.weights[f],
                "arm": a,
                "theta": None if math.isnan(centred[i]) else float(centred[i]),
                "elo": None if math.isnan(centred[i]) else float(ELO_BASE + ELO_SCALE * centred[i]),
                "elo_lo": None if math.isnan(centred[i]) or math.isnan(lo[i]) else float(lo[i]),
                "elo_hi": None if math.isnan(centred[i]) or math.isnan(hi[i]) else float(hi[i]),
            }
            for i, a in enumerate(arms)
        ]
    return pl.DataFrame(
        rows,
        schema={
            "family": pl.String,
            "weight": pl.Float64,
            "arm": pl.String,
            "theta": pl.Float64,
            "elo": pl.Float64,
            "elo_lo": pl.Float64,
            "elo_hi": pl.Float64,
        },
    )
