"""Tie share per arm and the tasks that separate it from the others.

Under ties-as-half, an arm that is much stronger on the few tasks that separate the arms can show a small
Elo difference when most tasks are solved (or failed) by every arm: "+5 Elo" then means "better on the
30 tasks where anything differs", not "no difference". The table shows, per arm, the share of its
comparisons that are ties and how many tasks have any decisive comparison involving it.
"""

from __future__ import annotations

import polars as pl

__all__ = ["tie_stats"]

_SCHEMA = {"arm": pl.String, "tie_share": pl.Float64, "separating_tasks": pl.Int64}


def _outcome_ties(groups: pl.DataFrame) -> pl.DataFrame:
    """Per (task, arm): comparison weight (other arms on the task) and tie weight, from outcome groups
    (analysis.pairs.outcome_groups: task_id, arm, level, mass). The tie weight of arm k on task t is
    sum_l mass_k(l) * (M_tl - mass_k(l)), M_tl the total mass of all arms at level l: no pair join."""
    g = groups.select(pl.col("task_id").cast(pl.String), pl.col("arm").cast(pl.String), "level", "mass")
    g = g.with_columns(
        pl.col("mass").sum().over("task_id", "level").alias("m_tl"),
        pl.col("arm").n_unique().over("task_id").alias("n_arms"),
    )
    return g.group_by("task_id", "arm").agg(
        ((pl.col("n_arms").first() - 1).cast(pl.Float64)).alias("total"),
        (pl.col("mass") * (pl.col("m_tl") - pl.col("mass"))).sum().alias("ties"),
    )


def _judgment_ties(judgments: pl.DataFrame) -> pl.DataFrame:
    j = judgments.select(
        pl.col("task_id").cast(pl.String),
        pl.col("arm_a").cast(pl.String),
        pl.col("arm_b").cast(pl.String),
        (pl.col("winner") == "tie").cast(pl.Float64).alias("tie"),
    )
    both = pl.concat(
        [
            j.select("task_id", pl.col("arm_a").alias("arm"), "tie"),
            j.select("task_id", pl.col("arm_b").alias("arm"), "tie"),
        ]
    )
    return both.group_by("task_id", "arm").agg(
        pl.len().cast(pl.Float64).alias("total"), pl.col("tie").sum().alias("ties")
    )


def tie_stats(groups: pl.DataFrame, judgments: pl.DataFrame, arms: list[str]) -> pl.DataFrame:
    """Per arm of `arms`: tie_share (tied comparison weight / all of its comparison weight; null without
    comparisons) and separating_tasks (tasks with at least one decisive comparison involving the arm).
    groups: outcome groups of the analysed arms; judgments: task_id, arm_a, arm_b, winner.

    Args:
        groups: Outcome groups of the analysed arms (analysis.pairs.outcome_groups).
        judgments: Judgment records: task_id, arm_a, arm_b, winner.
        arms: The arms to report, in order.
    """
    parts = []
    if groups.height:
        parts.append(_outcome_ties(groups.filter(pl.col("arm").cast(pl.String).is_in(arms))))
    jj = judgments.filter(
        pl.col("arm_a").cast(pl.String).is_in(arms) & pl.col("arm_b").cast(pl.String).is_in(arms)
    )
    if jj.height:
        parts.append(_judgment_ties(jj))
    base = pl.DataFrame({"arm": arms}, schema={"arm": pl.String})
    if not parts:
        return base.with_columns(
            pl.lit(None, pl.Float64).alias("tie_share"), pl.lit(0, pl.Int64).alias("separating_tasks")
        )
    per_task = pl.concat(parts).group_by("task_id", "arm").agg(pl.col("total").sum(), pl.col("ties").sum())
    per_arm = per_task.group_by("arm").agg(
        pl.when(pl.col("total").sum() > 0)
        .then(pl.col("ties").sum() / pl.col("total").sum())
        .alias("tie_share"),
        (pl.col("ties") < pl.col("total") - 1e-9).sum().cast(pl.Int64).alias("separating_tasks"),
    )
    return (
        base.join(per_arm, on="arm", how="left")
        .with_columns(pl.col("separating_tasks").fill_null(0))
        .select(list(_SCHEMA))
    )


def separating_pairs(
    groups: pl.DataFrame, judgments: pl.DataFrame, pairs: list[tuple[str, str | None]]
) -> list[int | None]:
    """For each (arm, other) pair: the tasks on which the two have a decisive comparison (their scores differ
    in some pair of replicates, or a judgment between them has a winner); None where other is None. The
    headline's "+5 Elo" against its `vs` arm is then read with the number of tasks it rests on. All pairs
    in a few joins (no loop over arms: a 1,000-arm run's groups hold millions of rows).

    Args:
        groups: Outcome groups of the analysed arms (analysis.pairs.outcome_groups).
        judgments: Judgment records: task_id, arm_a, arm_b, winner.
        pairs: (arm, other) pairs; other None for an arm with nothing to compare against.
    """
    m = pl.DataFrame(
        [(a, b) for a, b in pairs if b is not None], schema={"arm": pl.String, "vs": pl.String}, orient="row"
    )
    g = groups.select(pl.col("task_id").cast(pl.String), pl.col("arm").cast(pl.String), "level", "mass")
    ga = g.join(m, on="arm")
    gb = g.select("task_id", pl.col("arm").alias("vs"), "level", pl.col("mass").alias("mass_b"))
    both = (
        ga.select("task_id", "arm", "vs")
        .unique()
        .join(gb.select("task_id", "vs").unique(), on=["task_id", "vs"])
    )
    tie = (
        ga.join(gb, on=["task_id", "vs", "level"])
        .group_by("task_id", "arm")
        .agg((pl.col("mass") * pl.col("mass_b")).sum().alias("tie"))
    )
    sep = (
        both.join(tie, on=["task_id", "arm"], how="left")
        .filter(pl.col("tie").fill_null(0.0) < 1.0 - 1e-9)
        .select("task_id", "arm")
    )
    j = judgments.filter(pl.col("winner") != "tie").select(
        pl.col("task_id").cast(pl.String),
        pl.col("arm_a").cast(pl.String).alias("x"),
        pl.col("arm_b").cast(pl.String).alias("y"),
    )
    jd = pl.concat(
        [
            j.join(m, left_on=["x", "y"], right_on=["arm", "vs"]).select("task_id", pl.col("x").alias("arm")),
            j.join(m, left_on=["y", "x"], right_on=["arm", "vs"]).select("task_id", pl.col("y").alias("arm")),
        ]
    )
    counts = pl.concat([sep, jd]).unique().group_by("arm").len()
    n = dict(zip(counts["arm"].to_list(), counts["len"].to_list(), strict=True))
    return [None if b is None else int(n.get(a, 0)) for a, b in pairs]
