"""`analyze(...)`: call logs and outcomes in, an AnalysisResult out (no printing, no files).

Steps: read and validate records -> check arms -> tokens per (task, arm) -> within-task comparisons
-> per-family Bradley-Terry, weighted merge, anchored Elo -> bootstrap over tasks -> returns tables,
per-family view, frontier and heterogeneity warnings. Reports, plots and the HTML report consume the result.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import polars as pl

from elo_per_token.analysis.breakdown import arm_breakdown, cost_arrays, parse_prices
from elo_per_token.analysis.io import BadLine, Records, line_of, read_records
from elo_per_token.analysis.pairs import build_pairs, implied_pair_rows, outcome_groups
from elo_per_token.analysis.tokens import arm_tokens, judge_tokens, strategy_calls, task_tokens
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.records import JUDGE_STRATEGY

# Above this many outcome comparison rows, outcomes are kept grouped by score level instead (memory: a
# 200-arm grid with 300 tasks is 9M rows, a 1,000-arm one 225M). Below it, one row per comparison.
_PAIR_ROWS_MAX = 2_000_000

# A family needs this many tasks to enter the merge (fewer: left out with a warning, unless no family has
# enough), and WARN_TASKS for its bootstrap interval to be more than approximate (docs/statistics.md).
MIN_TASKS = 10
WARN_TASKS = 30


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
        }


def versions() -> dict[str, str]:
    import scipy

    from elo_per_token.ept import __version__

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
    known = frame.filter(pl.col("kind").is_in(["call", "outcome"]))["arm"].unique()
    judg = frame.filter(pl.col("kind") == "judgment")
    bad: list[BadLine] = []
    drop: list[pl.Series] = []
    for side in ("arm_a", "arm_b"):
        unknown = judg.filter(~pl.col(side).is_in(known.implode()))
        bad += _bad(
            unknown,
            side,
            "unknown arm {" + side + "!r}: no call or outcome record has this arm (arms are strategy@budget_n)",
            skip_bad,
        )
        drop.append(unknown["_i"])
    same = judg.filter(pl.col("arm_a") == pl.col("arm_b"))
    bad += _bad(same, "arm_b", "a judgment needs two different arms, got {arm_a!r} twice", skip_bad)
    drop.append(same["_i"])
    outc = frame.filter(pl.col("kind") == "outcome")
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


def _strings(df: pl.DataFrame) -> pl.DataFrame:
    """The result's tables hold labels as strings, as before the records frame went Categorical: views and
    reports join them with their own string columns."""
    return df.with_columns(pl.col(pl.Categorical).cast(pl.String))


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
    j = judgments.filter(pl.col("arm_a").is_in(arms) & pl.col("arm_b").is_in(arms) & (pl.col("winner") != "tie"))
    return set(tasks["family"].to_list()) | set(j["family"].to_list())


def analyze(
    paths: Sequence[str],
    options: AnalysisOptions | None = None,
    *,
    progress: Callable[[int], None] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> AnalysisResult:
    """The whole analysis; raises InputError on bad input (nothing is written by this function).

    progress(n) reports bootstrap rounds done; on_step(name) announces each long step.
    """
    from elo_per_token.analysis.bootstrap import (
        OutcomeGroups,
        PairData,
        bootstrap,
        family_counts,
        point_estimate,
        tokens_unweighted,
    )
    from elo_per_token.analysis.bt import fit_bt_counts, prior_l2
    from elo_per_token.analysis.merge import ELO_BASE, ELO_SCALE, parse_weights
    from elo_per_token.analysis.returns import (
        family_heterogeneity,
        frontier_steps_table,
        per_strategy_table,
        returns_table,
    )

    opt = options or AnalysisOptions()
    if opt.rounds < 0:
        raise InputError(f"must be >= 0, got {opt.rounds}", field="--rounds")
    if opt.l2 is not None and not (math.isfinite(opt.l2) and opt.l2 >= 0):
        raise InputError(f"must be a finite number >= 0, got {opt.l2}", field="--l2")
    if opt.min_tasks < 0:
        raise InputError(f"must be >= 0, got {opt.min_tasks}", field="--min-tasks")
    l2 = prior_l2() if opt.l2 is None else float(opt.l2)
    if not 0.5 <= opt.level < 1:
        raise InputError(f"must be in [0.5, 1), got {opt.level}", field="--level")
    step = on_step or (lambda _name: None)
    step("reading inputs")
    records = read_records(paths, skip_bad=opt.skip_bad, tasks_file=opt.tasks_file)
    step("building comparisons")
    frame, late_bad = check_records(records, skip_bad=opt.skip_bad)
    skipped = sorted(records.skipped + late_bad, key=lambda b: (b.file, b.line))
    where = records.files[0] if len(records.files) == 1 else None

    calls = frame.filter(pl.col("kind") == "call")
    outcomes = frame.filter(pl.col("kind") == "outcome")
    judgments = frame.filter(pl.col("kind") == "judgment")
    warnings: list[str] = []

    tok_all = _strings(arm_tokens(calls))
    missing_usage = int(tok_all["calls_missing_usage"].sum()) if tok_all.height else 0
    if missing_usage:
        warnings.append(
            f"{missing_usage} call(s) have no usage; their arms' token figures are lower bounds "
            "(see calls_missing_usage in arms.csv)"
        )
    # A judge job's own outcome carries no score by design: not an answer that failed before grading.
    ungraded = int(outcomes.filter(pl.col("strategy") != JUDGE_STRATEGY)["score"].is_null().sum())
    if ungraded:
        warnings.append(f"{ungraded} outcome(s) have no score (failed before grading) and are not compared")

    # A grid where every arm meets every other on each task has K^2/2 pair rows per task: past
    # _PAIR_ROWS_MAX rows, outcomes stay grouped by (task, arm, score level) and the fits expand them
    # into count matrices (analysis.bootstrap.OutcomeGroups); otherwise one row per comparison.
    groups_full = outcome_groups(outcomes)
    use_groups = implied_pair_rows(groups_full, drop_ties=opt.drop_ties) > _PAIR_ROWS_MAX
    # Labels as categoricals: pair rows hold codes, not strings.
    cat = pl.Categorical
    pairs_all = build_pairs(
        (outcomes.head(0) if use_groups else outcomes).with_columns(pl.col("task_id", "family", "arm").cast(cat)),
        judgments.with_columns(pl.col("task_id", "family", "arm_a", "arm_b").cast(cat)),
        drop_ties=opt.drop_ties,
    )
    groups_all = groups_full if use_groups else groups_full.head(0)
    if opt.drop_ties and pairs_all.height == 0 and groups_all.height == 0:
        # Every comparison is a tie: two rows per tied meeting (pairs.implied_pair_rows), one per judgment.
        n_ties = implied_pair_rows(groups_full) // 2 + judgments.filter(pl.col("winner") == "tie").height
        if n_ties:
            raise InputError(
                f"all {n_ties} comparisons are ties (equal scores), so dropping ties leaves nothing to rank: "
                "the data carry no information about which arm is stronger",
                file=where,
                field="--drop-ties",
            )
    ttok_all = task_tokens(calls)
    # An arm whose every task lacks usage has no measured cost: it cannot sit on a tokens axis.
    with_tokens = set(tok_all.filter(pl.col("avg_tokens_per_task").is_not_null())["arm"].to_list())
    for arm in sorted(set(ttok_all["arm"].to_list()) - with_tokens):
        warnings.append(f"arm {arm}: no task has complete usage, so its tokens per task are unknown; left out")
    compared = set(pairs_all["winner"].unique().to_list()) | set(pairs_all["loser"].unique().to_list())
    compared |= set(groups_all["arm"].unique().to_list())
    graded = set(outcomes.filter(pl.col("score").is_not_null())["arm"].to_list()) | compared
    for arm in sorted(graded - with_tokens):
        warnings.append(f"arm {arm} has outcomes but no strategy calls: tokens unknown, left out")
    for arm in sorted(with_tokens - graded):
        warnings.append(f"arm {arm} has calls but no outcomes or judgments: left out of the Elo table")
    for arm in sorted((graded & with_tokens) - compared):
        warnings.append(f"arm {arm} never meets another arm on a task: left out of the Elo table")
    keep = with_tokens & compared
    if not strategy_calls(calls).height:
        raise InputError("no call records (with usage): tokens per task cannot be measured", file=where)
    if not (outcomes.height or judgments.height):
        raise InputError("no outcome or judgment records: nothing to compare", file=where)
    if len(keep) < 2:
        raise InputError(
            f"need at least two arms with both calls and comparisons, found {sorted(keep)}", file=where
        )

    # Arm order: cheapest first, the order of every array and of the table.
    arm_info = (
        tok_all.filter(pl.col("arm").is_in(sorted(keep)))
        .sort("avg_tokens_per_task", "strategy", "budget_n", "arm")
        .unique("arm", keep="first", maintain_order=True)
    )
    arms = arm_info["arm"].to_list()
    k = len(arms)
    arm_idx = {a: i for i, a in enumerate(arms)}
    anchor = opt.anchor or arms[0]
    if anchor not in arm_idx:
        raise InputError(f"unknown arm {anchor!r}; arms: {', '.join(arms)}", field="--anchor")

    pairs = pairs_all.filter(pl.col("winner").is_in(arms) & pl.col("loser").is_in(arms))
    groups = groups_all.filter(pl.col("arm").is_in(arms)).filter(pl.col("arm").n_unique().over("task_id") > 1)
    if pairs.height == 0 and groups.height == 0:
        raise InputError(f"the arms with measured tokens ({', '.join(arms)}) never meet on a task", file=where)
    ttok = ttok_all.filter(pl.col("arm").is_in(arms))
    families = sorted(set(pairs["family"].unique().to_list()) | set(groups["family"].unique().to_list()))
    fw = parse_weights(opt.weights, families)
    fam_idx = {f: i for i, f in enumerate(families)}
    fam_decisive = _decisive_families(groups_full, judgments, arms)
    if not fam_decisive:
        warnings.append(
            "no signal: every comparison is a tie (equal scores), so the data say nothing about which arm is "
            "stronger; every Elo is 1000 by construction, not by measurement, and the frontier only "
            "reflects cost"
        )
    else:
        for f in families:
            if f not in fam_decisive:
                warnings.append(f"family {f}: every comparison is a tie, so it carries no information about strength")

    # Tasks: everything compared, plus token-only tasks of the analysed families (they count for cost).
    tasks = (
        pl.concat([
            pairs.select("task_id", "family").unique().cast(pl.String),
            groups.select("task_id", "family").cast(pl.String),
            ttok.select("task_id", "family").cast(pl.String),
        ])
        .filter(pl.col("family").is_in(families))
        .unique()
        .sort("family", "task_id")
        .with_row_index("t")
    )
    t_of = tasks.select(pl.col("task_id").cast(cat), pl.col("t").cast(pl.Int64))  # the records' task ids are Categorical
    p = pairs.join(t_of, on="task_id").with_columns(
        pl.col("winner").replace_strict(arm_idx, return_dtype=pl.Int64).alias("wi"),
        pl.col("loser").replace_strict(arm_idx, return_dtype=pl.Int64).alias("li"),
    )
    grid = np.full((tasks.height, k), np.nan)
    tt = ttok.join(t_of, on="task_id").with_columns(
        pl.col("arm").replace_strict(arm_idx, return_dtype=pl.Int64).alias("ai")
    )
    grid[tt["t"].to_numpy(), tt["ai"].to_numpy()] = tt["tokens"].to_numpy()
    og = None
    if groups.height:
        g = groups.join(t_of, on="task_id").with_columns(
            pl.col("arm").replace_strict(arm_idx, return_dtype=pl.Int64).alias("ai")
        )
        og = OutcomeGroups(
            task=g["t"].to_numpy(), arm=g["ai"].to_numpy(), level=g["level"].to_numpy(),
            mass=g["mass"].to_numpy().astype(float), tie_weight=0.0 if opt.drop_ties else 0.5,
        )
    data = PairData(
        task_family=tasks["family"].replace_strict(fam_idx, return_dtype=pl.Int64).to_numpy(),
        task=p["t"].to_numpy(),
        winner=p["wi"].to_numpy(),
        loser=p["li"].to_numpy(),
        weight=p["weight"].to_numpy().astype(float),
        n_arms=k,
        families=families,
        task_tokens=grid,
        outcome_groups=og,
    )
    # Small families: a family of a few tasks cannot be resampled into an honest interval (one task is
    # redrawn every round) and lets a handful of comparisons swing the merged scale. Below min_tasks it is
    # left out of the merge (weight 0) when some other weighted family has enough tasks.
    n_tasks = tasks.group_by("family").len()
    n_tasks = dict(zip(n_tasks["family"].to_list(), n_tasks["len"].to_list(), strict=True))
    big = [f for f in families if fw[f] > 0 and n_tasks[f] >= opt.min_tasks]
    excluded = [f for f in families if fw[f] > 0 and n_tasks[f] < opt.min_tasks] if big else []
    for f in families:
        if f in excluded:
            warnings.append(
                f"family {f}: only {n_tasks[f]} task(s), below the minimum of {opt.min_tasks} "
                "(--min-tasks): left out of the merge, Elo and tokens per task (its per-family Elo is shown "
                "but not trustworthy)"
            )
        elif fw[f] > 0 and n_tasks[f] < WARN_TASKS:
            warnings.append(
                f"family {f}: only {n_tasks[f]} task(s) (fewer than {WARN_TASKS}): its intervals are widened "
                "for the small sample but remain approximate"
                + ("; no interval is possible with a single task" if n_tasks[f] < 2 else "")
            )
    if excluded:
        kept = sum(fw[f] for f in families if f not in excluded)
        fw = {f: (0.0 if f in excluded else w / kept) for f, w in fw.items()}
    fw_arr = np.array([fw[f] for f in families], dtype=float)
    a_i = arm_idx[anchor]
    step("fitting Bradley-Terry")
    elo, tok, per_family_theta = point_estimate(data, fw_arr, anchor=a_i, l2=l2)
    tok_unweighted = tokens_unweighted(data)

    fits: list[FamilyFit] = []
    for fi, f in enumerate(families):
        counts = family_counts(data, fi)
        d = fit_bt_counts(counts, l2=l2)
        fits.append(
            FamilyFit(
                family=f,
                tasks=int(tasks.filter(pl.col("family") == f).height),
                comparisons=float(counts.sum()),
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

    elo_s = tok_s = None
    failed = 0
    boot = None
    if opt.rounds > 0:
        step("bootstrap rounds")
        boot = bootstrap(
            data, fw_arr, anchor=a_i, rounds=opt.rounds, seed=opt.seed, l2=l2, progress=progress
        )
        elo_s, tok_s, failed = boot.elo, boot.tokens_per_task, int(boot.failed_rounds)
        if failed:
            warnings.append(f"{failed} of {opt.rounds} bootstrap rounds had a non-converged fit")

    strategies = arm_info["strategy"].to_list()
    budgets = [int(b) for b in arm_info["budget_n"].to_list()]
    table = returns_table(arms, strategies, budgets, tok, elo, elo_s, tok_s, level=opt.level)
    prices = parse_prices(opt.prices)
    breakdown = _strings(arm_breakdown(frame.filter(pl.col("arm").is_in(arms)), prices))
    warnings += _task_set_warnings(breakdown)
    cost_table = None
    if prices is not None:
        cost, cost_s = cost_arrays(arms, np.asarray(tok, dtype=float), tok_s, breakdown)
        # The returns table over cost: "per 1k" of (USD x 1000) is per $1.
        cost_table = returns_table(
            arms, strategies, budgets, cost * 1000, elo, elo_s, None if cost_s is None else cost_s * 1000, level=opt.level
        ).rename(lambda c: c.replace("tokens_per_task", "cost_per_task").replace("per_1k", "per_usd"))
        cost_table = cost_table.with_columns(pl.col("cost_per_task") / 1000)
    unweighted = pl.DataFrame({"arm": arms, "tokens_per_task_unweighted": tok_unweighted})
    table = table.join(unweighted.with_columns(pl.col(pl.Float64).fill_nan(None)), on="arm", how="left")
    per_strategy = per_strategy_table(arms, strategies, budgets, tok, elo, elo_s, tok_s, level=opt.level)
    vs_frontier = frontier_steps_table(arms, strategies, budgets, tok, elo, elo_s, tok_s, level=opt.level)
    if boot is not None:
        warnings += _ratio_warnings(table, opt.rounds)
        warnings += family_heterogeneity(
            per_family_theta, boot.family_theta, fw, arms, alpha=opt.heterogeneity_alpha
        )

    rows = []
    for f in families:
        th = np.asarray(per_family_theta[f], dtype=float)
        centred = th - np.nanmean(th)
        rows += [
            {
                "family": f,
                "weight": fw[f],
                "arm": a,
                "theta": None if math.isnan(centred[i]) else float(centred[i]),
                "elo": None if math.isnan(centred[i]) else float(ELO_BASE + ELO_SCALE * centred[i]),
            }
            for i, a in enumerate(arms)
        ]
    per_family = pl.DataFrame(
        rows,
        schema={"family": pl.String, "weight": pl.Float64, "arm": pl.String, "theta": pl.Float64, "elo": pl.Float64},
    )

    counts = {
        "files": len(records.files),
        "calls": calls.height,
        "strategy_calls": strategy_calls(calls).height,
        "judge_calls": calls.height - strategy_calls(calls).height,
        "calls_missing_usage": missing_usage,
        "outcomes": outcomes.height,
        "ungraded_outcomes": ungraded,
        "judgments": judgments.height,
        "comparisons": pairs.height + implied_pair_rows(groups, drop_ties=opt.drop_ties),
        "tasks": tasks.height,
        "skipped_lines": len(skipped),
    }
    if skipped:
        warnings.insert(0, f"skipped {len(skipped)} bad line(s) (--skip-bad); first: {skipped[0]}")
    return AnalysisResult(
        inputs=records.files,
        options=opt,
        counts=counts,
        skipped=skipped,
        arms=arms,
        strategies=strategies,
        budgets=budgets,
        families=families,
        family_weights=fw,
        anchor=anchor,
        tokens=tok_all,
        judge_tokens=_strings(judge_tokens(calls)),
        task_tokens=_strings(ttok),
        pairs=pairs,
        elo=np.asarray(elo, dtype=float),
        tokens_per_task=np.asarray(tok, dtype=float),
        table=table,
        per_strategy=per_strategy,
        per_family=per_family,
        fits=fits,
        warnings=warnings,
        elo_samples=elo_s,
        tokens_samples=tok_s,
        failed_rounds=failed,
        versions=versions(),
        records=frame,
        breakdown=breakdown,
        cost_table=cost_table,
        vs_frontier=vs_frontier,
        excluded_families=excluded,
    )


def _task_set_warnings(breakdown: pl.DataFrame) -> list[str]:
    """Arms are compared on the tasks they attempted: say so when those sets differ (an arm missing tasks —
    jobs that failed on egress and wrote no result — is compared on fewer, and its cost is over fewer)."""
    short = breakdown.filter(pl.col("tasks_attempted").fill_null(0) < pl.col("tasks_attempted").max())
    if short.height == 0:
        return []
    most = int(breakdown["tasks_attempted"].max() or 0)
    shown = ", ".join(f"{r['arm']} {r['tasks_attempted'] or 0}" for r in short.iter_rows(named=True))
    return [
        f"arms attempted different task sets (most: {most} tasks; {shown}): Elo and tokens per task of these arms "
        "come from fewer tasks — `ept status`/`ept retry` show the jobs without a result"
    ]


def _ratio_warnings(table: pl.DataFrame, rounds: int) -> list[str]:
    """Never silent about the ratio: which rows have no ΔElo per 1k (unresolved token step) and how many
    rounds had a token step <= 0 (they enter the interval at +-inf instead of being dropped)."""
    out = []
    rows = table.filter(pl.col("per_1k_resolved").is_not_null())
    unresolved = rows.filter(~pl.col("per_1k_resolved"))["arm"].to_list()
    if unresolved:
        out.append(
            "ΔElo per 1k tokens not reported for " + ", ".join(unresolved) + ": the token step to the previous "
            "row is not resolved (its interval includes 0), so the ratio could be anything"
        )
    edge = rows.filter(pl.col("per_1k_resolved") & (pl.col("per_1k_nonpositive_rounds") > 0))
    for r in edge.iter_rows(named=True):
        out.append(
            f"{r['arm']}: {r['per_1k_nonpositive_rounds']} of {rounds} bootstrap rounds had a token step <= 0; "
            "they count at the far end of the ΔElo per 1k interval (not dropped)"
        )
    return out
