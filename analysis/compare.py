"""Paired comparison of two runs: the regression gate behind `ept compare` (method: docs/compare.md).

Elo is relative, so two separately fitted runs have no common zero: anchoring both at one arm would
hide a regression of the anchor itself. Instead both runs are fitted TOGETHER, each (run, arm) a player,
with comparisons inside each task across runs as well (run A's greedy answer vs run B's greedy answer on
the same task, graded on the same scale). The pooled fit puts both runs on one scale, so
`Elo(current, arm) - Elo(baseline, arm)` is a real change in strength, whatever the anchor. The bootstrap
resamples task ids; a task present in both runs brings both runs' outcomes, so the runs are paired.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.analysis.compare_gate import FailRule, apply_rule, detectable_drop
from elo_per_token.analysis.compare_load import check_comparable
from elo_per_token.analysis.compare_types import CompareResult, RunInputs
from elo_per_token.analysis.families import MIN_TASKS, WARN_TASKS, small_families
from elo_per_token.analysis.level import check_level
from elo_per_token.contracts.errors import InputError

if TYPE_CHECKING:
    from elo_per_token.analysis.bootstrap import PairData


def pooled_pairs(outcomes: pl.DataFrame) -> pl.DataFrame:
    """All within-task comparisons between players (player = run x arm), across runs too.

    outcomes: task, player, replicate, score (nulls already removed). Higher score wins; equal scores are a
    tie, given as two rows of half weight. Every replicate of one player meets every replicate of the other,
    each meeting weighted 1/(n_a*n_b), so one task and pair of players weighs 1 whatever the replicates.

    Args:
        outcomes: Outcome rows: task, player, replicate, score (nulls removed).
    """
    o = outcomes.with_columns(pl.len().over("task", "player").alias("n_rep").cast(pl.Float64))
    left = o.select(
        "task", pl.col("player").alias("a"), pl.col("score").alias("sa"), pl.col("n_rep").alias("na")
    )
    right = o.select(
        "task", pl.col("player").alias("b"), pl.col("score").alias("sb"), pl.col("n_rep").alias("nb")
    )
    m = (
        left.join(right, on="task", how="inner")
        .filter(pl.col("a") < pl.col("b"))
        .with_columns((1.0 / (pl.col("na") * pl.col("nb"))).alias("w"))
    )
    decided = m.filter(pl.col("sa") != pl.col("sb")).select(
        "task",
        pl.when(pl.col("sa") > pl.col("sb")).then(pl.col("a")).otherwise(pl.col("b")).alias("winner"),
        pl.when(pl.col("sa") > pl.col("sb")).then(pl.col("b")).otherwise(pl.col("a")).alias("loser"),
        pl.col("w").alias("weight"),
    )
    ties = m.filter(pl.col("sa") == pl.col("sb"))
    tie_ab = ties.select(
        "task", pl.col("a").alias("winner"), pl.col("b").alias("loser"), (pl.col("w") * 0.5).alias("weight")
    )
    tie_ba = ties.select(
        "task", pl.col("b").alias("winner"), pl.col("a").alias("loser"), (pl.col("w") * 0.5).alias("weight")
    )
    return pl.concat([decided, tie_ab, tie_ba]).sort("task", "winner", "loser")


def compare_runs(
    base: RunInputs,
    cur: RunInputs,
    *,
    rule: FailRule,
    weights: str | None = None,
    rounds: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    l2: float | None = None,
    adjust: str = "bonferroni",
    min_tasks: int = MIN_TASKS,
) -> CompareResult:
    """Pooled, task-paired comparison of two runs (see the module docstring and docs/compare.md).

    Args:
        base: the baseline run.
        cur: the current run.
        rule: when the comparison fails.
        weights: the --weights text (None: the default family weights).
        rounds: bootstrap rounds (at least 50).
        seed: the bootstrap seed.
        level: the intervals' level.
        l2: the ridge prior (None: the same default as `ept analyze`).
        adjust: "bonferroni" or "none" (multiple-comparison adjustment of the gate).
        min_tasks: families with fewer tasks are left out, as in `ept analyze` (analysis.families).
    """
    from elo_per_token.analysis.bootstrap import bootstrap, fit_families, point_estimate
    from elo_per_token.analysis.merge import parse_weights

    l2, level = _checked_options(l2, level, adjust, rounds)
    notes = check_comparable(base, cur)

    families = sorted(base.outcomes["family"].unique().to_list())
    fw = parse_weights(weights, families)
    arm_order = _arm_order(base)
    data, task_notes = _pooled_data(base, cur, arm_order, families)
    notes += task_notes
    # The same small-family rule as `ept analyze` (analysis.families), on the pooled tasks of both runs.
    fam_rule = small_families(families, fw, _task_counts(data), min_tasks)
    fw = fam_rule.weights
    notes += [w for w in fam_rule.warnings if "left out" in w]
    fw_arr = np.array([fw[f] for f in families], dtype=float)
    fits = fit_families(data, l2=l2)  # each family once: the point estimate and the bootstrap share it
    elo, tok, _ = point_estimate(data, fw_arr, anchor=0, l2=l2, fits=fits)
    boot = bootstrap(data, fw_arr, anchor=0, rounds=rounds, seed=seed, l2=l2, fits=fits, level=level)
    # The gate tests every arm at once: Bonferroni over arms keeps the chance that ANY unchanged arm is
    # flagged at most (1 - level) / 2 (one-sided), instead of that per arm.
    gate_level = 1.0 - (1.0 - level) / len(arm_order) if adjust == "bonferroni" else level
    table = _arm_table(
        arm_order, base.arms, elo, tok, boot.elo, boot.tokens_per_task, level, gate_level, rule.elo_drop
    )
    flagged, reasons = apply_rule(table, rule)
    notes += _closing_notes(int(boot.failed_rounds), rounds, base, cur)
    return CompareResult(
        table=table,
        flagged=flagged,
        reasons=reasons,
        rule=rule,
        level=level,
        gate_level=gate_level,
        rounds=rounds,
        failed_rounds=int(boot.failed_rounds),
        anchor=arm_order[0],
        families=families,
        family_weights=dict(fw),
        notes=notes,
        sources=(base.source, cur.source),
    )


def _closing_notes(failed_rounds: int, rounds: int, base: RunInputs, cur: RunInputs) -> list[str]:
    """Notes on bootstrap fits that did not converge and on failed jobs in either run."""
    notes = [f"{failed_rounds} of {rounds} bootstrap fits did not converge"] if failed_rounds else []
    failures = _failure_counts(base, cur)
    return [*notes, failures] if failures else notes


def _checked_options(l2: float | None, level: float, adjust: str, rounds: int) -> tuple[float, float]:
    """(l2, level) for compare_runs: the default prior filled in, the level checked; an InputError naming the
    option for a bad --adjust or too few --rounds."""
    from elo_per_token.analysis.bt import prior_l2

    l2 = prior_l2() if l2 is None else float(l2)  # the same default prior as `ept analyze`
    level = check_level(level)
    if adjust not in ("bonferroni", "none"):
        raise InputError(f"must be bonferroni or none, got {adjust!r}", field="--adjust")
    if rounds < 50:
        raise InputError(f"use at least 50 bootstrap rounds for an interval, got {rounds}", field="--rounds")
    return l2, level


def _arm_order(base: RunInputs) -> list[str]:
    """Baseline's tokens/task order fixes the arm order (and the anchor: its cheapest arm)."""
    base_tok = base.task_tokens.group_by("arm").agg(pl.col("tokens").mean().alias("t"))
    return (
        base.arms.join(base_tok, on="arm", how="left")
        .sort(pl.col("t").fill_null(math.inf), "budget_n", "arm")
        .get_column("arm")
        .to_list()
    )


def _pooled_data(
    base: RunInputs, cur: RunInputs, arm_order: list[str], families: list[str]
) -> tuple[PairData, list[str]]:
    """Both runs' outcomes and tokens as one PairData over 2K players (player = run x K + arm index), with
    notes on families too small for a reliable gate."""
    from elo_per_token.analysis.design import pair_data

    k = len(arm_order)
    arm_idx = pl.DataFrame({"arm": arm_order, "ai": list(range(k))}, schema={"arm": pl.Utf8, "ai": pl.Int64})

    def players(df: pl.DataFrame, run: int) -> pl.DataFrame:
        return df.join(arm_idx, on="arm", how="inner").with_columns((pl.col("ai") + run * k).alias("player"))

    outcomes = pl.concat(
        [
            players(
                r.outcomes.select("task_id", "family", "arm", "replicate", pl.col("score").cast(pl.Float64)),
                i,
            )
            for i, r in enumerate((base, cur))
        ]
    ).filter(pl.col("score").is_not_null())
    tokens = pl.concat(
        [
            players(r.task_tokens.select("task_id", "family", "arm", pl.col("tokens").cast(pl.Float64)), i)
            for i, r in enumerate((base, cur))
        ]
    ).filter(pl.col("family").is_in(families))  # a family with calls but no outcomes has nothing to compare
    tasks = (
        pl.concat([outcomes.select("family", "task_id"), tokens.select("family", "task_id")])
        .unique()
        .sort("family", "task_id")
        .with_row_index("task")
        .with_columns(pl.col("task").cast(pl.Int64))
    )
    outcomes = outcomes.join(tasks, on=["family", "task_id"])
    tokens = tokens.join(tasks, on=["family", "task_id"])
    data = pair_data(
        tasks["family"],
        families,
        pooled_pairs(outcomes.select("task", "player", "replicate", "score")),
        tokens.select("task", pl.col("player").alias("arm"), "tokens"),
        2 * k,
    )
    return data, _small_family_notes(tasks)


# Below this many tasks a family gives the gate little power (a note; the family still counts from MIN_TASKS).
_POWER_TASKS = 10


def _task_counts(data: PairData) -> dict[str, int]:
    """Tasks per family of the pooled data."""
    n = np.bincount(np.asarray(data.task_family), minlength=len(data.families))
    return {f: int(n[i]) for i, f in enumerate(data.families)}


def _small_family_notes(tasks: pl.DataFrame) -> list[str]:
    notes = []
    for fam, n in tasks.group_by("family").len().sort("family").iter_rows():  # one row per family
        if n < WARN_TASKS:
            notes.append(
                f"family {fam}: only {n} task(s) (fewer than {WARN_TASKS}): intervals are widened for the small "
                "sample but approximate"
                + (
                    f"; below {_POWER_TASKS} tasks the gate has little power (see 'drop caught 80%')"
                    if n < _POWER_TASKS
                    else ""
                )
                + ("; with one task there is no interval and the gate cannot fire" if n < 2 else "")
            )
    return notes


def _failure_counts(base: RunInputs, cur: RunInputs) -> str:
    counts = [r.outcomes.filter(pl.col("score").is_null()).height + r.failed_jobs for r in (base, cur)]
    if not any(counts):
        return ""
    return f"jobs without a graded outcome (left out of the comparisons): baseline {counts[0]}, current {counts[1]}"


def _interval(samples: NDArray[np.float64], level: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    a = (1.0 - level) / 2.0
    # All-NaN columns (the first row's step) are expected: their interval is NaN, shown as missing.
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo = np.nanquantile(samples, a, axis=0)
        hi = np.nanquantile(samples, 1.0 - a, axis=0)
    return lo, hi


def _steps(x: NDArray[np.float64], t: NDArray[np.float64]) -> NDArray[np.float64]:
    """dElo per 1k tokens of each arm against the previous (cheaper at baseline) arm; NaN on the first."""
    dx = np.diff(x, axis=-1)
    dt = np.diff(t, axis=-1)
    with np.errstate(all="ignore"):
        per = np.where(dt != 0, dx / dt * 1000.0, np.nan)
    pad = np.full((*per.shape[:-1], 1), np.nan)
    return np.concatenate([pad, per], axis=-1)


def _resolved_steps(
    x: NDArray[np.float64],
    t: NDArray[np.float64],
    xs: NDArray[np.float64],
    ts: NDArray[np.float64],
    level: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """ΔElo per 1k tokens against the previous arm with its interval, by the rule of the analyze table
    (docs/statistics.md §7): a number only where the token step's interval lies above 0; rounds with a
    step <= 0 count at +-inf instead of being dropped. NaN where unresolved or on the first arm."""
    from elo_per_token.analysis.returns import per_1k_rounds

    point = _steps(x, t)
    pad = np.full((xs.shape[0], 1), np.nan)
    dts = np.concatenate([pad, np.diff(ts, axis=-1)], axis=-1)
    dxs = np.concatenate([pad, np.diff(xs, axis=-1)], axis=-1)
    lo, hi = _interval(per_1k_rounds(dxs, dts), level)
    t_lo, _ = _interval(dts, level)
    ok = (t_lo > 0) & np.isfinite(lo) & np.isfinite(hi)
    return np.where(ok, point, np.nan), np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


def _arm_table(
    arm_order: list[str],
    arms: pl.DataFrame,
    elo: NDArray[np.float64],
    tok: NDArray[np.float64],
    elo_s: NDArray[np.float64],
    tok_s: NDArray[np.float64],
    level: float,
    gate_level: float,
    margin: float | None = None,
) -> pl.DataFrame:
    k = len(arm_order)
    eb, ec, tb, tc = elo[:k], elo[k:], tok[:k], tok[k:]
    seb, sec, stb, stc = elo_s[:, :k], elo_s[:, k:], tok_s[:, :k], tok_s[:, k:]
    d_lo, d_hi = _interval(sec - seb, level)
    with np.errstate(all="ignore"):
        rel = tc / tb - 1.0
        rel_s = stc / stb - 1.0
    r_lo, r_hi = _interval(rel_s, level)
    a_lo, a_hi = _interval(stc - stb, level)
    g_lo, g_hi = _interval(sec - seb, gate_level)
    gr_lo, _ = _interval(rel_s, gate_level)
    ga_lo, _ = _interval(stc - stb, gate_level)
    pb, pb_lo, pb_hi = _resolved_steps(eb, tb, seb, stb, level)
    pc, pc_lo, pc_hi = _resolved_steps(ec, tc, sec, stc, level)
    detectable = detectable_drop(sec - seb, gate_level, margin)
    info = arms.unique("arm").select("arm", "strategy", "budget_n")
    df = pl.DataFrame(
        {
            "arm": arm_order,
            "elo_base": eb,
            "elo_cur": ec,
            "d_elo": ec - eb,
            "d_elo_lo": d_lo,
            "d_elo_hi": d_hi,
            "tokens_base": tb,
            "tokens_cur": tc,
            "d_tokens": tc - tb,
            "d_tokens_lo": a_lo,
            "d_tokens_hi": a_hi,
            "d_tokens_rel": rel,
            "d_tokens_rel_lo": r_lo,
            "d_tokens_rel_hi": r_hi,
            "gate_d_elo_lo": g_lo,
            "gate_d_elo_hi": g_hi,
            "gate_d_tokens_lo": ga_lo,
            "gate_d_tokens_rel_lo": gr_lo,
            "d_elo_per_1k_base": pb,
            "d_elo_per_1k_base_lo": pb_lo,
            "d_elo_per_1k_base_hi": pb_hi,
            "d_elo_per_1k_cur": pc,
            "d_elo_per_1k_cur_lo": pc_lo,
            "d_elo_per_1k_cur_hi": pc_hi,
            "d_elo_sd": np.nanstd(sec - seb, axis=0, ddof=1),
            "detectable_drop": detectable,
        }
    )
    # NaN (undefined, e.g. the first row's step) becomes null so JSON/markdown show it as missing.
    df = df.with_columns(pl.col(pl.Float64).fill_nan(None))
    return info.join(df, on="arm", how="right").select(["arm", "strategy", "budget_n", *df.columns[1:]])


# ---------------------------------------------------------------- reading a run (the I/O edge)
