"""Token accounting per arm: keyed by the arm (strategy AND budget), never by strategy alone.

Summing by strategy alone would mix budgets: best_of_n@4 and best_of_n@16 would share one total.

Strategy cost is every call except role == "judge"; judge calls are evaluation cost and are reported
on their own. Calls without usage are counted (`calls_missing_usage`), never treated as zero tokens
silently: an arm's summed totals are then lower bounds (the report says so), and a (task, arm) with
any call lacking usage has unknown tokens per task (null), so it is left out of the average rather
than pulling it down.

Tokens per task: the tokens one run of the arm spends on a task. With replicates that is the task's
total divided by the number of distinct replicates seen for it, so three replicates do not look like
three times the cost.
"""

from __future__ import annotations

from typing import TypeVar

import polars as pl

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)
_TOTAL = pl.col("prompt_tokens").fill_null(0) + pl.col("completion_tokens").fill_null(0)
ARM_KEYS = ("arm", "strategy", "budget_n")
_IS_JUDGE = pl.col("role").fill_null("") == "judge"


def strategy_calls(calls: FrameT) -> FrameT:
    """The calls the arms' strategies made (judge calls left out).

    Args:
        calls: call records with a `role` column (null counts as not a judge).
    """
    return calls.filter(~_IS_JUDGE)


def task_tokens(calls: FrameT) -> FrameT:
    """One row per (task, arm): tokens one run of the arm spent on the task (judge calls excluded).

    Columns: task_id, family, arm, strategy, budget_n, prompt_tokens, completion_tokens, tokens
    (null when a call of this task and arm has no usage), replicates, calls_missing_usage.

    Args:
        calls: call records (DataFrame or LazyFrame; the result is of the same kind).
    """
    return (
        strategy_calls(calls)
        .group_by("task_id", "family", *ARM_KEYS)
        .agg(
            pl.col("replicate").n_unique().alias("replicates"),
            pl.col("prompt_tokens").sum().cast(pl.Float64).alias("prompt_tokens"),
            pl.col("completion_tokens").sum().cast(pl.Float64).alias("completion_tokens"),
            _TOTAL.sum().cast(pl.Float64).alias("tokens"),
            pl.col("usage_missing").sum().cast(pl.Int64).alias("calls_missing_usage"),
        )
        .with_columns(
            pl.when(pl.col("calls_missing_usage") == 0).then(pl.col(c) / pl.col("replicates")).alias(c)
            for c in ("prompt_tokens", "completion_tokens", "tokens")
        )
        .sort("arm", "task_id")
    )


def call_groups(calls: FrameT) -> FrameT:
    """One row per (task, arm, judge or not) of call records: the only pass over the raw calls.

    Columns: task_id, ARM_KEYS, judge, calls, calls_missing_usage, prompt_tokens, completion_tokens,
    total_tokens, replicates. Works on a LazyFrame too; every arm- and judge-level number below is computed
    from these groups.

    Args:
        calls: call records (DataFrame or LazyFrame; the result is of the same kind).
    """
    return calls.group_by("task_id", *ARM_KEYS, _IS_JUDGE.alias("judge")).agg(*_GROUP_SUMS)


def record_groups(records: pl.LazyFrame) -> pl.LazyFrame:
    """call_groups over every record, keyed by `kind` too and with `_bad`: the single pass `ept tokens` fuses
    into the file scan. It sums over analysis.io.read_summary's record groups (each row stands for `rows`
    records with the same keys), so the calls are `rows` summed and the replicates the distinct values of
    that key. The call groups are its rows of kind "call" (calls_of).

    Args:
        records: read_summary's record groups (with `rows` and `_bad`).
    """
    return records.group_by("kind", "task_id", *ARM_KEYS, _IS_JUDGE.alias("judge")).agg(
        pl.col("rows").sum().alias("calls"), *_GROUP_SUMS[1:], pl.col("_bad").any()
    )


def calls_of(groups: pl.DataFrame) -> pl.DataFrame:
    """The call_groups() rows of a record_groups() result.

    Args:
        groups: a collected record_groups() result.
    """
    return groups.filter(pl.col("kind") == "call").drop("kind")


_GROUP_SUMS = (
    pl.len().alias("calls"),
    pl.col("usage_missing").sum().cast(pl.Int64).alias("calls_missing_usage"),
    pl.col("prompt_tokens").sum().alias("prompt_tokens"),
    pl.col("completion_tokens").sum().alias("completion_tokens"),
    _TOTAL.sum().alias("total_tokens"),
    pl.col("replicate").n_unique().alias("replicates"),
)


def arm_tokens(calls: pl.DataFrame) -> pl.DataFrame:
    """The `ept tokens` table: one row per arm, ordered by tokens per task (see arm_tokens_from_groups).

    Args:
        calls: call records (role, task_id, arm keys, token counts).
    """
    return arm_tokens_from_groups(call_groups(calls))


def arm_tokens_from_groups(groups: pl.DataFrame) -> pl.DataFrame:
    """One row per arm from call_groups(), ordered by tokens per task.

    Columns: arm, strategy, budget_n, calls, calls_missing_usage, prompt_tokens, completion_tokens,
    total_tokens, tasks, avg_tokens_per_task. Per (arm, task) cost is the task's total over its distinct
    replicates, left out of the average when any of its calls lacks usage (the same rule as task_tokens).

    Args:
        groups: call_groups() rows (judge rows are left out here).
    """
    return (
        groups.filter(~pl.col("judge"))
        .group_by(*ARM_KEYS)
        .agg(
            pl.col("calls").sum(),
            pl.col("calls_missing_usage").sum(),
            pl.col("prompt_tokens").sum(),
            pl.col("completion_tokens").sum(),
            pl.col("total_tokens").sum(),
            pl.col("task_id").n_unique().alias("tasks"),
            (pl.col("total_tokens") / pl.col("replicates"))
            .filter(pl.col("calls_missing_usage") == 0)
            .mean()
            .alias("avg_tokens_per_task"),
        )
        .sort("avg_tokens_per_task", "strategy", "budget_n", "arm")
        .select(
            "arm",
            "strategy",
            "budget_n",
            "calls",
            "calls_missing_usage",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "tasks",
            "avg_tokens_per_task",
        )
    )


def judge_tokens(calls: pl.DataFrame) -> pl.DataFrame:
    """Evaluation cost: judge calls per judged arm (empty when there are none).

    Args:
        calls: call records (role, task_id, arm keys, token counts).
    """
    return judge_tokens_from_groups(call_groups(calls))


def judge_tokens_from_groups(groups: pl.DataFrame) -> pl.DataFrame:
    """One row per judged arm: judge_calls, calls_missing_usage and token sums, ordered by arm.

    Args:
        groups: call_groups() rows (only the judge rows count).
    """
    return (
        groups.filter(pl.col("judge"))
        .group_by(*ARM_KEYS)
        .agg(
            pl.col("calls").sum().alias("judge_calls"),
            pl.col("calls_missing_usage").sum(),
            pl.col("prompt_tokens").sum(),
            pl.col("completion_tokens").sum(),
            pl.col("total_tokens").sum(),
        )
        # Strategy and budget too: one arm label written with two budgets would otherwise come out in the
        # group-by's order, which varies from run to run.
        .sort("arm", "strategy", "budget_n")
    )
