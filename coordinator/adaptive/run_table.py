"""A run's results as matrices: score and tokens per (task, arm), for the adaptive sweep and its replay.

Score: the mean over the task's replicates of the arm's graded outcomes (null scores left out); tokens: what
one run of the arm spent on the task (analysis/tokens.py's task_tokens: judge calls excluded, replicates
averaged). A (task, arm) with no graded outcome or unknown tokens is NaN: the adaptive statistics skip it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.analysis.io import Records, read_records
from elo_per_token.analysis.tokens import task_tokens

__all__ = ["RunTable", "read_jobs_table", "read_run_table", "table_from_records"]


@dataclass(frozen=True)
class RunTable:
    """tasks [T] with families [T]; arms [K] with strategies and budgets; scores and tokens [T, K] (NaN:
    not run or not graded)."""

    tasks: list[str]
    families: list[str]
    arms: list[str]
    strategies: list[str]
    budgets: list[int]
    scores: NDArray[np.float64]
    tokens: NDArray[np.float64]

    def index(self) -> tuple[dict[str, int], dict[str, int]]:
        """(task id -> row, arm label -> column)."""
        return {t: i for i, t in enumerate(self.tasks)}, {a: j for j, a in enumerate(self.arms)}


def table_from_records(records: Records) -> RunTable:
    """The matrices of a run's records (outcomes and calls), tasks and arms sorted by name.

    Args:
        records: The records read (analysis.io.read_records).
    """
    frame = records.frame.with_columns(pl.col(pl.Categorical).cast(pl.String))
    outcomes = (
        frame.filter((pl.col("kind") == "outcome") & pl.col("score").is_not_null())
        .group_by("task_id", "family", "arm", "strategy", "budget_n")
        .agg(pl.col("score").cast(pl.Float64).mean())
    )
    calls = frame.filter(pl.col("kind") == "call")
    tok = task_tokens(calls).select("task_id", "arm", "tokens")
    both = outcomes.join(tok, on=["task_id", "arm"], how="left")
    tasks_df = both.select("task_id", "family").unique("task_id", keep="first").sort("task_id")
    arms_df = both.select("arm", "strategy", "budget_n").unique("arm", keep="first").sort("arm")
    tasks, arms = tasks_df["task_id"].to_list(), arms_df["arm"].to_list()
    ti, ai = {t: i for i, t in enumerate(tasks)}, {a: j for j, a in enumerate(arms)}
    scores = np.full((len(tasks), len(arms)), np.nan)
    tokens = np.full((len(tasks), len(arms)), np.nan)
    rows = np.asarray([ti[t] for t in both["task_id"].to_list()], dtype=np.int64)
    cols = np.asarray([ai[a] for a in both["arm"].to_list()], dtype=np.int64)
    if rows.size:
        scores[rows, cols] = both["score"].to_numpy()
        tokens[rows, cols] = both["tokens"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    return RunTable(
        tasks=tasks,
        families=[str(f) for f in tasks_df["family"].to_list()],
        arms=arms,
        strategies=[str(s) for s in arms_df["strategy"].to_list()],
        budgets=[int(b) for b in arms_df["budget_n"].to_list()],
        scores=scores,
        tokens=tokens,
    )


def read_run_table(paths: Sequence[str]) -> RunTable:
    """The matrices of the runs or files at `paths` (a run URL, a ledger run folder, JSONL/Parquet files);
    InputError (naming file, line and field) on bad input, as `ept analyze`.

    Args:
        paths: A run URL, a ledger run folder or JSONL/Parquet files.
    """
    return table_from_records(read_records(paths))


def read_jobs_table(run_url: str, keys: list[str]) -> RunTable:
    """The matrices of the run's job objects `keys` alone (those that exist; validated as a whole-run read,
    analysis/io/runs.read_run_jobs): one round of the adaptive sweep, read once. Every replicate of a (task,
    arm) is in the same round, so a cell's score and tokens equal the whole run's reading of that cell."""
    from elo_per_token.analysis.io.runs import read_run_jobs
    from elo_per_token.ledger.runref import run_source

    src = run_source(run_url)
    if src is None:
        raise ValueError(f"not a ledger run: {run_url}")
    frame, _ = read_run_jobs(src, keys)
    return table_from_records(Records(frame=frame, files=[run_url]))
