"""`analyze(...)`: call logs and outcomes in, an AnalysisResult out (no printing, no files).

Stages, each a function that takes data and returns data (analyze runs them in this order):
read (analysis.io.read_records, split_records: cross-line checks, records by kind) -> build_comparisons
(tokens per (task, arm), within-task comparisons) -> select_arms (measured tokens and comparisons, cheapest
first, the anchor) -> build_design (analysed comparisons, tasks, family weights, PairData) -> fit_once (each
family's Bradley-Terry fit, once; weighted merge, anchored Elo) -> intervals (bootstrap over tasks, from the
same fits) -> make_tables (returns tables, per family, per arm, cost) -> collect_warnings. Option checks are
AnalysisOptions.validate. Reports, plots and the HTML report consume the result.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import polars as pl

from elo_per_token.analysis.breakdown import arm_breakdown, cost_arrays, parse_prices
from elo_per_token.analysis.families import MIN_TASKS, WARN_TASKS, small_families
from elo_per_token.analysis.io import BadLine, Records, line_of, read_records
from elo_per_token.analysis.level import check_level
from elo_per_token.analysis.missing import apply_estimand, check_estimand, missingness
from elo_per_token.analysis.pairs import build_pairs, implied_pair_rows, outcome_groups
from elo_per_token.analysis.tokens import (
    arm_tokens_from_groups,
    call_groups,
    judge_tokens_from_groups,
    task_tokens,
)
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.records import JUDGE_STRATEGY
from elo_per_token.contracts.usage import USAGE_MISSING_HINT

if TYPE_CHECKING:
    from elo_per_token.analysis.bootstrap import BootstrapResult, FamilyPoint, PairData

# Above this many outcome comparison rows, outcomes are kept grouped by score level instead (memory: a
# 200-arm grid with 300 tasks is 9M rows, a 1,000-arm one 225M). Below it, one row per comparison.
_PAIR_ROWS_MAX = 2_000_000

# A family needs MIN_TASKS tasks to enter the merge (fewer: left out with a warning, unless no family has
# enough), and WARN_TASKS for its bootstrap interval to be more than approximate (analysis.families);
# both are re-exported here for the modules that read them from the pipeline.
__all__ = ["MIN_TASKS", "WARN_TASKS", "AnalysisOptions", "AnalysisResult", "analyze"]


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
    # their outcome comparisons are kept as analysis.pairs.outcome_groups, see _PAIR_ROWS_MAX)
    elo: np.ndarray  # [K] anchored point estimate
    tokens_per_task: np.ndarray  # [K]
    table: pl.DataFrame  # analysis.returns.returns_table + tokens_per_task_unweighted
    per_strategy: pl.DataFrame  # analysis.returns.per_strategy_table
    per_family: pl.DataFrame  # family, arm, weight, theta (centred), elo, observed
    fits: list[FamilyFit]
    warnings: list[str] = field(default_factory=list)
    elo_samples: np.ndarray | None = None  # [R, K]
    tokens_samples: np.ndarray | None = None  # [R, K]
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


def _bad(rows: pl.DataFrame, field_name: str, message: str, skip_bad: bool) -> list[BadLine]:
    """Input errors found after reading: raise on the first, or return them all with skip_bad."""
    found = [
        BadLine(r["file"], line_of(r["file"], r["row"]), field_name, message.format(**r))
        for r in (rows if skip_bad else rows.head(1)).iter_rows(named=True)
    ]
    if found and not skip_bad:
        b = found[0]
        raise InputError(b.message, b.file, b.line, b.field)
    return found


def check_records(records: Records, *, skip_bad: bool) -> tuple[pl.DataFrame, list[BadLine]]:
    """Cross-line rules: unknown arms in judgments, duplicate outcomes. Returns the kept frame."""
    frame = records.frame.with_row_index("_i")
    # Lazy and narrow: a filter of the whole frame would copy all its columns (0.8 GB for a 1M-job run).
    lazy = frame.lazy()
    known = (
        lazy.filter(pl.col("kind").is_in(["call", "outcome"])).select(pl.col("arm").unique()).collect()["arm"]
    )
    judg = lazy.filter(pl.col("kind") == "judgment").select("_i", "file", "row", "arm_a", "arm_b").collect()
    bad: list[BadLine] = []
    drop: list[pl.Series] = []
    for side in ("arm_a", "arm_b"):
        unknown = judg.filter(~pl.col(side).is_in(known.implode()))
        bad += _bad(
            unknown,
            side,
            "unknown arm {"
            + side
            + "!r}: no call or outcome record has this arm (arms are strategy@budget_n)",
            skip_bad,
        )
        drop.append(unknown["_i"])
    same = judg.filter(pl.col("arm_a") == pl.col("arm_b"))
    bad += _bad(same, "arm_b", "a judgment needs two different arms, got {arm_a!r} twice", skip_bad)
    drop.append(same["_i"])
    outc = (
        lazy.filter(pl.col("kind") == "outcome")
        .select("_i", "file", "row", "task_id", "arm", "replicate")
        .collect()
    )
    dup = outc.filter(pl.int_range(pl.len()).over("task_id", "arm", "replicate") > 0)
    bad += _bad(
        dup,
        "replicate",
        "duplicate outcome for task {task_id!r}, arm {arm!r}, replicate {replicate}; "
        "give each repeated run its own `replicate`",
        skip_bad,
    )
    drop.append(dup["_i"])
    dropped = pl.concat(drop).unique()
    if dropped.len() == 0:  # the usual case: no copy of a million-row frame
        return records.frame, bad
    return frame.filter(~pl.col("_i").is_in(dropped.implode())).drop("_i"), bad


def _decisive_families(groups: pl.DataFrame, judgments: pl.DataFrame, arms: list[str]) -> set[str]:
    """Families with at least one decisive (not tied) comparison between two of `arms`, without building
    pairs: a task where two different arms scored and two scores differ (some pair of replicates of
    different arms then differs), or a judgment with a winner."""
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
    def weight_array(self) -> np.ndarray:
        return np.array([self.weights[f] for f in self.families], dtype=float)


@dataclass(frozen=True)
class PointFit:
    """Stage 5 (fit once): each family's one Bradley-Terry fit, and the merged point estimate from it."""

    family_fits: dict[str, FamilyPoint]  # reused by the bootstrap
    elo: np.ndarray
    tokens: np.ndarray
    tokens_unweighted: np.ndarray
    per_family_theta: dict[str, np.ndarray]
    fits: list[FamilyFit]
    warnings: list[str]


@dataclass(frozen=True)
class Intervals:
    """Stage 6: bootstrap rounds (None without rounds)."""

    boot: BootstrapResult | None
    warnings: list[str]

    @property
    def elo(self) -> np.ndarray | None:
        return None if self.boot is None else self.boot.elo

    @property
    def tokens(self) -> np.ndarray | None:
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


def analyze(
    paths: Sequence[str],
    options: AnalysisOptions | None = None,
    *,
    progress: Callable[[int], None] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> AnalysisResult:
    """The whole analysis; raises InputError on bad input (nothing is written by this function).

    progress(n) reports bootstrap rounds done; on_step(name) announces each long step. The stages below
    each take data and return data: read -> comparisons -> select arms -> design -> fit once -> intervals
    -> tables -> warnings."""
    opt = options or AnalysisOptions()
    opt.validate()
    step = on_step or (lambda _name: None)
    step("reading inputs")
    records = read_records(paths, skip_bad=opt.skip_bad, tasks_file=opt.tasks_file)
    step("building comparisons")
    inp = split_records(records, opt)
    comp = build_comparisons(inp, opt)
    sel = select_arms(inp, comp, opt)
    design = build_design(inp, comp, sel, opt)
    step("fitting Bradley-Terry")
    point = fit_once(design, sel, opt)
    if opt.rounds > 0:
        step("bootstrap rounds")
    iv = intervals(design, sel, point, opt, progress)
    tables = make_tables(inp, sel, design, point, iv, opt, comp)
    stages = Stages(inp, comp, sel, design, point, iv, tables)
    outcomes = inp.outcomes if comp.outcomes is None else comp.outcomes
    return absolute_metrics(_result(records, stages, collect_warnings(stages, opt), opt), outcomes)


def absolute_metrics(result: AnalysisResult, outcomes: pl.DataFrame) -> AnalysisResult:
    """The result with accuracy / pass@k (analysis.accuracy) and the recommendation (analysis.recommend).
    outcomes: after the --missing estimand (Comparisons.outcomes), so accuracy describes what Elo does; the
    partial arms are marked as in the headline table."""
    from elo_per_token.analysis.accuracy import accuracy_tables
    from elo_per_token.analysis.recommend import parse_budget, recommend_result

    o = result.options
    result.accuracy, result.accuracy_family, result.pass_k = accuracy_tables(
        outcomes,
        result.arms,
        result.family_weights,
        rounds=o.rounds,
        seed=o.seed,
        level=o.level,
        partial=result.partial_arms,
    )
    result.recommendation = recommend_result(result, parse_budget(o.budget))
    return result


def split_records(records: Records, opt: AnalysisOptions) -> Inputs:
    """Cross-line checks (check_records), then the records by kind."""
    frame, late_bad = check_records(records, skip_bad=opt.skip_bad)
    calls = frame.lazy().filter(pl.col("kind") == "call").select(_CALL_COLUMNS)
    return Inputs(
        files=records.files,
        frame=frame,
        skipped=sorted(records.skipped + late_bad, key=lambda b: (b.file, b.line)),
        where=records.files[0] if len(records.files) == 1 else None,
        calls=calls,
        call_groups=call_groups(calls).collect(),
        outcomes=_kind(frame, "outcome", _OUTCOME_COLUMNS),
        judgments=_kind(frame, "judgment", _JUDGMENT_COLUMNS),
    )


# What the stages read of each kind. A full-width copy of the calls of a 1M-job run (5M rows, 23 columns) was
# the largest frame after the records themselves; the frame itself stays whole for the views (records=).
_CALL_COLUMNS = ("task_id", "family", "strategy", "budget_n", "arm", "replicate", "role", "prompt_tokens",
                 "completion_tokens", "usage_missing")  # fmt: skip
_OUTCOME_COLUMNS = ("task_id", "family", "strategy", "budget_n", "arm", "replicate", "score")
_JUDGMENT_COLUMNS = ("task_id", "family", "arm_a", "arm_b", "winner")


def _kind(frame: pl.DataFrame, kind: str, columns: tuple[str, ...]) -> pl.DataFrame:
    """The records of one kind, only `columns`."""
    return frame.lazy().filter(pl.col("kind") == kind).select(columns).collect()


def _strings(df: pl.DataFrame) -> pl.DataFrame:
    """The result's tables hold labels as strings, as before the records frame went Categorical: views and
    reports join them with their own string columns."""
    return df.with_columns(pl.col(pl.Categorical).cast(pl.String))


def build_comparisons(inp: Inputs, opt: AnalysisOptions) -> Comparisons:
    """Tokens per arm and per (task, arm), and the within-task comparisons of every arm."""
    warnings: list[str] = []
    tok_all = _strings(arm_tokens_from_groups(inp.call_groups))
    missing_usage = int(tok_all["calls_missing_usage"].sum()) if tok_all.height else 0
    if missing_usage:
        warnings.append(
            f"{missing_usage} call(s) have no usage; their arms' token figures are lower bounds "
            "(see calls_missing_usage in arms.csv)"
        )
    # A judge job's own outcome carries no score by design: not an answer that failed before grading.
    own = inp.outcomes.filter(pl.col("strategy") != JUDGE_STRATEGY)
    ungraded = int(own["score"].is_null().sum())
    missing_table, missing_warnings = missingness(own, opt.missing)
    warnings += missing_warnings
    est = apply_estimand(own, opt.missing)
    if est.dropped_tasks.height:
        warnings.append(
            f"--missing shared: {est.dropped_tasks.height} task(s) where some arm has no score are left out for "
            "every arm (comparisons and tokens per task); --missing loss counts those as losses instead"
        )
    outcomes = est.outcomes

    # A grid where every arm meets every other on each task has K^2/2 pair rows per task: past
    # _PAIR_ROWS_MAX rows, outcomes stay grouped by (task, arm, score level) and the fits expand them
    # into count matrices (analysis.bootstrap.OutcomeGroups); otherwise one row per comparison.
    groups_full = outcome_groups(outcomes)
    use_groups = implied_pair_rows(groups_full, drop_ties=opt.drop_ties) > _PAIR_ROWS_MAX
    # Labels as categoricals: pair rows hold codes, not strings.
    cat = pl.Categorical
    pairs_all = build_pairs(
        (outcomes.head(0) if use_groups else outcomes).with_columns(
            pl.col("task_id", "family", "arm").cast(cat)
        ),
        inp.judgments.with_columns(pl.col("task_id", "family", "arm_a", "arm_b").cast(cat)),
        drop_ties=opt.drop_ties,
    )
    groups_all = groups_full if use_groups else groups_full.head(0)
    if opt.drop_ties and pairs_all.height == 0 and groups_all.height == 0:
        # Every comparison is a tie: two rows per tied meeting (pairs.implied_pair_rows), one per judgment.
        n_ties = implied_pair_rows(groups_full) // 2 + inp.judgments.filter(pl.col("winner") == "tie").height
        if n_ties:
            raise InputError(
                f"all {n_ties} comparisons are ties (equal scores), so dropping ties leaves nothing to rank: "
                "the data carry no information about which arm is stronger",
                file=inp.where,
                field="--drop-ties",
            )
    ttok = task_tokens(inp.calls).collect()
    if est.dropped_tasks.height:  # the shared tasks' cost too, so every arm's cost is over the same tasks
        ttok = ttok.filter(
            ~pl.col("task_id").cast(pl.String).is_in(est.dropped_tasks["task_id"].cast(pl.String).implode())
        )
    return Comparisons(
        tokens=tok_all,
        task_tokens=ttok,
        groups_full=groups_full,
        pairs=pairs_all,
        groups=groups_all,
        missing_usage=missing_usage,
        ungraded=ungraded,
        warnings=warnings,
        estimand_title=est.title,
        missing=missing_table,
        outcomes=outcomes,
    )


def select_arms(inp: Inputs, comp: Comparisons, opt: AnalysisOptions) -> ArmSelection:
    """The arms that can sit on both axes (measured tokens, some comparison), cheapest first; the anchor."""
    warnings: list[str] = []
    tok_all, pairs_all = comp.tokens, comp.pairs
    # An arm whose every task lacks usage has no measured cost: it cannot sit on a tokens axis.
    with_tokens = set(tok_all.filter(pl.col("avg_tokens_per_task").is_not_null())["arm"].to_list())
    for arm in sorted(set(comp.task_tokens["arm"].to_list()) - with_tokens):
        warnings.append(
            f"arm {arm}: no task has complete usage, so its tokens per task are unknown; left out"
        )
    compared = set(pairs_all["winner"].unique().to_list()) | set(pairs_all["loser"].unique().to_list())
    compared |= set(comp.groups["arm"].unique().to_list())
    graded = set(inp.outcomes.filter(pl.col("score").is_not_null())["arm"].to_list()) | compared
    for arm in sorted(graded - with_tokens):
        warnings.append(f"arm {arm} has outcomes but no strategy calls: tokens unknown, left out")
    for arm in sorted(with_tokens - graded):
        warnings.append(f"arm {arm} has calls but no outcomes or judgments: left out of the Elo table")
    for arm in sorted((graded & with_tokens) - compared):
        warnings.append(f"arm {arm} never meets another arm on a task: left out of the Elo table")
    keep = with_tokens & compared
    if not inp.n_strategy_calls:
        raise InputError("no call records (with usage): tokens per task cannot be measured", file=inp.where)
    if not (inp.outcomes.height or inp.judgments.height):
        raise InputError("no outcome or judgment records: nothing to compare", file=inp.where)
    if not with_tokens and inp.n_strategy_calls:
        raise InputError(f"no arm has measured tokens: {USAGE_MISSING_HINT}", file=inp.where)
    if len(keep) < 2:
        raise InputError(
            f"need at least two arms with both calls and comparisons, found {sorted(keep)}", file=inp.where
        )
    # Arm order: cheapest first, the order of every array and of the table.
    arm_info = (
        tok_all.filter(pl.col("arm").is_in(sorted(keep)))
        .sort("avg_tokens_per_task", "strategy", "budget_n", "arm")
        .unique("arm", keep="first", maintain_order=True)
    )
    arms = arm_info["arm"].to_list()
    anchor = opt.anchor or arms[0]
    if anchor not in arms:
        raise InputError(f"unknown arm {anchor!r}; arms: {', '.join(arms)}", field="--anchor")
    return ArmSelection(info=arm_info, arms=arms, anchor=anchor, warnings=warnings)


def build_design(inp: Inputs, comp: Comparisons, sel: ArmSelection, opt: AnalysisOptions) -> Design:
    """The analysed arms' comparisons and tasks, the family weights (small families left out) and the
    PairData every fit reads."""
    from elo_per_token.analysis.merge import parse_weights

    arms = sel.arms
    pairs = comp.pairs.filter(pl.col("winner").is_in(arms) & pl.col("loser").is_in(arms))
    groups = comp.groups.filter(pl.col("arm").is_in(arms)).filter(
        pl.col("arm").n_unique().over("task_id") > 1
    )
    if pairs.height == 0 and groups.height == 0:
        raise InputError(
            f"the arms with measured tokens ({', '.join(arms)}) never meet on a task", file=inp.where
        )
    ttok = comp.task_tokens.filter(pl.col("arm").is_in(arms))
    families = sorted(set(pairs["family"].unique().to_list()) | set(groups["family"].unique().to_list()))
    fw = parse_weights(opt.weights, families)
    warnings = _tie_warnings(families, _decisive_families(comp.groups_full, inp.judgments, arms))
    # Tasks: everything compared, plus token-only tasks of the analysed families (they count for cost).
    tasks = (
        pl.concat(
            [
                pairs.select("task_id", "family").unique().cast(pl.String),
                groups.select("task_id", "family").cast(pl.String),
                ttok.select("task_id", "family").cast(pl.String),
            ]
        )
        .filter(pl.col("family").is_in(families))
        .unique()
        .sort("family", "task_id")
        .with_row_index("t")
    )
    data = _pair_data(tasks, pairs, groups, ttok, families, sel.index, opt.drop_ties)
    counted = tasks.group_by("family").len()
    n_tasks = dict(zip(counted["family"].to_list(), counted["len"].to_list(), strict=True))
    rule = small_families(families, fw, n_tasks, opt.min_tasks)
    return Design(
        pairs=pairs,
        groups=groups,
        task_tokens=ttok,
        tasks=tasks,
        families=families,
        weights=rule.weights,
        excluded=rule.excluded,
        n_tasks=n_tasks,
        data=data,
        warnings=warnings + rule.warnings,
        weights_note=rule.note,
    )


def _tie_warnings(families: list[str], decisive: set[str]) -> list[str]:
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


def _pair_data(
    tasks: pl.DataFrame,
    pairs: pl.DataFrame,
    groups: pl.DataFrame,
    ttok: pl.DataFrame,
    families: list[str],
    arm_idx: dict[str, int],
    drop_ties: bool,
) -> PairData:
    """Labels -> indices (task by task_id, arm by arm_idx); analysis.design.pair_data does the rest."""
    from elo_per_token.analysis.design import pair_data

    # The records' task ids are Categorical (analysis.io.LABEL_COLUMNS), and so every frame joined here.
    t_of = tasks.select(pl.col("task_id").cast(pl.Categorical), pl.col("t").cast(pl.Int64).alias("task"))

    def arm(col: str) -> pl.Expr:
        return pl.col(col).replace_strict(arm_idx, return_dtype=pl.Int64)

    p = pairs.join(t_of, on="task_id")
    return pair_data(
        tasks["family"],
        families,
        p.select("task", arm("winner").alias("winner"), arm("loser").alias("loser"), "weight"),
        ttok.join(t_of, on="task_id").select("task", arm("arm").alias("arm"), "tokens"),
        len(arm_idx),
        groups=groups.join(t_of, on="task_id").select("task", arm("arm").alias("arm"), "level", "mass"),
        tie_weight=0.0 if drop_ties else 0.5,
    )


def fit_once(design: Design, sel: ArmSelection, opt: AnalysisOptions) -> PointFit:
    """Each family's Bradley-Terry fit, ONCE (analysis.bootstrap.fit_families); the merged point estimate
    and the fit diagnostics both come from it, and the bootstrap reuses it."""
    from elo_per_token.analysis.bootstrap import fit_families, point_estimate, tokens_unweighted

    data, arms = design.data, sel.arms
    family_fits = fit_families(data, l2=opt.l2_value)
    elo, tok, per_family_theta = point_estimate(
        data, design.weight_array, anchor=sel.index[sel.anchor], l2=opt.l2_value, fits=family_fits
    )
    fits: list[FamilyFit] = []
    warnings: list[str] = []
    for f in design.families:
        d = family_fits[f].fit
        fits.append(
            FamilyFit(
                family=f,
                tasks=int(design.n_tasks[f]),
                comparisons=family_fits[f].comparisons,
                converged=bool(d.converged),
                n_iter=int(d.n_iter),
                grad_norm=float(d.grad_norm),
                unobserved=[arms[i] for i in np.asarray(d.unobserved, dtype=int)],
            )
        )
        if not d.converged:
            warnings.append(f"family {f}: Bradley-Terry fit did not converge (grad norm {d.grad_norm:.2e})")
        if fits[-1].unobserved:
            warnings.append(
                f"family {f} has no comparisons for {', '.join(fits[-1].unobserved)}: their global Elo "
                "comes from the other families only (placed on the common scale through the arms the "
                "families share)"
            )
    return PointFit(
        family_fits=family_fits,
        elo=np.asarray(elo, dtype=float),
        tokens=np.asarray(tok, dtype=float),
        tokens_unweighted=tokens_unweighted(data),
        per_family_theta=per_family_theta,
        fits=fits,
        warnings=warnings,
    )


def intervals(
    design: Design,
    sel: ArmSelection,
    point: PointFit,
    opt: AnalysisOptions,
    progress: Callable[[int], None] | None = None,
) -> Intervals:
    """Bootstrap rounds over tasks (none when opt.rounds == 0), stretched from the point fits."""
    from elo_per_token.analysis.bootstrap import bootstrap

    if opt.rounds <= 0:
        return Intervals(boot=None, warnings=[])
    boot = bootstrap(
        design.data,
        design.weight_array,
        anchor=sel.index[sel.anchor],
        rounds=opt.rounds,
        seed=opt.seed,
        l2=opt.l2_value,
        progress=progress,
        fits=point.family_fits,
        level=opt.level,
    )
    failed = int(boot.failed_rounds)
    warnings = [f"{failed} of {opt.rounds} bootstrap rounds had a non-converged fit"] if failed else []
    return Intervals(boot=boot, warnings=warnings)


def make_tables(
    inp: Inputs,
    sel: ArmSelection,
    design: Design,
    point: PointFit,
    iv: Intervals,
    opt: AnalysisOptions,
    comp: Comparisons | None = None,
) -> Tables:
    """The returns table (and over cost when priced), per strategy, vs the frontier, per family, per arm.

    The headline table (analysis.frontier.headline_table) is against the previous frontier arm, with
    partial arms marked and off the frontier; comp adds each arm's tie share (analysis.ties)."""
    from elo_per_token.analysis.frontier import families_seen, headline_table
    from elo_per_token.analysis.returns import frontier_steps_table, per_strategy_table, returns_table

    arms, elo, tok, elo_s, tok_s = sel.arms, point.elo, point.tokens, iv.elo, iv.tokens
    strategies = sel.info["strategy"].to_list()
    budgets = [int(b) for b in sel.info["budget_n"].to_list()]
    partial = families_seen(point.per_family_theta, design.weights, arms)
    eligible = np.array([a not in partial for a in arms])  # partial arms are off every table's frontier
    table = headline_table(
        arms,
        strategies,
        budgets,
        tok,
        elo,
        elo_s,
        tok_s,
        partial=partial,
        per_family_theta=point.per_family_theta,
        round_theta=None if iv.boot is None else iv.boot.family_theta,
        weights=design.weights,
        level=opt.level,
    )
    prices = parse_prices(opt.prices)
    # Lazy: the breakdown's queries read their few columns of the analysed arms' rows, no copy of the frame.
    breakdown = _strings(arm_breakdown(inp.frame.lazy().filter(pl.col("arm").is_in(arms)), prices))
    cost_table = None
    if prices is not None:
        cost, cost_s = cost_arrays(arms, tok, tok_s, breakdown)
        # The returns table over cost: "per 1k" of (USD x 1000) is per $1.
        cost_table = returns_table(
            arms,
            strategies,
            budgets,
            cost * 1000,
            elo,
            elo_s,
            None if cost_s is None else cost_s * 1000,
            level=opt.level,
            eligible=eligible,
        ).rename(lambda c: c.replace("tokens_per_task", "cost_per_task").replace("per_1k", "per_usd"))
        cost_table = cost_table.with_columns(pl.col("cost_per_task") / 1000)
    unweighted = pl.DataFrame({"arm": arms, "tokens_per_task_unweighted": point.tokens_unweighted})
    table = table.join(unweighted.with_columns(pl.col(pl.Float64).fill_nan(None)), on="arm", how="left")
    if comp is not None:
        from elo_per_token.analysis.ties import separating_pairs, tie_stats

        groups = comp.groups_full.filter(pl.col("family").is_in(design.families))
        table = table.join(tie_stats(groups, inp.judgments, arms), on="arm", how="left")
        vs_pairs = list(zip(table["arm"].to_list(), table["vs"].to_list(), strict=True))
        table = table.with_columns(
            pl.Series("separating_vs", separating_pairs(groups, inp.judgments, vs_pairs), dtype=pl.Int64)
        )
    return Tables(
        strategies=strategies,
        budgets=budgets,
        table=table,
        per_strategy=per_strategy_table(
            arms, strategies, budgets, tok, elo, elo_s, tok_s, level=opt.level, eligible=eligible
        ),
        vs_frontier=frontier_steps_table(
            arms, strategies, budgets, tok, elo, elo_s, tok_s, level=opt.level, eligible=eligible
        ),
        breakdown=breakdown,
        cost_table=cost_table,
        per_family=_per_family_table(design, arms, point.per_family_theta, iv, opt.level),
        partial=partial,
    )


def _per_family_table(
    design: Design,
    arms: list[str],
    per_family_theta: dict[str, np.ndarray],
    iv: Intervals | None = None,
    level: float = 0.95,
) -> pl.DataFrame:
    """family, weight, arm, theta (centred), elo and its interval (elo_lo, elo_hi: percentiles of the
    family's own bootstrap rounds, null without rounds or where the family never observed the arm)."""
    import warnings

    from elo_per_token.analysis.merge import ELO_BASE, ELO_SCALE

    rows = []
    q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
    for f in design.families:
        th = np.asarray(per_family_theta[f], dtype=float)
        centred = th - np.nanmean(th)
        lo = hi = np.full(len(arms), np.nan)
        if iv is not None and iv.boot is not None and f in iv.boot.family_theta:
            r = iv.boot.family_theta[f]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # an arm the family never saw: all NaN
                lo, hi = ELO_BASE + ELO_SCALE * np.nanpercentile(
                    r - np.nanmean(r, axis=1, keepdims=True), q, axis=0
                )
        rows += [
            {
                "family": f,
                "weight": design.weights[f],
                "arm": a,
                "theta": None if math.isnan(centred[i]) else float(centred[i]),
                "elo": None if math.isnan(centred[i]) else float(ELO_BASE + ELO_SCALE * centred[i]),
                "elo_lo": None if math.isnan(centred[i]) or math.isnan(lo[i]) else float(lo[i]),
                "elo_hi": None if math.isnan(centred[i]) or math.isnan(hi[i]) else float(hi[i]),
            }
            for i, a in enumerate(arms)
        ]
    return pl.DataFrame(
        rows,
        schema={"family": pl.String, "weight": pl.Float64, "arm": pl.String, "theta": pl.Float64, "elo": pl.Float64,
                "elo_lo": pl.Float64, "elo_hi": pl.Float64},
    )  # fmt: skip


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


def collect_warnings(st: Stages, opt: AnalysisOptions) -> list[str]:
    """Every stage's warnings in pipeline order, then those read off the tables; skipped lines first."""
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


def _result(records: Records, st: Stages, warnings: list[str], opt: AnalysisOptions) -> AnalysisResult:
    inp, comp, sel, design, point, iv, tables = st.inp, st.comp, st.sel, st.design, st.point, st.iv, st.tables
    n_strategy_calls = inp.n_strategy_calls
    spent, spent_bad = _spent(records.files, opt)
    if spent_bad:  # --skip-bad: said first, as skipped lines are
        warnings = [f"skipped {len(spent_bad)} bad spent object(s) (--skip-bad): their calls are not in the "
                    f"failed-attempt totals; first: {spent_bad[0]}", *warnings]  # fmt: skip
    counts = {
        "files": len(records.files),
        "calls": inp.n_calls,
        "strategy_calls": n_strategy_calls,
        "judge_calls": inp.n_calls - n_strategy_calls,
        "calls_missing_usage": comp.missing_usage,
        "outcomes": inp.outcomes.height,
        "ungraded_outcomes": comp.ungraded,
        "judgments": inp.judgments.height,
        "comparisons": design.pairs.height + implied_pair_rows(design.groups, drop_ties=opt.drop_ties),
        "tasks": design.tasks.height,  # the tasks the fit compares arms on (the --missing estimand's)
        # every task with an outcome, those the estimand leaves out included (what `ept view`'s grids list)
        "tasks_with_outcomes": inp.outcomes["task_id"].n_unique() if inp.outcomes.height else 0,
        "skipped_lines": len(inp.skipped) + len(spent_bad),
    }
    return AnalysisResult(
        inputs=records.files,
        options=opt,
        counts=counts,
        skipped=inp.skipped + spent_bad,
        arms=sel.arms,
        strategies=tables.strategies,
        budgets=tables.budgets,
        families=design.families,
        family_weights=design.weights,
        anchor=sel.anchor,
        tokens=comp.tokens,
        judge_tokens=_strings(judge_tokens_from_groups(inp.call_groups)),
        task_tokens=_strings(design.task_tokens),
        pairs=design.pairs,
        elo=point.elo,
        tokens_per_task=point.tokens,
        table=tables.table,
        per_strategy=tables.per_strategy,
        per_family=tables.per_family,
        fits=point.fits,
        warnings=warnings,
        elo_samples=iv.elo,
        tokens_samples=iv.tokens,
        failed_rounds=iv.failed,
        versions=versions(),
        records=inp.frame,
        breakdown=tables.breakdown,
        cost_table=tables.cost_table,
        vs_frontier=tables.vs_frontier,
        excluded_families=design.excluded,
        title_notes=[n for n in (comp.estimand_title, design.weights_note) if n],
        partial_arms=tables.partial,
        missing=comp.missing,
        spent_on_failed_attempts=spent,
    )


def _spent(paths: Sequence[str], opt: AnalysisOptions) -> tuple[list[dict[str, Any]], list[BadLine]]:
    """Failed-attempt spend per arm, and the spent objects skipped as bad (only with --skip-bad)."""
    from elo_per_token.analysis.spent import spent_for_inputs

    skipped: list[BadLine] | None = [] if opt.skip_bad else None
    try:
        rows = spent_for_inputs(paths, parse_prices(opt.prices), skipped=skipped)
    except ValueError as e:  # a malformed spent object: named, as any other bad input
        raise InputError(str(e), field="spent") from None
    return rows, skipped or []


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
