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
import re
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from elo_per_token.analysis.families import MIN_TASKS, WARN_TASKS, small_families
from elo_per_token.analysis.level import check_level
from elo_per_token.analysis.numfmt import fmt as fmt
from elo_per_token.contracts.errors import InputError

if TYPE_CHECKING:
    from elo_per_token.analysis.bootstrap import PairData

BASE, CUR = "baseline", "current"


@dataclass(frozen=True)
class FailRule:
    """Thresholds of `--fail-on`. An arm is flagged only when the whole interval is past the threshold."""

    elo_drop: float | None = None  # Elo points; flag when the interval's upper bound < -elo_drop
    tokens_rise: float | None = None  # fraction (0.1 = 10%); flag when the interval's lower bound > it
    tokens_rise_abs: float | None = None  # tokens/task; same rule on the absolute change

    def describe(self) -> str:
        parts = []
        if self.elo_drop is not None:
            parts.append(
                f"elo-drop={self.elo_drop:g} (flag when the upper bound of ΔElo < -{self.elo_drop:g})"
            )
        if self.tokens_rise is not None:
            parts.append(
                f"tokens-rise={self.tokens_rise * 100:g}% (flag when the lower bound of the relative "
                f"change in tokens/task > {self.tokens_rise * 100:g}%)"
            )
        if self.tokens_rise_abs is not None:
            parts.append(
                f"tokens-rise={self.tokens_rise_abs:g} (flag when the lower bound of the change in "
                f"tokens/task > {self.tokens_rise_abs:g})"
            )
        return "; ".join(parts) if parts else "none (report only)"


_NUM = r"[0-9]+(?:\.[0-9]*)?"


def parse_fail_on(spec: str | None) -> FailRule:
    """Parse `elo-drop=20,tokens-rise=10%`; `none` or '' gives a report-only rule."""
    if spec is None or spec.strip().lower() in ("", "none"):
        return FailRule()
    values: dict[str, Any] = {}
    seen: set[str] = set()
    for item in spec.split(","):
        item = item.strip()
        m = re.fullmatch(rf"(elo-drop|tokens-rise)\s*=\s*({_NUM})\s*(%?)", item)
        if not m:
            raise InputError(
                f"cannot read {item!r}: expected items like elo-drop=20 or tokens-rise=10% (or tokens-rise=500 "
                "for tokens/task), comma-separated",
                field="--fail-on",
            )
        name, num, pct = m.group(1), float(m.group(2)), m.group(3)
        if name in seen:
            raise InputError(f"{name} given twice", field="--fail-on")
        seen.add(name)
        if name == "elo-drop":
            if pct:
                raise InputError("elo-drop is in Elo points, not a percentage", field="--fail-on")
            values["elo_drop"] = num
        elif pct:
            values["tokens_rise"] = num / 100.0
        else:
            values["tokens_rise_abs"] = num
    return FailRule(**values)


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


def check_comparable(base: RunInputs, cur: RunInputs) -> list[str]:
    """Raise InputError when the two runs cannot be compared; return notes on partial task overlap."""
    if base.suites is not None and cur.suites is not None and set(base.suites) != set(cur.suites):
        raise InputError(
            f"the runs used different suites: baseline {sorted(base.suites)} vs current {sorted(cur.suites)}",
            file=cur.source,
            field="suites",
        )
    fam_b = set(base.outcomes["family"].unique().to_list())
    fam_c = set(cur.outcomes["family"].unique().to_list())
    if fam_b != fam_c:
        raise InputError(
            "the runs cover different task families: "
            + _diff_text(fam_b, fam_c)
            + " (compare runs of the same suites)",
            file=cur.source,
            field="family",
        )
    arms_b = set(base.arms["arm"].to_list())
    arms_c = set(cur.arms["arm"].to_list())
    if arms_b != arms_c:
        raise InputError(
            "the runs have different arms: "
            + _diff_text(arms_b, arms_c)
            + " (an arm is strategy@budget[variant], its full label)",
            file=cur.source,
            field="arm",
        )
    scored = [
        r.outcomes.filter(pl.col("score").is_not_null()).select("family", "task_id").unique()
        for r in (base, cur)
    ]
    common = scored[0].join(scored[1], on=["family", "task_id"], how="inner")
    notes = []
    for fam in sorted(fam_b):
        n_common = common.filter(pl.col("family") == fam).height
        if n_common == 0:
            raise InputError(
                f"family {fam!r}: no task was graded in both runs, so the two runs' Elo scales cannot be "
                "linked (run the same suite tasks in both, with graded outcomes)",
                file=cur.source,
                field="task_id",
            )
        n_b = scored[0].filter(pl.col("family") == fam).height
        n_c = scored[1].filter(pl.col("family") == fam).height
        if n_common < max(n_b, n_c):
            notes.append(
                f"family {fam}: {n_common} tasks in both runs (baseline {n_b}, current {n_c}); "
                "only the common tasks are paired"
            )
    return notes


def _diff_text(a: set[str], b: set[str]) -> str:
    parts = []
    if a - b:
        parts.append(f"only in baseline: {sorted(a - b)}")
    if b - a:
        parts.append(f"only in current: {sorted(b - a)}")
    return "; ".join(parts)


def pooled_pairs(outcomes: pl.DataFrame) -> pl.DataFrame:
    """All within-task comparisons between players (player = run x arm), across runs too.

    outcomes: task, player, replicate, score (nulls already removed). Higher score wins; equal scores are a
    tie, given as two rows of half weight. Every replicate of one player meets every replicate of the other,
    each meeting weighted 1/(n_a*n_b), so one task and pair of players weighs 1 whatever the replicates.
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

    Families with fewer than min_tasks tasks are left out as in `ept analyze` (analysis.families)."""
    from elo_per_token.analysis.bootstrap import bootstrap, fit_families, point_estimate
    from elo_per_token.analysis.bt import prior_l2
    from elo_per_token.analysis.merge import parse_weights

    l2 = prior_l2() if l2 is None else float(l2)  # the same default prior as `ept analyze`
    level = check_level(level)
    if adjust not in ("bonferroni", "none"):
        raise InputError(f"must be bonferroni or none, got {adjust!r}", field="--adjust")
    if rounds < 50:
        raise InputError(f"use at least 50 bootstrap rounds for an interval, got {rounds}", field="--rounds")
    notes = check_comparable(base, cur)

    families = sorted(base.outcomes["family"].unique().to_list())
    fw = parse_weights(weights, families)
    arm_order = _arm_order(base)
    k = len(arm_order)
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
    gate_level = 1.0 - (1.0 - level) / k if adjust == "bonferroni" else level
    table = _arm_table(
        arm_order, base.arms, elo, tok, boot.elo, boot.tokens_per_task, level, gate_level, rule.elo_drop
    )
    flagged, reasons = _apply_rule(table, rule)
    if boot.failed_rounds:
        notes.append(f"{boot.failed_rounds} of {rounds} bootstrap fits did not converge")
    failures = _failure_counts(base, cur)
    if failures:
        notes.append(failures)
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


def _interval(samples: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    a = (1.0 - level) / 2.0
    # All-NaN columns (the first row's step) are expected: their interval is NaN, shown as missing.
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo = np.nanquantile(samples, a, axis=0)
        hi = np.nanquantile(samples, 1.0 - a, axis=0)
    return lo, hi


def _steps(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """dElo per 1k tokens of each arm against the previous (cheaper at baseline) arm; NaN on the first."""
    dx = np.diff(x, axis=-1)
    dt = np.diff(t, axis=-1)
    with np.errstate(all="ignore"):
        per = np.where(dt != 0, dx / dt * 1000.0, np.nan)
    pad = np.full((*per.shape[:-1], 1), np.nan)
    return np.concatenate([pad, per], axis=-1)


def _resolved_steps(
    x: np.ndarray, t: np.ndarray, xs: np.ndarray, ts: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    elo: np.ndarray,
    tok: np.ndarray,
    elo_s: np.ndarray,
    tok_s: np.ndarray,
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
    detectable = _detectable_drop(sec - seb, gate_level, margin)
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


POWER = 0.8


def _detectable_drop(d_samples: np.ndarray, gate_level: float, margin: float | None) -> np.ndarray:
    """Per arm, the smallest true drop (Elo) the gate flags with 80% probability at these data's precision.

    With ΔElo estimated with standard error se (the bootstrap sd), the gate flags when the upper bound
    ΔElo + z_g * se is below -margin, z_g the two-sided gate quantile. For a true drop δ that happens with
    probability Φ((δ - margin - z_g * se) / se), which is 80% at δ = margin + (z_g + z_0.8) * se. The runs
    being compared are the best guess of the precision of a run of this size (docs/compare.md). Without an
    elo-drop rule nothing is ever flagged, so the figure is NaN (shown as missing).
    """
    from scipy.stats import norm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        se = np.nanstd(d_samples, axis=0, ddof=1)
    if margin is None:
        return np.full(se.shape, np.nan)
    z_g = float(norm.ppf(1.0 - (1.0 - gate_level) / 2.0))
    drop: np.ndarray = margin + (z_g + float(norm.ppf(POWER))) * se
    return drop


def _apply_rule(table: pl.DataFrame, rule: FailRule) -> tuple[list[str], dict[str, list[str]]]:
    flagged: list[str] = []
    reasons: dict[str, list[str]] = {}
    for row in table.iter_rows(named=True):  # one row per arm: a handful at most
        why = []
        if (
            rule.elo_drop is not None
            and row["gate_d_elo_hi"] is not None
            and row["gate_d_elo_hi"] < -rule.elo_drop
        ):
            why.append(
                f"Elo dropped {row['d_elo']:+.1f} (gate interval {row['gate_d_elo_lo']:+.1f} .. "
                f"{row['gate_d_elo_hi']:+.1f}, entirely below -{rule.elo_drop:g})"
            )
        if (
            rule.tokens_rise is not None
            and row["gate_d_tokens_rel_lo"] is not None
            and row["gate_d_tokens_rel_lo"] > rule.tokens_rise
        ):
            why.append(
                f"tokens/task rose {row['d_tokens_rel'] * 100:+.1f}% (gate lower bound "
                f"{row['gate_d_tokens_rel_lo'] * 100:+.1f}% > +{rule.tokens_rise * 100:g}%)"
            )
        if (
            rule.tokens_rise_abs is not None
            and row["gate_d_tokens_lo"] is not None
            and row["gate_d_tokens_lo"] > rule.tokens_rise_abs
        ):
            why.append(
                f"tokens/task rose {row['d_tokens']:+.0f} (gate lower bound {row['gate_d_tokens_lo']:+.0f} > "
                f"+{rule.tokens_rise_abs:g})"
            )
        if why:
            flagged.append(row["arm"])
            reasons[row["arm"]] = why
    return flagged, reasons


def _code(name: object) -> str:
    """An untrusted name as a Markdown code span: nothing inside is HTML or Markdown; only a backtick (which
    would end the span) or a pipe (which would end the table cell) needs replacing."""
    return "`" + str(name).replace("`", "'").replace("|", "\\|").replace("\n", " ") + "`"


def to_markdown(res: CompareResult) -> str:
    """A pull-request comment: verdict first, then the per-arm table, then the method in one paragraph.
    Arm names, families and sources come from the inputs: escaped (report.md's rules), never live HTML."""
    from elo_per_token.analysis.report import md_escape

    pct = f"{res.level * 100:g}%"
    if res.flagged:
        head = f"### ❌ ept compare: regression in {len(res.flagged)} arm(s): " + ", ".join(
            _code(a) for a in res.flagged
        )
    else:
        head = "### ✅ ept compare: no regression the data supports"
    lines = [
        head,
        "",
        f"Baseline {_code(res.sources[0])} vs current {_code(res.sources[1])}. Rule: {res.rule.describe()}, applied to "
        f"{res.gate_level * 100:.4g}% intervals ({pct} adjusted for {res.table.height} arms tested at once).",
        "",
        f"| arm | Elo base | Elo current | ΔElo [{pct} CI] | tokens/task base | tokens/task current | "
        f"Δtokens [{pct} CI] | ΔElo/1k tok base | ΔElo/1k tok current | drop caught 80% | status |",
        "|---|---:|---:|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in res.table.iter_rows(named=True):
        status = "❌ regression" if r["arm"] in res.flagged else "ok"
        rel = r["d_tokens_rel"]
        dtok = (
            f"{fmt(rel * 100 if rel is not None else None, '+.1f')}% "
            f"[{fmt(_mul(r['d_tokens_rel_lo']), '+.1f')}%, {fmt(_mul(r['d_tokens_rel_hi']), '+.1f')}%]"
        )
        lines.append(
            f"| {_code(r['arm'])} | {fmt(r['elo_base'], '.0f')} | {fmt(r['elo_cur'], '.0f')} | "
            f"{fmt(r['d_elo'], '+.1f')} [{fmt(r['d_elo_lo'], '+.1f')}, {fmt(r['d_elo_hi'], '+.1f')}] | "
            f"{fmt(r['tokens_base'], ',.0f')} | {fmt(r['tokens_cur'], ',.0f')} | {dtok} | "
            f"{fmt(r['d_elo_per_1k_base'], '.1f')} | {fmt(r['d_elo_per_1k_cur'], '.1f')} | "
            f"{fmt(r['detectable_drop'], '.0f')} | {status} |"
        )
    if res.flagged:
        lines += ["", "**Why flagged**", ""]
        for arm in res.flagged:
            lines += [f"- {_code(arm)}: " + md_escape("; ".join(res.reasons[arm]))]
    lines += [
        "",
        f"<sub>Both runs fitted together (Bradley-Terry per family over every (run, arm), comparisons within each "
        f"task across runs), families {', '.join(f'{md_escape(f)}={w:.2f}' for f, w in res.family_weights.items())}; "
        f"Elo shown with baseline {_code(res.anchor)} = 1000 (differences do not depend on this anchor). Intervals: "
        f"{res.rounds}-round bootstrap resampling task ids, the same tasks in both runs. ΔElo/1k tok: each arm "
        f"against the previous row, within its run. Drop caught 80%: the smallest true Elo drop this rule "
        f"flags in 80% of runs of this size (margin + (z_gate + 0.84) x the bootstrap sd of ΔElo); smaller "
        f"drops are mostly missed.</sub>",
    ]
    if res.notes:
        lines += ["", *[f"> {md_escape(n)}" for n in res.notes]]
    return "\n".join(lines) + "\n"


def _mul(x: float | None) -> float | None:
    return None if x is None else x * 100.0


def to_json_dict(res: CompareResult) -> dict[str, Any]:
    return {
        "baseline": res.sources[0],
        "current": res.sources[1],
        "verdict": "regression" if res.flagged else "ok",
        "flagged": res.flagged,
        "reasons": res.reasons,
        "rule": res.rule.describe(),
        "level": res.level,
        "gate_level": res.gate_level,
        "rounds": res.rounds,
        "failed_rounds": res.failed_rounds,
        "anchor": res.anchor,
        "family_weights": res.family_weights,
        "notes": res.notes,
        "arms": res.table.to_dicts(),
    }


# ---------------------------------------------------------------- reading a run (the I/O edge)


def manifest_suites(manifest: dict[str, Any] | None) -> tuple[str, ...] | None:
    """The suites a run used, from its manifest (top level or inside the plan), else None."""
    if not manifest:
        return None
    suites = manifest.get("suites")
    if suites is None and isinstance(manifest.get("plan"), dict):
        suites = manifest["plan"].get("suites")
    if not isinstance(suites, list | tuple):
        return None
    names = [s.get("name", _json_key(s)) if isinstance(s, dict) else str(s) for s in suites]
    return tuple(sorted(names))


def _json_key(obj: Any) -> str:
    import json

    return json.dumps(obj, sort_keys=True)


def load_run(path: str, *, skip_bad: bool = False, tasks_file: str | None = None) -> RunInputs:
    """Read one run (a ledger run folder or URL, or a folder of logs) with analyze's reader."""
    from elo_per_token.analysis.io import read_failures, read_manifest, read_records, runs_of_files
    from elo_per_token.analysis.record_checks import check_records
    from elo_per_token.analysis.tokens import task_tokens

    records = read_records([path], skip_bad=skip_bad, tasks_file=tasks_file)
    refs = runs_of_files(records.files)
    if len({r.run_id for r in refs}) > 1:
        names = ", ".join(sorted({r.run_id for r in refs}))
        raise InputError(
            f"holds {len(refs)} runs ({names}); pass one run, e.g. {refs[0].ledger_url}/runs/{refs[0].run_id}",
            file=path,
        )
    frame, _ = check_records(records, skip_bad=skip_bad)
    # Labels as plain strings: the reader keeps them Categorical (analysis.io.LABEL_COLUMNS), and the two
    # runs of a comparison do not share one category dictionary, so their frames could not be joined.
    frame = frame.with_columns(pl.col(pl.Categorical).cast(pl.String))
    calls = frame.filter(pl.col("kind") == "call")
    outcomes = frame.filter(pl.col("kind") == "outcome")
    if outcomes.height == 0:
        raise InputError("no outcome records: a comparison needs graded outcomes", file=path)
    if calls.height == 0:
        raise InputError("no call records: tokens per task cannot be measured", file=path)
    ttok = task_tokens(calls)
    arms = (
        pl.concat(
            [outcomes.select("arm", "strategy", "budget_n"), ttok.select("arm", "strategy", "budget_n")]
        )
        .unique("arm", keep="first")
        .sort("arm")
    )
    manifest = read_manifest(refs[0]) if refs else None
    failed = len(read_failures(refs[0])) if refs else 0
    return RunInputs(
        source=path,
        outcomes=outcomes.select("task_id", "family", "arm", "replicate", "score"),
        task_tokens=ttok.select("task_id", "family", "arm", "tokens"),
        arms=arms,
        suites=manifest_suites(manifest),
        manifest=manifest,
        failed_jobs=failed,
    )
