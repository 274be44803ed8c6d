"""`analyze(...)`: call logs and outcomes in, an AnalysisResult out (no printing, no files).

Stages, each a function that takes data and returns data (analyze runs them in this order):
read (analysis.io.read_records, split_records: cross-line checks, records by kind) -> build_comparisons
(tokens per (task, arm), within-task comparisons) -> select_arms (measured tokens and comparisons, cheapest
first, the anchor) -> build_design (analysed comparisons, tasks, family weights, PairData) -> fit_once (each
family's Bradley-Terry fit, once; weighted merge, anchored Elo) -> intervals (bootstrap over tasks, from the
same fits) -> make_tables (returns tables, per family, per arm, cost) -> collect_warnings. Option checks are
AnalysisOptions.validate. Reports, plots and the HTML report consume the result.

The options and result types are in analysis.result, each stage's result type in analysis.stages, the
cross-line checks in analysis.record_checks, the table stage in analysis.pipeline_tables and the warnings
in analysis.result_warnings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from elo_per_token.analysis.breakdown import parse_prices
from elo_per_token.analysis.families import MIN_TASKS, WARN_TASKS, small_families
from elo_per_token.analysis.io import BadLine, Records, read_records
from elo_per_token.analysis.missing import apply_estimand, missingness
from elo_per_token.analysis.pairs import build_pairs, implied_pair_rows, outcome_groups
from elo_per_token.analysis.pipeline_tables import label_strings, make_tables
from elo_per_token.analysis.record_checks import check_records
from elo_per_token.analysis.result import AnalysisOptions, AnalysisResult, FamilyFit, versions
from elo_per_token.analysis.result_warnings import collect_warnings, decisive_families, tie_warnings
from elo_per_token.analysis.stages import (
    ArmSelection,
    Comparisons,
    Design,
    Inputs,
    Intervals,
    PointFit,
    Stages,
)
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
    from elo_per_token.analysis.bootstrap import PairData

# Above this many outcome comparison rows, outcomes are kept grouped by score level instead (memory: a
# 200-arm grid with 300 tasks is 9M rows, a 1,000-arm one 225M). Below it, one row per comparison.
_PAIR_ROWS_MAX = 2_000_000

# A family needs MIN_TASKS tasks to enter the merge (fewer: left out with a warning, unless no family has
# enough), and WARN_TASKS for its bootstrap interval to be more than approximate (analysis.families);
# both are re-exported here for the modules that read them from the pipeline.
__all__ = ["MIN_TASKS", "WARN_TASKS", "AnalysisOptions", "AnalysisResult", "analyze"]


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
    -> tables -> warnings.

    Args:
        paths: Runs (ledger run folders or URLs) or call-log files, folders and globs.
        options: The analysis options (None: the defaults).
        progress: Called with the bootstrap rounds done so far.
        on_step: Called with the name of each long step as it starts.
    """
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
    partial arms are marked as in the headline table.

    Args:
        result: The Elo result of the analysis.
        outcomes: The outcomes after the --missing estimand (Comparisons.outcomes).
    """
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
    """Cross-line checks (check_records), then the records by kind.

    Args:
        records: The records read (analysis.io.read_records).
        opt: The validated analysis options.
    """
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
_CALL_COLUMNS = (
    "task_id",
    "family",
    "strategy",
    "budget_n",
    "arm",
    "replicate",
    "role",
    "prompt_tokens",
    "completion_tokens",
    "usage_missing",
)
_OUTCOME_COLUMNS = ("task_id", "family", "strategy", "budget_n", "arm", "replicate", "score")
_JUDGMENT_COLUMNS = ("task_id", "family", "arm_a", "arm_b", "winner")


def _kind(frame: pl.DataFrame, kind: str, columns: tuple[str, ...]) -> pl.DataFrame:
    """The records of one kind, only `columns`."""
    return frame.lazy().filter(pl.col("kind") == kind).select(columns).collect()


def _refuse_all_ties(inp: Inputs, groups_full: pl.DataFrame) -> None:
    """--drop-ties left no comparison: an InputError when there were comparisons (all of them ties)."""
    # Every comparison is a tie: two rows per tied meeting (pairs.implied_pair_rows), one per judgment.
    n_ties = implied_pair_rows(groups_full) // 2 + inp.judgments.filter(pl.col("winner") == "tie").height
    if n_ties:
        raise InputError(
            f"all {n_ties} comparisons are ties (equal scores), so dropping ties leaves nothing to rank: "
            "the data carry no information about which arm is stronger",
            file=inp.where,
            field="--drop-ties",
        )


def build_comparisons(inp: Inputs, opt: AnalysisOptions) -> Comparisons:
    """Tokens per arm and per (task, arm), and the within-task comparisons of every arm.

    Args:
        inp: the run's records.
        opt: the analysis options.
    """
    warnings: list[str] = []
    tok_all = label_strings(arm_tokens_from_groups(inp.call_groups))
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
        _refuse_all_ties(inp, groups_full)
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
    """The arms that can sit on both axes (measured tokens, some comparison), cheapest first; the anchor.

    Args:
        inp: The records by kind (split_records).
        comp: The comparisons (build_comparisons).
        opt: The validated analysis options.
    """
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
    PairData every fit reads.

    Args:
        inp: The records by kind (split_records).
        comp: The comparisons (build_comparisons).
        sel: The analysed arms and the anchor (select_arms).
        opt: The validated analysis options.
    """
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
    warnings = tie_warnings(families, decisive_families(comp.groups_full, inp.judgments, arms))
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
    and the fit diagnostics both come from it, and the bootstrap reuses it.

    Args:
        design: The design (build_design).
        sel: The analysed arms and the anchor (select_arms).
        opt: The validated analysis options.
    """
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
    """Bootstrap rounds over tasks (none when opt.rounds == 0), stretched from the point fits.

    Args:
        design: The design (build_design).
        sel: The analysed arms and the anchor (select_arms).
        point: The point fit (fit_once).
        opt: The validated analysis options.
        progress: Called with the bootstrap rounds done so far.
    """
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


def _result(records: Records, st: Stages, warnings: list[str], opt: AnalysisOptions) -> AnalysisResult:
    inp, comp, sel, design, point, iv, tables = st.inp, st.comp, st.sel, st.design, st.point, st.iv, st.tables
    spent, spent_bad = _spent(records.files, opt)
    if spent_bad:  # --skip-bad: said first, as skipped lines are
        warnings = [
            f"skipped {len(spent_bad)} bad spent object(s) (--skip-bad): their calls are not in the "
            f"failed-attempt totals; first: {spent_bad[0]}",
            *warnings,
        ]
    counts = _counts(records, st, opt, len(spent_bad))
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
        judge_tokens=label_strings(judge_tokens_from_groups(inp.call_groups)),
        task_tokens=label_strings(design.task_tokens),
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


def _counts(records: Records, st: Stages, opt: AnalysisOptions, n_spent_bad: int) -> dict[str, int]:
    """The result's counts: files, calls (strategy and judge), outcomes, judgments, comparisons, tasks and the
    lines skipped as bad (spent objects included)."""
    inp, comp, design = st.inp, st.comp, st.design
    n_strategy_calls = inp.n_strategy_calls
    return {
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
        "skipped_lines": len(inp.skipped) + n_spent_bad,
    }


def _spent(paths: Sequence[str], opt: AnalysisOptions) -> tuple[list[dict[str, Any]], list[BadLine]]:
    """Failed-attempt spend per arm, and the spent objects skipped as bad (only with --skip-bad)."""
    from elo_per_token.analysis.spent import spent_for_inputs

    skipped: list[BadLine] | None = [] if opt.skip_bad else None
    try:
        rows = spent_for_inputs(paths, parse_prices(opt.prices), skipped=skipped)
    except ValueError as e:  # a malformed spent object: named, as any other bad input
        raise InputError(str(e), field="spent") from None
    return rows, skipped or []
