"""What `ept compare` reads and returns: one run's inputs and the comparison's result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from elo_per_token.analysis.compare_gate import FailRule

BASE, CUR = "baseline", "current"


@dataclass(frozen=True)
class RunInputs:
    """What the comparison needs from one run (see load_run for how it is read).

    outcomes:    task_id, family, arm, replicate, score (Float64, null = the job failed before grading)
    task_tokens: task_id, family, arm, tokens (strategy tokens one job of this arm spent on the task,
                 averaged over replicates; judge calls excluded)
    arms:        arm, strategy, budget_n
    """

    source: str
    outcomes: pl.DataFrame
    task_tokens: pl.DataFrame
    arms: pl.DataFrame
    suites: tuple[str, ...] | None = None
    manifest: dict[str, Any] | None = None
    failed_jobs: int = 0  # jobs in the ledger's failures/ (no result object): absent from outcomes


@dataclass
class CompareResult:
    table: pl.DataFrame  # one row per arm, ordered by baseline tokens/task
    flagged: list[str]
    reasons: dict[str, list[str]]
    rule: FailRule
    level: float
    gate_level: float  # the level of the intervals the rule is applied to (adjusted for the number of arms)
    rounds: int
    failed_rounds: int
    anchor: str
    families: list[str]
    family_weights: dict[str, float]
    notes: list[str] = field(default_factory=list)
    sources: tuple[str, str] = ("", "")

    @property
    def exit_code(self) -> int:
        return 1 if self.flagged else 0
