"""Pairwise comparisons inside each task, built with polars joins.

From outcome records: within a task, every replicate of arm a meets every replicate of arm b; the
higher score wins, equal scores tie. A tie is two rows (a beats b, b beats a) of half weight each,
or is dropped with drop_ties. Each meeting weighs 1/(n_a*n_b), n = replicates of that arm on the task,
so one task and one pair of arms contribute a total weight of 1 whatever the replicate counts: a task
run three times is not three times as informative about the task distribution as one run once.

From judgment records: used as given, weight 1 each (a tie: two rows of 0.5).

Output columns: task_id, family, winner, loser (arm labels), weight, source ("outcome" | "judgment").
"""

from __future__ import annotations

import polars as pl

PAIR_SCHEMA = {
    "task_id": pl.String(),
    "family": pl.String(),
    "winner": pl.String(),
    "loser": pl.String(),
    "weight": pl.Float64(),
    "source": pl.String(),
}


def _expand_ties(
    m: pl.DataFrame | pl.LazyFrame, a: str, b: str, result: str, drop_ties: bool, source: str
) -> pl.DataFrame:
    """m has columns task_id, family, {a}, {b}, w and `result` in {'A','B','tie'}. One lazy query, so the
    (possibly many million) meetings are never held next to their expanded rows."""
    m = m.lazy()
    base = ("task_id", "family")
    won_a = m.filter(pl.col(result) == "A").select(
        *base, pl.col(a).alias("winner"), pl.col(b).alias("loser"), "w"
    )
    won_b = m.filter(pl.col(result) == "B").select(
        *base, pl.col(b).alias("winner"), pl.col(a).alias("loser"), "w"
    )
    parts = [won_a, won_b]
    if not drop_ties:
        ties = m.filter(pl.col(result) == "tie").with_columns(pl.col("w") * 0.5)
        parts.append(ties.select(*base, pl.col(a).alias("winner"), pl.col(b).alias("loser"), "w"))
        parts.append(ties.select(*base, pl.col(b).alias("winner"), pl.col(a).alias("loser"), "w"))
    return (
        pl.concat(parts, how="vertical")
        .rename({"w": "weight"})
        .with_columns(pl.col("weight").cast(pl.Float64), pl.lit(source).alias("source"))
        .select(list(PAIR_SCHEMA))
        .collect()
    )


def outcome_pairs(outcomes: pl.DataFrame, *, drop_ties: bool = False) -> pl.DataFrame:
    """outcomes: task_id, family, arm, replicate, score (rows with null score are ignored).

    Args:
        outcomes: Outcome records: task_id, family, arm, replicate, score (a null score is ignored).
        drop_ties: Drop tied comparisons instead of counting half a win each way.
    """
    o = (
        outcomes.filter(pl.col("score").is_not_null())
        .select("task_id", "family", "arm", "score")
        .with_columns(pl.len().over("task_id", "arm").cast(pl.Float64).alias("n"))
    )
    left = o.rename({"arm": "arm_a", "score": "s_a", "n": "n_a"})
    right = o.drop("family").rename({"arm": "arm_b", "score": "s_b", "n": "n_b"})
    m = (
        left.lazy()
        .join(right.lazy(), on="task_id", how="inner")
        .filter(pl.col("arm_a") < pl.col("arm_b"))  # lazy: applied while joining, half the rows never exist
        .with_columns(
            (1.0 / (pl.col("n_a") * pl.col("n_b"))).alias("w"),
            pl.when(pl.col("s_a") > pl.col("s_b"))
            .then(pl.lit("A"))
            .when(pl.col("s_a") < pl.col("s_b"))
            .then(pl.lit("B"))
            .otherwise(pl.lit("tie"))
            .alias("result"),
        )
    )
    return _expand_ties(m, "arm_a", "arm_b", "result", drop_ties, "outcome")


def judgment_pairs(judgments: pl.DataFrame, *, drop_ties: bool = False) -> pl.DataFrame:
    """judgments: task_id, family, arm_a, arm_b, winner in {'A','B','tie'}.

    Args:
        judgments: Judgment records: task_id, family, arm_a, arm_b, winner in {'A', 'B', 'tie'}.
        drop_ties: Drop tied comparisons instead of counting half a win each way.
    """
    m = judgments.select("task_id", "family", "arm_a", "arm_b", "winner").with_columns(pl.lit(1.0).alias("w"))
    return _expand_ties(m, "arm_a", "arm_b", "winner", drop_ties, "judgment")


def build_pairs(outcomes: pl.DataFrame, judgments: pl.DataFrame, *, drop_ties: bool = False) -> pl.DataFrame:
    """All comparisons, outcome-derived and explicit, in PAIR_SCHEMA.

    Args:
        outcomes: Outcome records: task_id, family, arm, replicate, score (a null score is ignored).
        judgments: Judgment records: task_id, family, arm_a, arm_b, winner in {'A', 'B', 'tie'}.
        drop_ties: Drop tied comparisons instead of counting half a win each way.
    """
    return pl.concat(
        [outcome_pairs(outcomes, drop_ties=drop_ties), judgment_pairs(judgments, drop_ties=drop_ties)],
        how="vertical",
    )


def outcome_groups(outcomes: pl.DataFrame) -> pl.DataFrame:
    """Scored outcomes as (task_id, family, arm, level, mass, reps): the compact form of outcome_pairs.

    level = dense rank of the score within its task (0 = lowest); mass = share of the arm's replicates on
    the task that scored at that level; reps = replicates at that level. Two groups of different arms in
    a task stand for the comparisons outcome_pairs builds between them (see analysis.bootstrap.PairData):
    O(outcomes) rows instead of O(arms^2) per task. Tasks with a single scored arm compare nothing and
    are left out.

    Args:
        outcomes: Outcome records: task_id, family, arm, replicate, score (a null score is ignored).
    """
    o = outcomes.filter(pl.col("score").is_not_null()).select("task_id", "family", "arm", "score")
    return (
        o.with_columns(
            pl.len().over("task_id", "arm").alias("n"),
            (pl.col("score").rank("dense").over("task_id") - 1).cast(pl.Int64).alias("level"),
        )
        .filter(pl.col("arm").n_unique().over("task_id") > 1)
        .group_by("task_id", "family", "arm", "level")
        .agg(pl.len().alias("reps"), pl.col("n").first())
        .with_columns((pl.col("reps") / pl.col("n")).alias("mass"))
        .select("task_id", "family", "arm", "level", "mass", "reps")
        .sort("task_id", "arm", "level")
    )


def implied_pair_rows(groups: pl.DataFrame, *, drop_ties: bool = False) -> int:
    """How many rows outcome_pairs would build from these groups: one per meeting of replicates of two
    different arms, two per tied meeting (none with drop_ties).

    Args:
        groups: outcome_groups() rows: task_id, family, arm, level, mass, reps.
        drop_ties: Drop tied comparisons instead of counting half a win each way.
    """
    if groups.height == 0:
        return 0
    sq = pl.col("r").cast(pl.Float64) ** 2

    def pairs_within(*keys: str) -> float:
        """Sum over `keys` groups of (sum of reps)^2: ordered meetings within them, self-meetings included."""
        return float(groups.group_by(*keys).agg(pl.col("reps").sum().alias("r")).select(sq.sum()).item())

    meetings = (pairs_within("task_id") - pairs_within("task_id", "arm")) / 2
    ties = (
        pairs_within("task_id", "level")
        - float(groups.select(pl.col("reps").alias("r")).select(sq.sum()).item())
    ) / 2
    return round(meetings - ties if drop_ties else meetings + ties)
