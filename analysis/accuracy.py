"""Absolute metrics next to Elo: mean score (accuracy / pass@1) per arm and per family, pass@k.

Elo says which arm beats which; a user also asks "what share of the tasks does it get right?". Scores are in
[0, 1] (1 = correct for graded tasks). Per task, an arm's score is the mean over its replicates; per family, the
mean over the family's tasks; per arm, the families' means weighted like Elo (the run's family weights), so the
two columns summarise the same task mix, after the same --missing estimand (a missing score is a loss under
`loss`, the task is left out for every arm under `shared`). Intervals are Clopper-Pearson intervals on the
effective number of tasks with Korn & Graubard's degrees-of-freedom adjustment (score_interval): they do not
collapse at 0 or 1 as a percentile bootstrap does (n of n solved is not [100%, 100%]). "pass@1" names the
mean only where every score is 0 or 1; with partial credit it is a mean score.

pass@k uses the unbiased estimator of Chen et al. (2021): on a task with n replicates of which c passed
(score == 1), pass@k = 1 - C(n-c, k) / C(n, k), averaged like accuracy over the tasks with n >= k.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from numpy.typing import NDArray

ACCURACY_SCHEMA = {
    "arm": pl.String,
    "accuracy": pl.Float64,
    "accuracy_lo": pl.Float64,
    "accuracy_hi": pl.Float64,
    "tasks": pl.Int64,
    "outcomes": pl.Int64,
    "binary": pl.Boolean,
    "seen_in": pl.String,
    "accuracy_se": pl.Float64,
}
FAMILY_SCHEMA = {
    "family": pl.String,
    "arm": pl.String,
    "accuracy": pl.Float64,
    "accuracy_lo": pl.Float64,
    "accuracy_hi": pl.Float64,
    "tasks": pl.Int64,
}
PASS_K_SCHEMA = {
    "arm": pl.String,
    "k": pl.Int64,
    "pass_at_k": pl.Float64,
    "pass_at_k_lo": pl.Float64,
    "pass_at_k_hi": pl.Float64,
    "tasks": pl.Int64,
}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed (Chen et al. 2021, numerically stable product form).

    Args:
        n: Samples drawn.
        c: Samples that passed.
        k: The k of pass@k (1 <= k <= n).
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=float)))


def pass_at_k_array(n: NDArray[np.float64], c: NDArray[np.float64], k: int) -> NDArray[np.float64]:
    """pass_at_k over arrays (n >= k everywhere), through log-gamma: C(n-c, k) / C(n, k).

    Args:
        n: Samples drawn per task.
        c: Samples that passed per task.
        k: The k of pass@k.
    """
    from scipy.special import gammaln

    n, c = np.asarray(n, dtype=float), np.asarray(c, dtype=float)
    fail = n - c
    safe = np.maximum(fail - k, 0.0)
    ratio = np.exp(gammaln(fail + 1) - gammaln(safe + 1) - gammaln(n + 1) + gammaln(n - k + 1))
    return np.where(fail < k, 1.0, 1.0 - ratio)


def _ks(n_min: int) -> list[int]:
    """k = 1, 2, 4, ... up to the fewest replicates any task of the arm has, and that count itself."""
    ks = {1, n_min}
    k = 2
    while k < n_min:
        ks.add(k)
        k *= 2
    return sorted(ks)


def task_scores(outcomes: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Per (family, task, arm): mean score over replicates, replicate count n and passes c (score >= 1).
    Outcomes without a score (ungraded) are left out, as the comparisons leave them out.

    Args:
        outcomes: Outcome records (task_id, family, arm, replicate, score), eager or lazy.
    """
    return (
        outcomes.lazy()
        .filter(pl.col("score").is_not_null())
        .group_by("family", "task_id", "arm")
        .agg(
            pl.col("score").cast(pl.Float64).mean().alias("score"),
            pl.len().cast(pl.Int64).alias("n"),
            (pl.col("score") >= 1.0).sum().cast(pl.Int64).alias("c"),
            # replicates with partial credit (neither 0 nor 1): the mean is then not a pass rate
            ((pl.col("score") > 0) & (pl.col("score") < 1)).sum().cast(pl.Int64).alias("frac"),
        )
        .with_columns(pl.col(c).cast(pl.String) for c in ("family", "task_id", "arm"))
        .sort("family", "task_id", "arm")
        .collect()
    )


def _matrix(ts: pl.DataFrame, value: str, arms: list[str]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(values [T, K] with 0 where missing, observed mask [T, K]) of one family's rows; tasks in sorted order
    (vectorised: a 1M-job run has about a million (task, arm) rows)."""
    if ts.height == 0:
        return np.zeros((0, len(arms))), np.zeros((0, len(arms)))
    t = (ts["task_id"].rank("dense").cast(pl.Int64) - 1).to_numpy()
    a = (
        ts["arm"]
        .replace_strict({x: i for i, x in enumerate(arms)}, default=-1, return_dtype=pl.Int64)
        .to_numpy()
    )
    v = ts[value].cast(pl.Float64).fill_null(float("nan")).to_numpy()
    keep = (a >= 0) & ~np.isnan(v)
    vals = np.zeros((int(t.max()) + 1, len(arms)))
    mask = np.zeros_like(vals)
    vals[t[keep], a[keep]] = v[keep]
    mask[t[keep], a[keep]] = 1.0
    return vals, mask


@dataclass(frozen=True)
class FamilyStats:
    """Per family: mean [K], variance of that mean [K] (s^2 / n, the tasks' spread) and task count [K]; NaN
    (count 0) where the arm has no task in the family."""

    mean: NDArray[np.float64]
    var: NDArray[np.float64]
    count: NDArray[np.float64]


def _family_stats(
    ts: pl.DataFrame, value: str, arms: list[str], families: list[str]
) -> dict[str, FamilyStats]:
    out = {}
    for f in families:
        vals, mask = _matrix(ts.filter(pl.col("family") == f), value, arms)
        n = mask.sum(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = vals.sum(0) / n
            ss = (mask * (vals - mean) ** 2).sum(0)
            var = np.where(n > 1, ss / np.maximum(n - 1, 1) / n, 0.0)
        out[f] = FamilyStats(mean, np.where(n > 0, var, np.nan), n)
    return out


def _merge(
    stats: Mapping[str, FamilyStats], weights: Mapping[str, float], k: int
) -> tuple[NDArray[np.float64], ...]:
    """Family means merged with the family weights, renormalised over the families an arm has tasks in:
    (mean, variance of the mean, effective number of tasks n_kish = 1 / sum (w_f^2 / n_f), degrees of
    freedom sum (n_f - 1)), each [K]."""
    num, den, var, kish, df = (np.zeros(k) for _ in range(5))
    for f, st in stats.items():
        w = float(weights.get(f, 0.0))
        have = st.count > 0
        if w <= 0:
            continue
        num += np.where(have, st.mean, 0.0) * w
        den += have * w
    with np.errstate(invalid="ignore", divide="ignore"):
        for f, st in stats.items():
            w = float(weights.get(f, 0.0))
            if w <= 0:
                continue
            have = st.count > 0
            share = np.where(have & (den > 0), w / np.where(den > 0, den, 1.0), 0.0)
            var += np.where(have, share**2 * np.nan_to_num(st.var), 0.0)
            kish += np.where(have, share**2 / np.maximum(st.count, 1), 0.0)
            df += np.where(have, st.count - 1, 0.0)
        mean = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        n_kish = np.where(kish > 0, 1.0 / np.where(kish > 0, kish, 1.0), 0.0)
    return mean, var, n_kish, df


def score_interval(
    p: NDArray[np.float64],
    var: NDArray[np.float64],
    n_kish: NDArray[np.float64],
    df: NDArray[np.float64],
    level: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Clopper-Pearson interval of a mean score in [0, 1] on its effective number of tasks, with the
    degrees-of-freedom adjustment of Korn & Graubard (1998).

    n_eff = p(1-p) / var, at most n_kish (partial credit, whose spread is below a pass/fail one, is not
    credited with more tasks than were run); n_kish when var is 0 (every task solved, or none). n_eff is
    then shrunk by (z / t_df)^2 with df = sum (n_f - 1), the small-sample widening the Elo intervals use,
    and the bounds are the Beta quantiles of x = p n_eff "successes" in n_eff trials. Why not Wilson: a
    Wilson interval's upper bound at n-1 of n solved falls just short of a true rate near 1 - 1/(4n) (exact
    binomial coverage 85% at 99.4% on 24 tasks); Clopper-Pearson's coverage is at least the level for any
    rate on a binary score (measured >= 95.3% on 8-180 tasks, benchmarks/bench_verdict.py). It does not
    collapse at 0 or 1: n of n solved gives a lower bound of (alpha/2)^(1/n_eff) (0.84 at 24 tasks).

    Args:
        p: Mean scores in [0, 1].
        var: The variance of each mean.
        n_kish: The effective number of tasks behind each mean (Kish).
        df: Degrees of freedom of each variance.
        level: Interval level in (0.5, 1) (e.g. 0.95).
    """
    from scipy.stats import beta, norm, t

    p = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    a = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        n_eff = np.where(var > 0, np.minimum(n_kish, p * (1 - p) / np.where(var > 0, var, 1.0)), n_kish)
        n_eff = np.maximum(np.nan_to_num(n_eff, nan=1.0), 1.0)
        n_eff = np.maximum(n_eff * (norm.ppf(1 - a) / t.ppf(1 - a, np.maximum(df, 1.0))) ** 2, 1.0)
        x = np.nan_to_num(p) * n_eff
        tiny = 1e-12  # Beta parameters must be positive; the branch that needs x > 0 (or < n) is masked
        lo = np.where(x <= 0, 0.0, beta.ppf(a, np.maximum(x, tiny), n_eff - x + 1))
        hi = np.where(x >= n_eff, 1.0, beta.ppf(1 - a, x + 1, np.maximum(n_eff - x, tiny)))
        lo, hi = np.clip(np.nan_to_num(lo), 0.0, 1.0), np.clip(np.nan_to_num(hi, nan=1.0), 0.0, 1.0)
    bad = np.isnan(p) | ~(n_kish > 0)
    return np.where(bad, np.nan, np.minimum(lo, p)), np.where(bad, np.nan, np.maximum(hi, p))


def _num(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _intervals(
    stats: Mapping[str, FamilyStats], weights: Mapping[str, float], k: int, level: float, on: bool
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """(merged mean, lo, hi) [K]; NaN bounds when `on` is false (no intervals asked for)."""
    mean, var, n_kish, df = _merge(stats, weights, k)
    if not on:
        return mean, mean * np.nan, mean * np.nan
    lo, hi = score_interval(mean, var, n_kish, df, level)
    return mean, lo, hi


def accuracy_tables(
    outcomes: pl.DataFrame | pl.LazyFrame,
    arms: Sequence[str],
    weights: Mapping[str, float],
    *,
    rounds: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    partial: Mapping[str, Sequence[str]] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(per arm, per family x arm, pass@k) frames (ACCURACY_SCHEMA, FAMILY_SCHEMA, PASS_K_SCHEMA); `binary`:
    every score of the arm is 0 or 1 (pass@1), else the mean is of partial credit.

    Args:
        outcomes: task_id, family, arm, score (one row per replicate), after the run's --missing estimand (so
            accuracy describes the same tasks, and counts the same losses, as Elo).
        arms: the arms, in table order (outcomes of other arms are left out).
        weights: family -> weight, as for Elo.
        rounds: 0: no intervals, as the Elo table has none.
        seed: not used (the intervals are analytic, score_interval).
        level: the intervals' level.
        partial: the headline table's partial arms (arm -> families seen), marked in `seen_in`.
    """
    del seed  # analytic intervals: kept in the signature so every caller passes the run's options alike
    arm_list, partial = list(arms), partial or {}
    ts = task_scores(outcomes).filter(pl.col("arm").is_in(arm_list))
    families = sorted(ts["family"].unique().to_list())
    stats = _family_stats(ts, "score", arm_list, families)
    on = bool(rounds) and bool(families)
    acc, lo, hi = _intervals(stats, weights, len(arm_list), level, on)
    # The standard error of the merged mean (what lm-eval prints as "± stderr"): the spread the Wilson
    # interval is built from, shown for readers who expect it; no intervals asked for, no s.e. either.
    se = (
        np.where(np.isnan(acc), np.nan, np.sqrt(_merge(stats, weights, len(arm_list))[1]))
        if on
        else acc * np.nan
    )
    per_arm = _per_arm_frame(ts, arm_list, (acc, lo, hi, se), partial)
    per_family = _per_family_frame(stats, arm_list, families, rounds, level)
    return per_arm, per_family, _pass_k_table(ts, arm_list, families, weights, rounds, level)


def _per_arm_frame(
    ts: pl.DataFrame,
    arm_list: list[str],
    merged: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]],
    partial: Mapping[str, Sequence[str]],
) -> pl.DataFrame:
    """The per-arm table (ACCURACY_SCHEMA) from the task scores and the merged (accuracy, lo, hi, s.e.) [K]."""
    acc, lo, hi, se = merged
    n_out = dict(ts.group_by("arm").agg(pl.col("n").sum()).iter_rows())
    n_tasks = dict(ts.group_by("arm").agg(pl.len()).iter_rows())
    binary = dict(ts.group_by("arm").agg((pl.col("frac") == 0).all()).iter_rows()) if ts.height else {}
    rows = [
        {
            "arm": a,
            "accuracy": _num(acc[i]),
            "accuracy_lo": _num(lo[i]),
            "accuracy_hi": _num(hi[i]),
            "tasks": int(n_tasks.get(a, 0)),
            "outcomes": int(n_out.get(a, 0)),
            "binary": binary.get(a),
            "seen_in": _seen_in(partial[a]) if a in partial else None,
            "accuracy_se": _num(se[i]),
        }
        for i, a in enumerate(arm_list)
    ]
    return pl.DataFrame(rows, schema=ACCURACY_SCHEMA)


def _seen_in(families: Sequence[str]) -> str:
    """A partial arm's `seen_in` mark: the families it was seen in, or "no family"."""
    return "+".join(families) + " only" if families else "no family"


def _per_family_frame(
    stats: Mapping[str, FamilyStats], arm_list: list[str], families: list[str], rounds: int, level: float
) -> pl.DataFrame:
    """The per family x arm table (FAMILY_SCHEMA): each family's own mean and interval, arms it has tasks of."""
    rows = []
    for f in families:
        st = stats[f]
        # No intervals asked for (rounds 0): NaN bounds, as the per-arm table has.
        flo, fhi = (
            score_interval(st.mean, st.var, st.count, st.count - 1, level)
            if rounds
            else (st.mean * np.nan,) * 2
        )
        rows += [
            {
                "family": f,
                "arm": a,
                "accuracy": _num(st.mean[i]),
                "accuracy_lo": _num(flo[i]),
                "accuracy_hi": _num(fhi[i]),
                "tasks": int(st.count[i]),
            }
            for i, a in enumerate(arm_list)
            if st.count[i] > 0
        ]
    return pl.DataFrame(rows, schema=FAMILY_SCHEMA)


def _pass_k_table(
    ts: pl.DataFrame,
    arms: list[str],
    families: list[str],
    weights: Mapping[str, float],
    rounds: int,
    level: float,
) -> pl.DataFrame:
    """pass@k rows for every arm whose tasks all have >= 2 replicates (k up to the fewest)."""
    rows = []
    for arm in arms:
        mine = ts.filter(pl.col("arm") == arm)
        if mine.height == 0 or int(mine["n"].min() or 0) < 2:  # type: ignore[arg-type]
            continue
        for k in _ks(int(mine["n"].min() or 0)):  # type: ignore[arg-type]
            pk = mine.with_columns(
                pl.Series("pk", pass_at_k_array(mine["n"].to_numpy(), mine["c"].to_numpy(), k))
            )
            stats = _family_stats(pk, "pk", [arm], families)
            v, lo, hi = _intervals(stats, weights, 1, level, bool(rounds))
            rows.append(
                {
                    "arm": arm,
                    "k": k,
                    "pass_at_k": _num(v[0]),
                    "pass_at_k_lo": _num(lo[0]),
                    "pass_at_k_hi": _num(hi[0]),
                    "tasks": mine.height,
                }
            )
    return pl.DataFrame(rows, schema=PASS_K_SCHEMA)
