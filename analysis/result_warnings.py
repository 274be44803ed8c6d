"""The analysis' warnings: ties, arms on different task sets, partial arms, unresolved ratios, in pipeline order."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import polars as pl

from elo_per_token.analysis.result import AnalysisOptions
from elo_per_token.analysis.stages import (
    Stages,
)

if TYPE_CHECKING:
    pass


def decisive_families(groups: pl.DataFrame, judgments: pl.DataFrame, arms: list[str]) -> set[str]:
    """Families with at least one decisive (not tied) comparison between two of `arms`, without building
    pairs: a task where two different arms scored and two scores differ (some pair of replicates of
    different arms then differs), or a judgment with a winner.

    Args:
        groups: Outcome groups of the analysed arms (analysis.pairs.outcome_groups).
        judgments: Judgment records: task_id, arm_a, arm_b, winner.
        arms: The arms, in order.
    """
    g = groups.filter(pl.col("arm").is_in(arms))
    tasks = (
        g.group_by("task_id", "family")
        .agg(pl.col("arm").n_unique().alias("n_arms"), pl.col("level").n_unique().alias("n_levels"))
        .filter((pl.col("n_arms") > 1) & (pl.col("n_levels") > 1))
    )
    j = judgments.filter(
        pl.col("arm_a").is_in(arms) & pl.col("arm_b").is_in(arms) & (pl.col("winner") != "tie")
    )
    return set(tasks["family"].to_list()) | set(j["family"].to_list())


def tie_warnings(families: list[str], decisive: set[str]) -> list[str]:
    """The warnings when comparisons are all ties: everywhere (no signal), or in some families.

    Args:
        families: The analysed families.
        decisive: Those with a decisive comparison (decisive_families).
    """
    if not decisive:
        return [
            "no signal: every comparison is a tie (equal scores), so the data say nothing about which arm is "
            "stronger; every Elo is 1000 by construction, not by measurement, and the frontier only "
            "reflects cost"
        ]
    return [
        f"family {f}: every comparison is a tie, so it carries no information about strength"
        for f in families
        if f not in decisive
    ]


def collect_warnings(st: Stages, opt: AnalysisOptions) -> list[str]:
    """Every stage's warnings in pipeline order, then those read off the tables; skipped lines first.

    Args:
        st: The pipeline's stages.
        opt: The analysis options.
    """
    from elo_per_token.analysis.returns import family_heterogeneity

    inp, comp, sel, design, point, iv, tables = st.inp, st.comp, st.sel, st.design, st.point, st.iv, st.tables

    warnings = comp.warnings + sel.warnings + design.warnings + point.warnings + iv.warnings
    warnings += _task_set_warnings(tables.breakdown)
    warnings += _partial_warnings(tables.partial)
    if iv.boot is not None:
        warnings += _ratio_warnings(tables.table, opt.rounds)
        warnings += family_heterogeneity(
            point.per_family_theta,
            iv.boot.family_theta,
            design.weights,
            sel.arms,
            alpha=opt.heterogeneity_alpha,
        )
    if inp.skipped:
        warnings.insert(0, f"skipped {len(inp.skipped)} bad line(s) (--skip-bad); first: {inp.skipped[0]}")
    return warnings


def _task_set_warnings(breakdown: pl.DataFrame) -> list[str]:
    """Arms are compared on the tasks they attempted: say so when those sets differ (an arm missing tasks —
    jobs that failed on egress and wrote no result — is compared on fewer, and its cost is over fewer)."""
    short = breakdown.filter(pl.col("tasks_attempted").fill_null(0) < pl.col("tasks_attempted").max())
    if short.height == 0:
        return []
    # polars types a Series' max as any Python value; this column holds task counts (integers or null).
    most = int(cast("int | None", breakdown["tasks_attempted"].max()) or 0)
    shown = ", ".join(f"{r['arm']} {r['tasks_attempted'] or 0}" for r in short.iter_rows(named=True))
    return [
        f"arms attempted different task sets (most: {most} tasks; {shown}): Elo and tokens per task of these arms "
        "come from fewer tasks — `ept status`/`ept retry` show the jobs without a result"
    ]


def _partial_warnings(partial: dict[str, list[str]]) -> list[str]:
    from elo_per_token.analysis.frontier import seen_label

    return [
        f"{arm}: measured in {seen_label(seen)}: its global Elo assumes no family x arm interaction, which one "
        "family cannot test; it is kept off the frontier and its ΔElo is over the families it shares"
        for arm, seen in partial.items()
    ]


def _ratio_warnings(table: pl.DataFrame, rounds: int) -> list[str]:
    """Never silent about the ratio: which rows have no ΔElo per 1k (unresolved token step) and how many
    rounds had a token step <= 0 (they enter the interval at +-inf instead of being dropped)."""
    out = []
    rows = table.filter(pl.col("per_1k_resolved").is_not_null())
    unresolved = rows.filter(~pl.col("per_1k_resolved"))
    if unresolved.height:
        out.append(
            "ΔElo per 1k tokens not reported for "
            + ", ".join(
                f"{r['arm']} ({r['per_1k_note'] or 'unresolved'})" for r in unresolved.iter_rows(named=True)
            )
            + ": a token step whose interval includes 0, below a few percent of the cost, or a ratio whose "
            "interval is many times its value says nothing about the return per token"
        )
    edge = rows.filter(pl.col("per_1k_resolved") & (pl.col("per_1k_nonpositive_rounds") > 0))
    for r in edge.iter_rows(named=True):
        out.append(
            f"{r['arm']}: {r['per_1k_nonpositive_rounds']} of {rounds} bootstrap rounds had a token step <= 0; "
            "they count at the far end of the ΔElo per 1k interval (not dropped)"
        )
    return out
