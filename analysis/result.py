"""The analysis' options and result types: what `analyze` takes and returns, and the versions it records."""

from __future__ import annotations

import math
import platform
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.analysis.breakdown import parse_prices
from elo_per_token.analysis.families import MIN_TASKS
from elo_per_token.analysis.io import BadLine
from elo_per_token.analysis.level import check_level
from elo_per_token.analysis.missing import check_estimand
from elo_per_token.contracts.errors import InputError

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class AnalysisOptions:
    weights: str | None = None  # "math=0.4,code=0.4,tool_use=0.2"; None = equal
    anchor: str | None = None  # arm label pinned at Elo 1000; None = the cheapest arm
    rounds: int = 1000  # bootstrap rounds; 0 = no intervals
    seed: int = 0
    l2: float | None = None  # None = the default prior, analysis.bt.prior_l2() (docs/statistics.md section 1)
    level: float = 0.95
    drop_ties: bool = False
    skip_bad: bool = False
    tasks_file: str | None = None
    prices: str | None = None  # "in=0.15,cached=0.075,out=0.6" USD per 1M tokens: cost per task, ΔElo per $1
    min_tasks: int = MIN_TASKS  # families with fewer tasks are left out of the merge (if another is not)
    heterogeneity_alpha: float = 0.05  # family x arm heterogeneity test, Bonferroni over arms
    missing: str = "shared"  # outcomes without a score: shared / loss / drop (analysis.missing)
    budget: str | None = None  # "3k" tokens or "$0.002" per task: the recommendation's best arm under it
    margin: float = 10.0  # Elo: the recommendation calls an arm equivalent to the best only within +-margin

    def validate(self) -> None:
        """InputError naming the option (field = its flag) for a value no analysis can use. Run first by
        analyze, before any input is read."""
        if self.rounds < 0:
            raise InputError(f"must be >= 0, got {self.rounds}", field="--rounds")
        if self.l2 is not None and not (math.isfinite(self.l2) and self.l2 >= 0):
            raise InputError(f"must be a finite number >= 0, got {self.l2}", field="--l2")
        if self.min_tasks < 0:
            raise InputError(f"must be >= 0, got {self.min_tasks}", field="--min-tasks")
        check_level(self.level)
        parse_prices(self.prices)
        check_estimand(self.missing)
        from elo_per_token.analysis.recommend import check_margin, parse_budget

        parse_budget(self.budget)
        check_margin(self.margin)

    @property
    def l2_value(self) -> float:
        """The ridge penalty the fits use: the option, or the default prior."""
        from elo_per_token.analysis.bt import prior_l2

        return prior_l2() if self.l2 is None else float(self.l2)


@dataclass
class FamilyFit:
    family: str
    tasks: int
    comparisons: float  # total comparison weight
    converged: bool
    n_iter: int
    grad_norm: float
    unobserved: list[str]


@dataclass
class AnalysisResult:
    inputs: list[str]
    options: AnalysisOptions
    counts: dict[str, int]  # calls, outcomes, judgments, ungraded outcomes, skipped lines, ...
    skipped: list[BadLine]
    arms: list[str]  # analysed arms, cheapest first (index order of every array below)
    strategies: list[str]
    budgets: list[int]
    families: list[str]
    family_weights: dict[str, float]
    anchor: str
    tokens: pl.DataFrame  # analysis.tokens.arm_tokens over all arms in the input
    judge_tokens: pl.DataFrame
    task_tokens: pl.DataFrame  # analysis.tokens.task_tokens for the analysed arms
    pairs: pl.DataFrame  # analysis.pairs.PAIR_SCHEMA for the analysed arms (judgments only on large grids:
    # their outcome comparisons are kept as analysis.pairs.outcome_groups, see analysis.pipeline._PAIR_ROWS_MAX)
    elo: NDArray[np.float64]  # [K] anchored point estimate
    tokens_per_task: NDArray[np.float64]  # [K]
    table: pl.DataFrame  # analysis.returns.returns_table + tokens_per_task_unweighted
    per_strategy: pl.DataFrame  # analysis.returns.per_strategy_table
    per_family: pl.DataFrame  # family, arm, weight, theta (centred), elo, observed
    fits: list[FamilyFit]
    warnings: list[str] = field(default_factory=list)
    elo_samples: NDArray[np.float64] | None = None  # [R, K]
    tokens_samples: NDArray[np.float64] | None = None  # [R, K]
    failed_rounds: int = 0
    versions: dict[str, str] = field(default_factory=dict)
    # The validated input records (analysis.io.RECORD_SCHEMA) after cross-line checks, for views that
    # need more than per-arm totals (token split by role, failures); not part of report.json.
    records: pl.DataFrame | None = None
    # Per arm: tasks attempted/answered/lost, failures by class, calls cut by max_tokens, token split, cost
    # (analysis.breakdown); cost_table: the returns table over cost per task (ΔElo per $1), when priced.
    breakdown: pl.DataFrame | None = None
    cost_table: pl.DataFrame | None = None
    # analysis.returns.frontier_steps_table: each arm against the next-cheaper frontier arm.
    vs_frontier: pl.DataFrame | None = None
    excluded_families: list[str] = field(default_factory=list)  # too few tasks: weight 0 in the merge
    # What the headline table's title must say (the estimand for missing outcomes, renormalised
    # weights), arms seen in some weighted families only (arm -> those families) and the per-arm
    # missingness check (analysis.missing.missingness).
    title_notes: list[str] = field(default_factory=list)
    partial_arms: dict[str, list[str]] = field(default_factory=dict)
    missing: pl.DataFrame | None = None
    # analysis.accuracy: mean score per arm / per family x arm with task-bootstrap intervals, pass@k;
    # analysis.recommend: the recommendation every report prints first.
    accuracy: pl.DataFrame | None = None
    accuracy_family: pl.DataFrame | None = None
    pass_k: pl.DataFrame | None = None
    recommendation: dict[str, Any] | None = None
    # Per arm: calls, tokens (and USD when priced) of failed attempts, from the runs' spent/ objects
    # (analysis.spent): billed, not in the job objects, so not in `tokens`; the arm's spend is the sum of both.
    spent_on_failed_attempts: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Every number, the inputs, the options and the versions (report.json)."""
        return {
            "inputs": self.inputs,
            "options": asdict(self.options),
            "versions": self.versions,
            "counts": self.counts,
            "skipped": [asdict(b) for b in self.skipped],
            "arms": self.arms,
            "anchor": self.anchor,
            "families": self.families,
            "family_weights": self.family_weights,
            "table": self.table.to_dicts(),
            "per_strategy": self.per_strategy.to_dicts(),
            "vs_frontier": self.vs_frontier.to_dicts() if self.vs_frontier is not None else [],
            "excluded_families": self.excluded_families,
            "title_notes": self.title_notes,
            "missing_estimand": self.options.missing,
            "partial_arms": self.partial_arms,
            "missing": self.missing.to_dicts() if self.missing is not None else [],
            "per_family": self.per_family.to_dicts(),
            "tokens": self.tokens.to_dicts(),
            "judge_tokens": self.judge_tokens.to_dicts(),
            "fits": [asdict(f) for f in self.fits],
            "bootstrap": {
                "rounds": self.options.rounds,
                "seed": self.options.seed,
                "level": self.options.level,
                "failed_rounds": self.failed_rounds,
            },
            "warnings": self.warnings,
            "breakdown": self.breakdown.to_dicts() if self.breakdown is not None else [],
            "cost_table": self.cost_table.to_dicts() if self.cost_table is not None else None,
            "recommendation": self.recommendation,
            "accuracy": self.accuracy.to_dicts() if self.accuracy is not None else [],
            "accuracy_family": self.accuracy_family.to_dicts() if self.accuracy_family is not None else [],
            "pass_at_k": self.pass_k.to_dicts() if self.pass_k is not None else [],
            "spent_on_failed_attempts": self.spent_on_failed_attempts,
        }


def versions() -> dict[str, str]:
    import scipy

    from elo_per_token import __version__

    return {
        "elo_per_token": __version__,
        "python": platform.python_version(),
        "polars": pl.__version__,
        "numpy": np.__version__,
        "scipy": scipy.__version__,
    }
