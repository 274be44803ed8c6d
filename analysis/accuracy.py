"""Absolute metrics next to Elo: mean score (accuracy / pass@1) per arm and per family, pass@k.

Elo says which arm beats which; a user also asks "what share of the tasks does it get right?". Scores are in
[0, 1] (1 = correct for graded tasks). Per task, an arm's score is the mean over its replicates; per family, the
mean over the family's tasks; per arm, the families' means weighted like Elo (the run's family weights), so the
two columns summarise the same task mix. Intervals resample tasks within each family (the Elo bootstrap's unit).

pass@k uses the unbiased estimator of Chen et al. (2021): on a task with n replicates of which c passed
(score == 1), pass@k = 1 - C(n-c, k) / C(n, k), averaged like accuracy over the tasks with n >= k.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

ACCURACY_SCHEMA = {
    "arm": pl.String, "accuracy": pl.Float64, "accuracy_lo": pl.Float64, "accuracy_hi": pl.Float64,
    "tasks": pl.Int64, "outcomes": pl.Int64,
}  # fmt: skip
FAMILY_SCHEMA = {
    "family": pl.String, "arm": pl.String, "accuracy": pl.Float64, "accuracy_lo": pl.Float64,
    "accuracy_hi": pl.Float64, "tasks": pl.Int64,
}  # fmt: skip
PASS_K_SCHEMA = {
    "arm": pl.String, "k": pl.Int64, "pass_at_k": pl.Float64, "pass_at_k_lo": pl.Float64,
    "pass_at_k_hi": pl.Float64, "tasks": pl.Int64,
}  # fmt: skip
_CHUNK = 100  # bootstrap rounds per block: bounds memory at rounds x tasks of one block


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed (Chen et al. 2021, numerically stable product form)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=float)))


def pass_at_k_array(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """pass_at_k over arrays (n >= k everywhere), through log-gamma: C(n-c, k) / C(n, k)."""
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
    Outcomes without a score (ungraded) are left out, as the comparisons leave them out."""
    return (
        outcomes.lazy()
        .filter(pl.col("score").is_not_null())
        .group_by("family", "task_id", "arm")
        .agg(
            pl.col("score").cast(pl.Float64).mean().alias("score"),
            pl.len().cast(pl.Int64).alias("n"),
            (pl.col("score") >= 1.0).sum().cast(pl.Int64).alias("c"),
        )
        .with_columns(pl.col(c).cast(pl.String) for c in ("family", "task_id", "arm"))
        .sort("family", "task_id", "arm")
        .collect()
    )


def _matrix(ts: pl.DataFrame, value: str, arms: list[str]) -> tuple[np.ndarray, np.ndarray]:
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


def _family_means(
    ts: pl.DataFrame, value: str, arms: list[str], families: list[str], rounds: int, seed: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per family: point means [K], bootstrap means [R, K] (tasks resampled within the family) and task
    counts [K]. NaN where the arm has no task in the family."""
    rng = np.random.default_rng(seed)
    point, boot, count = {}, {}, {}
    for f in families:
        vals, mask = _matrix(ts.filter(pl.col("family") == f), value, arms)
        n = vals.shape[0]
        with np.errstate(invalid="ignore", divide="ignore"):
            point[f] = vals.sum(0) / mask.sum(0)
        count[f] = mask.sum(0)
        blocks = []
        for start in range(0, rounds if n else 0, _CHUNK):
            w = rng.multinomial(n, np.full(n, 1.0 / n), size=min(_CHUNK, rounds - start)).astype(float)
            with np.errstate(invalid="ignore", divide="ignore"):
                blocks.append((w @ vals) / (w @ mask))
        boot[f] = np.vstack(blocks) if blocks else np.full((rounds, len(arms)), np.nan)
    return point, boot, count


def _weighted(per_family: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """Family means merged with the family weights, renormalised over the families an arm has tasks in."""
    num = den = None
    for f, m in per_family.items():
        w = float(weights.get(f, 0.0))
        if w <= 0:
            continue
        have = ~np.isnan(m)
        part, wt = np.where(have, m, 0.0) * w, have * w
        num, den = (part, wt) if num is None else (num + part, den + wt)
    if num is None or den is None:
        first = next(iter(per_family.values()), np.array([]))
        return np.full(first.shape, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(num / den, dtype=float)


def _interval(samples: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    a = (1.0 - level) / 2.0
    if samples.shape[0] == 0:
        nan = np.full(samples.shape[1:], np.nan)
        return nan, nan
    with np.errstate(invalid="ignore"):
        import warnings

        with warnings.catch_warnings():  # an arm absent from every round: NaN, said as "—"
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanquantile(samples, a, axis=0), np.nanquantile(samples, 1.0 - a, axis=0)


def _num(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def accuracy_tables(
    outcomes: pl.DataFrame | pl.LazyFrame,
    arms: Sequence[str],
    weights: Mapping[str, float],
    *,
    rounds: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(per arm, per family x arm, pass@k) frames (ACCURACY_SCHEMA, FAMILY_SCHEMA, PASS_K_SCHEMA).

    outcomes: task_id, family, arm, score (one row per replicate). rounds = 0: no intervals."""
    arm_list = list(arms)
    ts = task_scores(outcomes).filter(pl.col("arm").is_in(arm_list))
    families = sorted(ts["family"].unique().to_list())
    point, boot, count = _family_means(ts, "score", arm_list, families, rounds, seed)
    acc = _weighted(point, weights) if families else np.full(len(arm_list), np.nan)
    lo, hi = (
        _interval(_weighted(boot, weights), level) if families and rounds else (acc * np.nan, acc * np.nan)
    )
    n_out = dict(ts.group_by("arm").agg(pl.col("n").sum()).iter_rows())
    n_tasks = dict(ts.group_by("arm").agg(pl.len()).iter_rows())
    per_arm = pl.DataFrame(
        [
            {"arm": a, "accuracy": _num(acc[i]), "accuracy_lo": _num(lo[i]), "accuracy_hi": _num(hi[i]),
             "tasks": int(n_tasks.get(a, 0)), "outcomes": int(n_out.get(a, 0))}
            for i, a in enumerate(arm_list)
        ],
        schema=ACCURACY_SCHEMA,
    )  # fmt: skip
    fam_rows = []
    for f in families:
        flo, fhi = _interval(boot[f], level) if rounds else (point[f] * np.nan, point[f] * np.nan)
        fam_rows += [
            {"family": f, "arm": a, "accuracy": _num(point[f][i]), "accuracy_lo": _num(flo[i]),
             "accuracy_hi": _num(fhi[i]), "tasks": int(count[f][i])}
            for i, a in enumerate(arm_list) if count[f][i] > 0
        ]  # fmt: skip
    per_family = pl.DataFrame(fam_rows, schema=FAMILY_SCHEMA)
    return per_arm, per_family, _pass_k_table(ts, arm_list, families, weights, rounds, seed, level)


def _pass_k_table(
    ts: pl.DataFrame,
    arms: list[str],
    families: list[str],
    weights: Mapping[str, float],
    rounds: int,
    seed: int,
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
            point, boot, _ = _family_means(pk, "pk", [arm], families, rounds, seed)
            v = _weighted(point, weights)[0]
            lo, hi = _interval(_weighted(boot, weights), level) if rounds else (np.array([np.nan]),) * 2
            rows.append({"arm": arm, "k": k, "pass_at_k": _num(v), "pass_at_k_lo": _num(lo[0]),
                         "pass_at_k_hi": _num(hi[0]), "tasks": mine.height})  # fmt: skip
    return pl.DataFrame(rows, schema=PASS_K_SCHEMA)
