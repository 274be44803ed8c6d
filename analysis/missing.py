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

import polars as pl

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
    """The estimand's name, or InputError(field='--missing')."""
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
    arm, score) of the compared arms."""
    ran = outcomes.select("family", "arm", "strategy", "budget_n").unique()
    tasks = outcomes.filter(pl.col("score").is_not_null()).select("task_id", "family").unique()
    scored = outcomes.filter(pl.col("score").is_not_null()).select("task_id", "arm").unique()
    return (
        tasks.join(ran, on="family")
        .join(scored, on=["task_id", "arm"], how="anti")
        .sort("family", "task_id", "arm")
    )


def apply_estimand(outcomes: pl.DataFrame, estimand: str) -> Missing:
    """The outcomes the comparisons are built from under `estimand` (see the module docstring)."""
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
    losses = cells.with_columns(pl.lit(0, dtype=outcomes.schema["replicate"]).alias("replicate"),
                                pl.lit(0.0, dtype=outcomes.schema["score"]).alias("score"))  # fmt: skip
    nulls = outcomes.filter(pl.col("score").is_null()).join(
        cells.select("task_id", "arm"), on=["task_id", "arm"]
    )
    kept = pl.concat([
        outcomes.filter(pl.col("score").is_not_null()),
        nulls.unique(["task_id", "arm"]).with_columns(pl.lit(0.0, dtype=outcomes.schema["score"]).alias("score")),
        losses.join(nulls.select("task_id", "arm").unique(), on=["task_id", "arm"], how="anti")
        .select(outcomes.columns).cast(outcomes.schema),
    ], how="vertical")  # fmt: skip
    return Missing(kept.select(outcomes.columns), empty, cells.height, title)


def missingness(outcomes: pl.DataFrame, estimand: str = "shared") -> tuple[pl.DataFrame, list[str]]:
    """Per arm with missing outcomes: (arm, missing, tasks, others_on_missing, others_on_rest) and one
    warning each with the figures, plus one suggesting `ept retry` with the count of missing outcomes.

    others_on_missing: the other arms' mean score on the tasks this arm lacks; others_on_rest: on the tasks
    it has. A clearly lower first figure says the misses are the hard tasks: dropping them would flatter
    the arm."""
    cells = missing_cells(outcomes)
    tail = _retry_warning(outcomes, cells, estimand)
    schema = {"arm": pl.String, "missing": pl.Int64, "tasks": pl.Int64,
              "others_on_missing": pl.Float64, "others_on_rest": pl.Float64}  # fmt: skip
    if cells.height == 0:
        return pl.DataFrame(schema=schema), tail
    table = _others_means(outcomes, cells).select(list(schema)).cast(schema)  # type: ignore[arg-type]
    warnings = []
    for r in table.iter_rows(named=True):
        a, b = r["others_on_missing"], r["others_on_rest"]
        figs = (
            f"the other arms score {a:.2f} on those vs {b:.2f} on the rest"
            if a is not None and b is not None
            else ""
        )
        hard = _harder(a, b)
        warnings.append(
            f"{r['arm']}: no score on {r['missing']} of {r['tasks']} task(s)"
            + (f"; {figs}" if figs else "")
            + (
                "; the missing ones are the harder tasks, so dropping them would flatter this arm"
                if hard
                else ""
            )
        )
    return table, warnings + tail


HARDER_GAP = 0.1  # the other arms' mean score on an arm's missing tasks this far below their mean on the rest


def _harder(on_missing: float | None, on_rest: float | None) -> bool:
    """The check's verdict: the arm's missing tasks are the harder ones (the rule of its warning)."""
    return on_missing is not None and on_rest is not None and on_missing < on_rest - HARDER_GAP


def flagged_arms(table: pl.DataFrame | None) -> list[str]:
    """Arms the missingness check flags (their missing tasks are the harder ones): the recommendation never
    picks them, as their Elo is over easier tasks than the others'. table: missingness()'s frame."""
    if table is None or table.height == 0:
        return []
    return [
        r["arm"] for r in table.iter_rows(named=True) if _harder(r["others_on_missing"], r["others_on_rest"])
    ]


def _others_means(outcomes: pl.DataFrame, cells: pl.DataFrame) -> pl.DataFrame:
    """Per arm with missing cells: missing, tasks (scored tasks of its families), and the other arms' mean
    score (over their (task, arm) means) on its missing tasks and on the rest. Joins only, no loop over
    arms: with per-task sums S_t and counts N_t of the arms' means, the others' figures are S_t, N_t on a
    task the arm lacks and S_t - s_at, N_t - 1 on one it has."""
    task_arm = (outcomes.filter(pl.col("score").is_not_null())
                .group_by("task_id", "family", "arm").agg(pl.col("score").mean().alias("s")))  # fmt: skip
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
    return (on_missing.join(on_rest, on="arm", how="left").join(tasks, on="arm", how="left")
            .with_columns(pl.col("arm").cast(pl.String)).sort("arm"))  # fmt: skip


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
    return [" and ".join(parts) + f"; counted as --missing {estimand} says ({ESTIMANDS[estimand]}); "
            "`ept retry RUN` reruns the failed jobs"]  # fmt: skip
