"""Outcomes without a score: the per-arm missingness check and the estimand.

An outcome with `score: null` (a job that failed before grading, e.g. a transient error after retries),
or a task an arm ran in a family but has no outcome for, is a missing outcome. When the misses fall on the
hard tasks, simply dropping them (the arm is then compared on the easy tasks only) inflates the arm. The
estimand says what a missing outcome means; it is stated in the headline table's title:

- `shared` (default): compare arms on the tasks every arm that ran the family answered. No arm is
  credited for the tasks it lacks and none is charged; the result describes those tasks only.
- `loss`: a missing outcome is a loss (score 0) on that task: right when the failure is the arm's own.
- `drop`: compare each arm on the tasks it answered (the old behaviour): unbiased only when outcomes are
  missing at random.

The check (`missingness`) compares the other arms' mean score on the tasks an arm lacks with their mean
on the tasks it has: a lower mean on the missing ones means they are the hard ones (not at random).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.contracts.errors import InputError

__all__ = [
    "ESTIMANDS",
    "Missing",
    "apply_estimand",
    "check_estimand",
    "flagged_arms",
    "missing_cells",
    "missingness",
]

ESTIMANDS = {
    "shared": "on the tasks every arm answered",
    "loss": "a missing score counted as a loss",
    "drop": "each arm on the tasks it answered",
}


def check_estimand(name: str) -> str:
    """The estimand's name, or InputError(field='--missing').

    Args:
        name: The --missing value.
    """
    if name not in ESTIMANDS:
        raise InputError(f"must be one of {', '.join(ESTIMANDS)}, got {name!r}", field="--missing")
    return name


@dataclass(frozen=True)
class Missing:
    """What the estimand did: outcomes after it, the tasks it left out (shared) and the title text."""

    outcomes: pl.DataFrame
    dropped_tasks: pl.DataFrame  # task_id (shared: tasks some arm lacks), else empty
    n_missing: int  # (task, arm) cells without a score
    title: str  # '' when nothing is missing


def missing_cells(outcomes: pl.DataFrame) -> pl.DataFrame:
    """(task_id, family, arm, strategy, budget_n) where the arm ran the family but has no scored outcome on
    a task of that family that some arm has. Input: outcome records (task_id, family, strategy, budget_n,
    arm, score) of the compared arms.

    Args:
        outcomes: Outcome records of the compared arms: task_id, family, strategy, budget_n, arm, score.
    """
    ran = outcomes.select("family", "arm", "strategy", "budget_n").unique()
    tasks = outcomes.filter(pl.col("score").is_not_null()).select("task_id", "family").unique()
    scored = outcomes.filter(pl.col("score").is_not_null()).select("task_id", "arm").unique()
    return (
        tasks.join(ran, on="family")
        .join(scored, on=["task_id", "arm"], how="anti")
        .sort("family", "task_id", "arm")
    )


def apply_estimand(outcomes: pl.DataFrame, estimand: str) -> Missing:
    """The outcomes the comparisons are built from under `estimand` (see the module docstring).

    Args:
        outcomes: Outcome records: task_id, family, arm, replicate, score (a null score is ignored).
        estimand: How missing outcomes count: one of ESTIMANDS (the --missing option).
    """
    check_estimand(estimand)
    cells = missing_cells(outcomes)
    empty = pl.DataFrame(schema={"task_id": outcomes.schema["task_id"]})
    if cells.height == 0:
        if estimand == "loss":
            # No cell is missing, but an unscored replicate may sit beside a scored one of the same arm: drop
            # it, as the loss branch below drops every null it does not turn into a loss, so that no null is
            # left on a task some arm has a score on (the same outcomes with or without other missing cells).
            scored = outcomes.filter(pl.col("score").is_not_null()).select("task_id").unique()
            stray = outcomes.filter(pl.col("score").is_null()).join(scored, on="task_id", how="semi")
            if stray.height:
                outcomes = outcomes.filter(
                    pl.col("score").is_not_null() | ~pl.col("task_id").is_in(scored["task_id"].implode())
                )
        return Missing(outcomes, empty, 0, "")
    title = f"missing outcomes: {ESTIMANDS[estimand]} (--missing {estimand})"
    if estimand == "drop":
        return Missing(outcomes, empty, cells.height, title)
    if estimand == "shared":
        dropped = cells.select("task_id").unique().sort("task_id")
        kept = outcomes.join(dropped, on="task_id", how="anti")
        return Missing(kept, dropped, cells.height, title)
    # loss: every missing cell becomes one outcome scored 0 (null scores too), replicate 0 when none exists
    losses = cells.with_columns(
        pl.lit(0, dtype=outcomes.schema["replicate"]).alias("replicate"),
        pl.lit(0.0, dtype=outcomes.schema["score"]).alias("score"),
    )
    nulls = outcomes.filter(pl.col("score").is_null()).join(
        cells.select("task_id", "arm"), on=["task_id", "arm"]
    )
    kept = pl.concat(
        [
            outcomes.filter(pl.col("score").is_not_null()),
            nulls.unique(["task_id", "arm"]).with_columns(
                pl.lit(0.0, dtype=outcomes.schema["score"]).alias("score")
            ),
            losses.join(nulls.select("task_id", "arm").unique(), on=["task_id", "arm"], how="anti")
            .select(outcomes.columns)
            .cast(outcomes.schema),
        ],
        how="vertical",
    )
    return Missing(kept.select(outcomes.columns), empty, cells.height, title)


def missingness(outcomes: pl.DataFrame, estimand: str = "shared") -> tuple[pl.DataFrame, list[str]]:
    """Per arm with missing outcomes: (arm, missing, tasks, others_on_missing, others_on_rest) and one
    warning each with the figures, plus one suggesting `ept retry` with the count of missing outcomes.

    others_on_missing: the other arms' mean score on the tasks this arm lacks; others_on_rest: on the tasks
    it has. A clearly lower first figure says the misses are the hard tasks: dropping them would flatter
    the arm.

    Args:
        outcomes: Outcome records: task_id, family, arm, replicate, score (a null score is ignored).
        estimand: How missing outcomes count: one of ESTIMANDS (the --missing option).
    """
    cells = missing_cells(outcomes)
    tail = _retry_warning(outcomes, cells, estimand)
    schema = {
        "arm": pl.String,
        "missing": pl.Int64,
        "tasks": pl.Int64,
        "others_on_missing": pl.Float64,
        "others_on_rest": pl.Float64,
    }
    if cells.height == 0:
        return pl.DataFrame(schema=schema), tail
    table = _others_means(outcomes, cells).select(list(schema)).cast(schema)  # type: ignore[arg-type]
    table = table.with_columns(
        pl.Series("p_harder", _p_values(outcomes, cells, table["arm"].to_list()), dtype=pl.Float64)
    )
    warnings = []
    for r in table.iter_rows(named=True):
        a, b = r["others_on_missing"], r["others_on_rest"]
        figs = (
            f"the other arms score {a:.2f} on those vs {b:.2f} on the rest"
            if a is not None and b is not None
            else ""
        )
        hard = _harder(r["p_harder"], table.height)
        warnings.append(
            f"{r['arm']}: no score on {r['missing']} of {r['tasks']} task(s)"
            + (f"; {figs}" if figs else "")
            + (
                f"; the missing ones are the harder tasks (permutation test p = {r['p_harder']:.3g}, level "
                f"{HARDER_ALPHA:g} over {table.height} arm(s)), so dropping them would flatter this arm"
                if hard
                else ""
            )
        )
    return table, warnings + tail


def _p_values(outcomes: pl.DataFrame, cells: pl.DataFrame, arms: list[str]) -> list[float | None]:
    """harder_p_value per arm: each task of the arm's families with the other arms' mean score there."""
    task_arm = (
        outcomes.filter(pl.col("score").is_not_null())
        .group_by("task_id", "family", "arm")
        .agg(pl.col("score").mean().alias("s"))
    )
    out: list[float | None] = []
    for arm in arms:
        fams = cells.filter(pl.col("arm") == arm)["family"].unique().implode()
        others = (
            task_arm.filter((pl.col("arm") != arm) & pl.col("family").is_in(fams))
            .group_by("task_id", "family")
            .agg(pl.col("s").mean().alias("d"))
        )
        lacks = cells.filter(pl.col("arm") == arm).select("task_id", "family", pl.lit(True).alias("m"))
        t = (
            others.join(lacks, on=["task_id", "family"], how="left")
            .with_columns(pl.col("m").fill_null(False))
            .sort("family", "task_id")
        )
        if t.height == 0 or not t["m"].any():
            out.append(None)
            continue
        out.append(
            harder_p_value(t["d"].to_numpy(), t["m"].to_numpy(), t["family"].cast(pl.String).to_numpy())
        )
    return out


HARDER_ALPHA = (
    0.05  # family-wise level of the "missing ones are the harder tasks" test (Bonferroni over arms)
)
PERMUTATIONS = 1999  # Monte Carlo rounds of the permutation test (p resolves to 1/2000)
_PERM_CELLS = 4_000_000  # rounds x tasks of one exact draw (32 MB); above it, see harder_p_value


def _harder(p_value: float | None, n_tested: int) -> bool:
    """The check's verdict: the arm's missing tasks are harder than a random subset of its tasks would be, at
    family-wise level HARDER_ALPHA over the n_tested arms with missing tasks (the rule of its warning)."""
    return p_value is not None and n_tested > 0 and p_value < HARDER_ALPHA / n_tested


def harder_p_value(
    difficulty: NDArray[np.float64],
    missing: NDArray[np.float64],
    family: NDArray[np.float64],
    *,
    seed: int = 0,
) -> float:
    """One-sided p-value that an arm's missing tasks are the harder ones, by a stratified permutation test.

    Args:
        difficulty: per task of the arm's families, the other arms' mean score there (lower = harder).
        missing: per task, whether the arm has no score on it.
        family: per task, its family (the missing count of each family is held fixed: tasks go missing within
            a family, and families differ in difficulty).

    Returns:
        P(mean difficulty of a random missing set <= the observed one) under "missing completely at random",
        (1 + hits) / (1 + PERMUTATIONS); 1.0 when nothing is missing. A family too large to permute in 32 MB
        (over 2,000 tasks) is drawn with replacement when under 1% of it is missing (then the two draws differ
        by less than that share), else from the normal limit of its sum (over 20 missing tasks; variance with
        the finite-population correction).
    """
    d, miss = np.asarray(difficulty, dtype=float), np.asarray(missing, dtype=bool)
    if not miss.any():
        return 1.0
    rng = np.random.default_rng(seed)
    observed = float(d[miss].sum())
    null = np.zeros(PERMUTATIONS)
    for fam in np.unique(family):
        x, m = d[family == fam], int(miss[family == fam].sum())
        if m == 0 or m == len(x):
            null += x.sum() if m else 0.0
            continue
        if PERMUTATIONS * len(x) <= _PERM_CELLS:
            keys = rng.random((PERMUTATIONS, len(x)))
            null += x[np.argpartition(keys, m - 1, axis=1)[:, :m]].sum(axis=1)
        elif m <= 0.01 * len(x):
            null += x[rng.integers(0, len(x), (PERMUTATIONS, m))].sum(axis=1)
        else:
            var = m * x.var() * (len(x) - m) / (len(x) - 1)
            null += rng.normal(m * x.mean(), np.sqrt(var), PERMUTATIONS)
    return float((1 + np.count_nonzero(null <= observed + 1e-12)) / (1 + PERMUTATIONS))


def flagged_arms(table: pl.DataFrame | None) -> list[str]:
    """Arms the missingness check flags (their missing tasks are the harder ones): the recommendation never
    picks them, as their Elo is over easier tasks than the others'. table: missingness()'s frame.

    Args:
        table: missingness()'s frame (None: no check ran).
    """
    if table is None or table.height == 0 or "p_harder" not in table.columns:
        return []
    k = table.height
    return [r["arm"] for r in table.iter_rows(named=True) if _harder(r["p_harder"], k)]


def _others_means(outcomes: pl.DataFrame, cells: pl.DataFrame) -> pl.DataFrame:
    """Per arm with missing cells: missing, tasks (scored tasks of its families), and the other arms' mean
    score (over their (task, arm) means) on its missing tasks and on the rest. Joins only, no loop over
    arms: with per-task sums S_t and counts N_t of the arms' means, the others' figures are S_t, N_t on a
    task the arm lacks and S_t - s_at, N_t - 1 on one it has."""
    task_arm = (
        outcomes.filter(pl.col("score").is_not_null())
        .group_by("task_id", "family", "arm")
        .agg(pl.col("score").mean().alias("s"))
    )
    per_task = task_arm.group_by("task_id").agg(pl.col("s").sum().alias("S"), pl.len().alias("N"))
    on_missing = (
        cells.join(per_task, on="task_id")
        .group_by("arm")
        .agg(pl.len().alias("missing"), (pl.col("S").sum() / pl.col("N").sum()).alias("others_on_missing"))
    )
    has = task_arm.filter(pl.col("arm").is_in(cells["arm"].unique().implode())).join(per_task, on="task_id")
    on_rest = has.group_by("arm").agg(
        pl.when((pl.col("N") - 1).sum() > 0)
        .then((pl.col("S") - pl.col("s")).sum() / (pl.col("N") - 1).sum())
        .alias("others_on_rest")
    )
    fam_tasks = task_arm.group_by("family").agg(pl.col("task_id").n_unique().alias("n"))
    arm_fams = outcomes.select("family", "arm").unique().join(fam_tasks, on="family", how="left")
    tasks = arm_fams.group_by("arm").agg(pl.col("n").fill_null(0).sum().alias("tasks"))
    return (
        on_missing.join(on_rest, on="arm", how="left")
        .join(tasks, on="arm", how="left")
        .with_columns(pl.col("arm").cast(pl.String))
        .sort("arm")
    )


def _retry_warning(outcomes: pl.DataFrame, cells: pl.DataFrame, estimand: str) -> list[str]:
    """The count of outcomes without a score (and of tasks without any outcome) and `ept retry`."""
    ungraded = int(outcomes["score"].is_null().sum())
    vanished = cells.join(
        outcomes.select("task_id", "arm").unique(), on=["task_id", "arm"], how="anti"
    ).height
    if not (ungraded or vanished):
        return []
    parts = [f"{ungraded} outcome(s) have no score (failed before grading)"] if ungraded else []
    if vanished:
        parts.append(f"{vanished} (task, arm) pair(s) of a family the arm ran have no outcome at all")
    return [
        " and ".join(parts) + f"; counted as --missing {estimand} says ({ESTIMANDS[estimand]}); "
        "`ept retry RUN` reruns the failed jobs"
    ]
