"""`analyze(...)`: call logs and outcomes in, an AnalysisResult out (no printing, no files).

Steps: read and validate records -> check arms -> tokens per (task, arm) -> within-task comparisons
-> per-family Bradley-Terry, weighted merge, anchored Elo -> bootstrap over tasks -> returns tables,
per-family view and dominance warnings. Reports, plots and the HTML report consume the result.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import polars as pl

from analysis.io import BadLine, Records, line_of, read_records
from analysis.pairs import build_pairs
from analysis.tokens import arm_tokens, judge_tokens, strategy_calls, task_tokens
from contracts.errors import InputError
from contracts.records import JUDGE_STRATEGY


@dataclass(frozen=True)
class AnalysisOptions:
    weights: str | None = None  # "math=0.4,code=0.4,tool_use=0.2"; None = equal
    anchor: str | None = None  # arm label pinned at Elo 1000; None = the cheapest arm
    rounds: int = 1000  # bootstrap rounds; 0 = no intervals
    seed: int = 0
    l2: float = 1e-3
    level: float = 0.95
    drop_ties: bool = False
    skip_bad: bool = False
    tasks_file: str | None = None
    dominance_threshold: float = 0.6


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
    pairs: pl.DataFrame  # analysis.pairs.PAIR_SCHEMA for the analysed arms
    elo: np.ndarray  # [K] anchored point estimate
    tokens_per_task: np.ndarray  # [K]
    table: pl.DataFrame  # analysis.returns.returns_table
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
        }


def versions() -> dict[str, str]:
    import scipy

    from ept import __version__

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
    from analysis.bootstrap import PairData, bootstrap, point_estimate
    from analysis.bt import fit_bt_detailed
    from analysis.merge import ELO_BASE, ELO_SCALE, parse_weights
    from analysis.returns import family_dominance, per_strategy_table, returns_table

    opt = options or AnalysisOptions()
    if opt.rounds < 0:
        raise InputError(f"must be >= 0, got {opt.rounds}", field="--rounds")
    if not (math.isfinite(opt.l2) and opt.l2 >= 0):
        raise InputError(f"must be a finite number >= 0, got {opt.l2}", field="--l2")
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

    tok_all = arm_tokens(calls)
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

    pairs_all = build_pairs(outcomes, judgments, drop_ties=opt.drop_ties)
    ttok_all = task_tokens(calls)
    # An arm whose every task lacks usage has no measured cost: it cannot sit on a tokens axis.
    with_tokens = set(tok_all.filter(pl.col("avg_tokens_per_task").is_not_null())["arm"].to_list())
    for arm in sorted(set(ttok_all["arm"].to_list()) - with_tokens):
        warnings.append(f"arm {arm}: no task has complete usage, so its tokens per task are unknown; left out")
    compared = set(pairs_all["winner"].to_list()) | set(pairs_all["loser"].to_list())
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
    if pairs.height == 0:
        raise InputError(f"the arms with measured tokens ({', '.join(arms)}) never meet on a task", file=where)
    ttok = ttok_all.filter(pl.col("arm").is_in(arms))
    families = sorted(pairs["family"].unique().to_list())
    fw = parse_weights(opt.weights, families)
    fam_idx = {f: i for i, f in enumerate(families)}

    # Tasks: everything compared, plus token-only tasks of the analysed families (they count for cost).
    tasks = (
        pl.concat([pairs.select("task_id", "family"), ttok.select("task_id", "family")])
        .filter(pl.col("family").is_in(families))
        .unique()
        .sort("family", "task_id")
        .with_row_index("t")
    )
    t_of = tasks.select("task_id", pl.col("t").cast(pl.Int64))
    p = pairs.join(t_of, on="task_id").with_columns(
        pl.col("winner").replace_strict(arm_idx, return_dtype=pl.Int64).alias("wi"),
        pl.col("loser").replace_strict(arm_idx, return_dtype=pl.Int64).alias("li"),
    )
    grid = np.full((tasks.height, k), np.nan)
    tt = ttok.join(t_of, on="task_id").with_columns(
        pl.col("arm").replace_strict(arm_idx, return_dtype=pl.Int64).alias("ai")
    )
    grid[tt["t"].to_numpy(), tt["ai"].to_numpy()] = tt["tokens"].to_numpy()
    data = PairData(
        task_family=tasks["family"].replace_strict(fam_idx, return_dtype=pl.Int64).to_numpy(),
        task=p["t"].to_numpy(),
        winner=p["wi"].to_numpy(),
        loser=p["li"].to_numpy(),
        weight=p["weight"].to_numpy().astype(float),
        n_arms=k,
        families=families,
        task_tokens=grid,
    )
    fw_arr = np.array([fw[f] for f in families], dtype=float)
    a_i = arm_idx[anchor]
    step("fitting Bradley-Terry")
    elo, tok, per_family_theta = point_estimate(data, fw_arr, anchor=a_i, l2=opt.l2)

    fits: list[FamilyFit] = []
    for f in families:
        sel = p.filter(pl.col("family") == f)
        d = fit_bt_detailed(
            sel["wi"].to_numpy(), sel["li"].to_numpy(), k, l2=opt.l2, weights=sel["weight"].to_numpy()
        )
        fits.append(
            FamilyFit(
                family=f,
                tasks=int(tasks.filter(pl.col("family") == f).height),
                comparisons=float(sel["weight"].sum()),
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
                "comes from the other families only (weights renormalised per arm)"
            )

    elo_s = tok_s = None
    failed = 0
    if opt.rounds > 0:
        step("bootstrap rounds")
        boot = bootstrap(
            data, fw_arr, anchor=a_i, rounds=opt.rounds, seed=opt.seed, l2=opt.l2, progress=progress
        )
        elo_s, tok_s, failed = boot.elo, boot.tokens_per_task, int(boot.failed_rounds)
        if failed:
            warnings.append(f"{failed} of {opt.rounds} bootstrap rounds had a non-converged fit")

    strategies = arm_info["strategy"].to_list()
    budgets = [int(b) for b in arm_info["budget_n"].to_list()]
    table = returns_table(arms, strategies, budgets, tok, elo, elo_s, tok_s, level=opt.level)
    per_strategy = per_strategy_table(arms, strategies, budgets, tok, elo, elo_s, tok_s, level=opt.level)
    warnings += family_dominance(per_family_theta, fw, arms, threshold=opt.dominance_threshold, anchor=a_i)

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
        "comparisons": pairs.height,
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
        judge_tokens=judge_tokens(calls),
        task_tokens=ttok,
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
    )
