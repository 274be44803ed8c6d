"""Each pipeline stage's result (analysis.pipeline runs the stages in order; each takes and returns these)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.analysis.io import BadLine
from elo_per_token.analysis.result import FamilyFit

if TYPE_CHECKING:
    from elo_per_token.analysis.bootstrap import BootstrapResult, FamilyPoint, PairData


@dataclass(frozen=True)
class Inputs:
    """Stage 1 (read): the validated records, split by kind."""

    files: list[str]
    frame: pl.DataFrame  # every kept record (analysis.io.RECORD_SCHEMA)
    skipped: list[BadLine]
    where: str | None  # the input file when there is one, for errors about the whole input
    calls: pl.LazyFrame  # a query over `frame`: each use reads its columns, no copy of millions of calls
    call_groups: pl.DataFrame  # analysis.tokens.call_groups(calls): per (task, arm, judge or not)
    outcomes: pl.DataFrame
    judgments: pl.DataFrame

    @property
    def n_calls(self) -> int:
        return int(self.call_groups["calls"].sum())

    @property
    def n_strategy_calls(self) -> int:
        return int(self.call_groups.filter(~pl.col("judge"))["calls"].sum())


@dataclass(frozen=True)
class Comparisons:
    """Stage 2: tokens per arm and task, and every within-task comparison (all arms of the input)."""

    tokens: pl.DataFrame  # analysis.tokens.arm_tokens
    task_tokens: pl.DataFrame  # analysis.tokens.task_tokens
    groups_full: pl.DataFrame  # analysis.pairs.outcome_groups of every scored outcome
    pairs: pl.DataFrame  # PAIR_SCHEMA, label columns categorical (outcome rows only on small grids)
    groups: pl.DataFrame  # outcome groups standing for outcome pairs on large grids, else empty
    missing_usage: int
    ungraded: int
    warnings: list[str]
    estimand_title: str = ""  # analysis.missing: what a missing outcome means, for the table's title
    missing: pl.DataFrame | None = None  # analysis.missing.missingness per arm
    # the strategy arms' outcomes after the --missing estimand: what the comparisons and accuracy read
    outcomes: pl.DataFrame | None = None


@dataclass(frozen=True)
class ArmSelection:
    """Stage 3 (select arms): the arms with both measured tokens and comparisons, cheapest first."""

    info: pl.DataFrame  # arm, strategy, budget_n, ... (analysis.tokens.arm_tokens rows)
    arms: list[str]
    anchor: str
    warnings: list[str]

    @property
    def index(self) -> dict[str, int]:
        return {a: i for i, a in enumerate(self.arms)}


@dataclass(frozen=True)
class Design:
    """Stage 4 (build the design): the analysed comparisons, tasks, family weights and their PairData."""

    pairs: pl.DataFrame
    groups: pl.DataFrame
    task_tokens: pl.DataFrame
    tasks: pl.DataFrame  # t, task_id, family: task index order of `data`
    families: list[str]
    weights: dict[str, float]  # after leaving out small families
    excluded: list[str]
    n_tasks: dict[str, int]
    data: PairData
    warnings: list[str]
    weights_note: str = ""  # the table title's note when small families were left out (analysis.families)

    @property
    def weight_array(self) -> NDArray[np.float64]:
        return np.array([self.weights[f] for f in self.families], dtype=float)


@dataclass(frozen=True)
class PointFit:
    """Stage 5 (fit once): each family's one Bradley-Terry fit, and the merged point estimate from it."""

    family_fits: dict[str, FamilyPoint]  # reused by the bootstrap
    elo: NDArray[np.float64]
    tokens: NDArray[np.float64]
    tokens_unweighted: NDArray[np.float64]
    per_family_theta: dict[str, NDArray[np.float64]]
    fits: list[FamilyFit]
    warnings: list[str]


@dataclass(frozen=True)
class Intervals:
    """Stage 6: bootstrap rounds (None without rounds)."""

    boot: BootstrapResult | None
    warnings: list[str]

    @property
    def elo(self) -> NDArray[np.float64] | None:
        return None if self.boot is None else self.boot.elo

    @property
    def tokens(self) -> NDArray[np.float64] | None:
        return None if self.boot is None else self.boot.tokens_per_task

    @property
    def failed(self) -> int:
        return 0 if self.boot is None else int(self.boot.failed_rounds)


@dataclass(frozen=True)
class Tables:
    """Stage 7: every table of the report."""

    strategies: list[str]
    budgets: list[int]
    table: pl.DataFrame
    per_strategy: pl.DataFrame
    vs_frontier: pl.DataFrame
    breakdown: pl.DataFrame
    cost_table: pl.DataFrame | None
    per_family: pl.DataFrame
    partial: dict[str, list[str]] = field(default_factory=dict)  # arm -> the weighted families it was seen in


@dataclass(frozen=True)
class Stages:
    """Every stage's result of one analysis, for the steps that read them all (warnings, the result)."""

    inp: Inputs
    comp: Comparisons
    sel: ArmSelection
    design: Design
    point: PointFit
    iv: Intervals
    tables: Tables
