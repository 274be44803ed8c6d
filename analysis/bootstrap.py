"""Point estimate and task-level bootstrap of the merged Elo and of tokens per task.

A bootstrap round resamples whole tasks with replacement inside each family (so comparisons from the
same task, including replicates, stay together), refits Bradley-Terry per family, merges and anchors,
and recomputes tokens per task from the same resampled tasks. All rounds are fitted together: a
round's per-family count matrix is (resample counts) x (per-task pair counts), one sparse product for
all rounds, and the fits are one batched Newton solve (see analysis.bt.newton_batch).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from elo_per_token.analysis.bt import BTFit, fit_bt_counts, mle_exists, newton_batch
from elo_per_token.analysis.merge import merge_thetas, theta_to_elo

__all__ = [
    "BootstrapResult",
    "FamilyPoint",
    "OutcomeGroups",
    "PairData",
    "bootstrap",
    "family_counts",
    "fit_batch_size",
    "fit_families",
    "point_estimate",
    "small_sample_factor",
    "tokens_unweighted",
]

# Rounds drawn per block: fixed, so the random stream (and the result) depends only on (data, seed,
# rounds), never on K or on the memory budget below.
_CHUNK = 250
# Working set of one batched fit: about _ARRAYS_PER_ROUND float64 K x K arrays per round (counts, pair
# totals, differences, probabilities, Hessian, line-search temporaries). Rounds are fitted in batches
# that keep this under _FIT_BUDGET bytes, so memory is O(batch x K^2) with batch >= 1 for any K.
_ARRAYS_PER_ROUND = 12
_FIT_BUDGET = 256 * 2**20


def fit_batch_size(n_arms: int, budget: int = _FIT_BUDGET) -> int:
    """Rounds fitted together for K arms: as many as fit the memory budget, at least 1, at most _CHUNK.

    Args:
        n_arms: K, the number of arms (indices 0..K-1).
        budget: Bytes the batched fits may use.
    """
    per_round = _ARRAYS_PER_ROUND * 8 * max(int(n_arms), 1) ** 2
    return int(min(_CHUNK, max(1, budget // per_round)))


@dataclass(frozen=True)
class OutcomeGroups:
    """Scored outcomes by (task, arm, score level); see PairData.outcome_groups."""

    task: NDArray[np.integer[Any]]
    arm: NDArray[np.integer[Any]]
    level: NDArray[np.integer[Any]]
    mass: NDArray[np.float64]
    tie_weight: float = 0.5  # 0 drops ties

    def check(self, n_tasks: int, n_arms: int) -> None:
        """ValueError unless task, arm and level are 1-D integer arrays of one length with indices in range and mass is finite and >= 0.

        Args:
            n_tasks: The number of tasks (task indices lie below it).
            n_arms: The number of arms (arm indices lie below it).
        """
        shape = np.asarray(self.task).shape
        for name, hi in (("task", n_tasks), ("arm", n_arms), ("level", None)):
            a = np.asarray(getattr(self, name))
            if a.ndim != 1 or a.shape != shape or (a.size and not np.issubdtype(a.dtype, np.integer)):
                raise ValueError(
                    f"outcome_groups.{name} must be a 1-D integer array like outcome_groups.task"
                )
            if a.size and (a.min() < 0 or (hi is not None and a.max() >= hi)):
                raise ValueError(f"outcome_groups.{name} holds an index outside [0, {hi})")
        m = np.asarray(self.mass, dtype=float)
        if m.shape != shape or not np.all(np.isfinite(m)) or np.any(m < 0):
            raise ValueError("outcome_groups.mass must be finite, >= 0 and as long as outcome_groups.task")
        if self.tie_weight not in (0.0, 0.5):
            raise ValueError("outcome_groups.tie_weight must be 0.5 (ties count half) or 0 (ties dropped)")


@dataclass(frozen=True)
class PairData:
    """Comparisons grouped by task, with the family of each task and tokens spent per task and arm.

    task_family [T] int: family index (into `families`) of each task.
    task, winner, loser [M] int and weight [M] float: comparison m happened in task `task[m]`; a tie is
        two rows (a beat b, b beat a) of weight 0.5 each.
    task_tokens [T, K] float: tokens arm k spent on task t, NaN where arm k did not run task t.
    outcome_groups (optional): scored outcomes instead of their pair rows, for grids where every arm
        meets every other on each task (K^2/2 rows per task). Arrays [G]: task, arm, level (dense rank of
        the score within its task, higher wins) and mass (share of the arm's replicates on the task with
        that score). Every two groups of different arms in a task imply the comparison "higher level
        wins, equal levels tie (tie_weight each way)" with weight mass_a * mass_b: exactly the rows
        analysis.pairs.outcome_pairs would build. See `_group_columns`.
    """

    task_family: NDArray[np.integer[Any]]
    task: NDArray[np.integer[Any]]
    winner: NDArray[np.integer[Any]]
    loser: NDArray[np.integer[Any]]
    weight: NDArray[np.float64]
    n_arms: int
    families: Sequence[str]
    task_tokens: NDArray[np.float64]
    outcome_groups: OutcomeGroups | None = None

    def __post_init__(self) -> None:
        k, f = int(self.n_arms), len(self.families)
        tf = np.asarray(self.task_family)
        t = tf.shape[0] if tf.ndim == 1 else -1
        if tf.ndim != 1 or (t and not np.issubdtype(tf.dtype, np.integer)):
            raise ValueError("task_family must be a 1-D integer array")
        if t and (tf.min() < 0 or tf.max() >= f):
            raise ValueError(f"task_family holds an index outside [0, {f})")
        m = np.asarray(self.task).shape
        for name in ("task", "winner", "loser", "weight"):
            a = np.asarray(getattr(self, name))
            if a.ndim != 1 or a.shape != m:
                raise ValueError(f"{name} must be 1-D with the same length as task")
        for name, hi in (("task", t), ("winner", k), ("loser", k)):
            a = np.asarray(getattr(self, name))
            if a.size and not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"{name} must hold integer indices")
            if a.size and (a.min() < 0 or a.max() >= hi):
                raise ValueError(f"{name} holds an index outside [0, {hi})")
        if np.any(np.asarray(self.winner) == np.asarray(self.loser)):
            raise ValueError("a comparison has the same arm as winner and loser")
        w = np.asarray(self.weight, dtype=float)
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weight must be finite and >= 0")
        tok = np.asarray(self.task_tokens, dtype=float)
        if tok.shape != (t, k):
            raise ValueError(f"task_tokens must have shape [T, K] = [{t}, {k}], got {tok.shape}")
        if np.any(np.isinf(tok)) or np.any(tok < 0):
            raise ValueError("task_tokens must be finite and >= 0 (NaN marks an arm that did not run)")
        if self.outcome_groups is not None:
            self.outcome_groups.check(t, k)

    @property
    def n_tasks(self) -> int:
        return int(np.asarray(self.task_family).shape[0])


@dataclass(frozen=True)
class BootstrapResult:
    """elo [R, K] (anchored), tokens_per_task [R, K]; failed_rounds counts rounds in which some family's
    fit did not converge (their values are kept: the last iterate). family_theta: family -> [R, K]
    centred theta (NaN where the resample held no comparison of that arm in that family)."""

    elo: NDArray[np.float64]
    tokens_per_task: NDArray[np.float64]
    failed_rounds: int
    seed: int
    rounds: int
    family_theta: dict[str, NDArray[np.float64]] = field(default_factory=dict)


def _weights(data: PairData, family_weights: NDArray[np.float64]) -> dict[str, float]:
    fw = np.asarray(family_weights, dtype=float)
    if fw.shape != (len(data.families),):
        raise ValueError(f"family_weights must have one entry per family ({len(data.families)})")
    if not np.all(np.isfinite(fw)) or np.any(fw < 0) or fw.sum() <= 0:
        raise ValueError("family_weights must be finite, >= 0 and not all zero")
    return dict(zip(data.families, (fw / fw.sum()).tolist(), strict=True))


def _check_anchor(data: PairData, anchor: int) -> int:
    if int(anchor) != anchor or not 0 <= anchor < data.n_arms:
        raise ValueError(f"anchor {anchor!r} is not an arm index in [0, {data.n_arms})")
    return int(anchor)


def _family_counts(data: PairData, fam: int) -> NDArray[np.float64]:
    k = int(data.n_arms)
    sel = np.asarray(data.task_family)[np.asarray(data.task)] == fam
    flat = np.asarray(data.winner)[sel].astype(np.int64) * k + np.asarray(data.loser)[sel]
    counts = np.bincount(flat, weights=np.asarray(data.weight, dtype=float)[sel], minlength=k * k)
    wins = counts.reshape(k, k).astype(float, copy=False)  # bincount of no rows is an integer array
    cols = _group_columns(data, fam)
    if cols is not None:
        e, below, _ = cols
        wins += _group_wins(e, below, np.ones((1, e.shape[1])))[0]
    return wins


def family_counts(data: PairData, fam: int) -> NDArray[np.float64]:
    """K x K weighted win counts of family index `fam` (explicit rows and outcome groups).

    Args:
        data: The indexed comparisons and tokens (analysis.design.pair_data).
        fam: The family's index in data.families.
    """
    return _family_counts(data, fam)


def _group_columns(
    data: PairData, fam: int
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]] | None:
    """The family's outcome groups as two dense [K, Q] matrices over its Q (task, level) columns, and the
    task of each column, or None without groups.

    E[i, q]: mass of arm i at column q's level on its task. B[i, q]: mass of arm i strictly below that
    level on the same task, plus tie_weight x E[i, q]. Then sum_q c_q E[:, q] B[:, q]^T is the win-count
    matrix of the task multiplicities c (diagonal excepted: an arm meeting itself is dropped), at
    O(K^2 Q) time and O(K Q) memory instead of one row per pair of arms."""
    g = data.outcome_groups
    if g is None:
        return None
    task = np.asarray(g.task)
    sel = np.asarray(data.task_family)[task] == fam if task.size else np.zeros(0, dtype=bool)
    if not np.any(sel):
        return None
    task, arm, level = (
        task[sel].astype(np.int64),
        np.asarray(g.arm)[sel],
        np.asarray(g.level)[sel].astype(np.int64),
    )
    span = int(level.max()) + 1
    cols, q = np.unique(task * span + level, return_inverse=True)  # sorted: by task, then level
    q_task = cols // span
    e = np.zeros((int(data.n_arms), cols.size))
    np.add.at(e, (arm, q), np.asarray(g.mass, dtype=float)[sel])
    run = np.cumsum(e, axis=1)
    first = np.searchsorted(q_task, q_task)  # first column of each column's task
    before_task = np.where(first > 0, run[:, np.maximum(first - 1, 0)], 0.0)
    below = run - e - before_task + g.tie_weight * e
    return e, below, q_task


def _group_wins(
    e: NDArray[np.float64], below: NDArray[np.float64], col_weight: NDArray[np.float64]
) -> NDArray[np.float64]:
    """[R, K, K] win counts for R rows of column weights [R, Q] (a task's multiplicity on its columns)."""
    wins: NDArray[np.float64] = np.matmul(e[None, :, :] * col_weight[:, None, :], below.T)
    k = e.shape[0]
    wins[:, np.arange(k), np.arange(k)] = 0.0
    return wins


# Bytes for the [rounds, K, Q] product _group_wins builds (Q = a family's (task, level) columns: ~33k for
# a 1M-job run's family), computed over as many rounds at a time as fit. Per round the product is
# independent of the others, so this bounds memory without changing a bit of the result.
_GROUP_BUDGET = 64 * 2**20


def _group_wins_bounded(
    cols: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]], c: NDArray[np.float64]
) -> NDArray[np.float64]:
    """_group_wins of the resample counts c [R, T_f] (gathered onto the columns' tasks), a few rounds at a time."""
    e, below, q_task = cols
    k, q = e.shape
    step = max(1, _GROUP_BUDGET // (8 * q * (k + 1)))
    wins = np.empty((c.shape[0], k, k))
    for s in range(0, c.shape[0], step):
        wins[s : s + step] = _group_wins(e, below, c[s : s + step][:, q_task])
    return wins


def _mask_unobserved(theta: NDArray[np.float64], wins: NDArray[np.float64]) -> NDArray[np.float64]:
    seen = (wins + np.swapaxes(wins, -1, -2)).sum(axis=-1) > 0
    return np.where(seen, theta, np.nan)


@dataclass(frozen=True)
class FamilyPoint:
    """A family's Bradley-Terry fit on all of its comparisons, and their total weight."""

    fit: BTFit
    comparisons: float

    def theta(self) -> NDArray[np.float64]:
        """The fit's centred theta with NaN for arms the family never compared (BTFit.unobserved)."""
        theta = np.array(self.fit.theta, dtype=float)
        theta[np.asarray(self.fit.unobserved, dtype=np.int64)] = np.nan
        return theta


def fit_families(data: PairData, *, l2: float = 1e-3) -> dict[str, FamilyPoint]:
    """One Bradley-Terry fit per family on all of that family's comparisons (diagnostics included).

    The only point fit of a family in an analysis: point_estimate and bootstrap take its result (`fits=`)
    instead of fitting again; bootstrap rounds are separate, batched fits of resampled counts.

    Args:
        data: The indexed comparisons and tokens (analysis.design.pair_data).
        l2: L2 penalty on theta (0: the plain maximum-likelihood fit).
    """
    out = {}
    for f, name in enumerate(data.families):
        wins = _family_counts(data, f)
        out[name] = FamilyPoint(fit_bt_counts(wins, l2=l2), float(wins.sum()))
    return out


def _tokens_per_task(tok: NDArray[np.float64]) -> NDArray[np.float64]:
    ran = ~np.isnan(tok)
    n = ran.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.nansum(tok, axis=0) / np.maximum(n, 1), np.nan)


def tokens_unweighted(data: PairData) -> NDArray[np.float64]:
    """Tokens per task pooled over all tasks by task count, ignoring family weights ([K]).

    Args:
        data: The indexed comparisons and tokens (analysis.design.pair_data).
    """
    return _tokens_per_task(np.asarray(data.task_tokens, dtype=float))


def _weighted_tokens(fam_mean: NDArray[np.float64], fw: NDArray[np.float64]) -> NDArray[np.float64]:
    """Tokens per task weighted exactly like Elo: sum_f w_f * mean_f / sum_f w_f over the families with
    w_f > 0 in which the arm ran (renormalised per arm, as the merge does). fam_mean [F, ..., K]."""
    w = np.asarray(fw, dtype=float).reshape((-1,) + (1,) * (fam_mean.ndim - 1))
    ran = ~np.isnan(fam_mean) & (w > 0)
    den = np.sum(np.where(ran, w, 0.0), axis=0)
    num = np.sum(np.where(ran, w * np.nan_to_num(fam_mean), 0.0), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def small_sample_factor(n_tasks: int, df: int | None = None, level: float = 0.95) -> float:
    """How much a family's bootstrap deviations are stretched: sqrt(n/(n-1)) * t_{q,df} / z_q, with
    q = (1 + level) / 2 the upper quantile of the interval asked for (0.975 for 95%, 0.995 for 99%).

    The percentile bootstrap of a mean over n tasks is too narrow by about this factor (its variance is
    (n-1)/n of the unbiased one, and it uses normal rather than Student-t tails): Hesterberg's "expanded
    percentile" correction. df is the degrees of freedom of the merged estimate's variance, sum of
    (n_f - 1) over the merged families (default n - 1: one family). One family: 1.005 at 300 tasks, 1.04
    at 40, 1.2 at 10; infinite (no interval) below 2 tasks, where resampling one task shows no variation.

    Args:
        n_tasks: The family's number of tasks.
        df: Degrees of freedom of the merged estimate (None: n_tasks - 1).
        level: Interval level in (0.5, 1) (e.g. 0.95).
    """
    from scipy.stats import norm, t

    n = int(n_tasks)
    if n < 2:
        return math.inf
    df = n - 1 if df is None else max(int(df), 1)
    q = (1.0 + float(level)) / 2.0  # the tail the interval is read at: the t/z ratio grows with the level
    return math.sqrt(n / (n - 1)) * float(t.ppf(q, df)) / float(norm.ppf(q))


def _point_fits(
    data: PairData, fits: Mapping[str, FamilyPoint] | None, l2: float
) -> Mapping[str, FamilyPoint]:
    if fits is None:
        return fit_families(data, l2=l2)
    if list(fits) != list(data.families):
        raise ValueError(
            f"fits must hold one fit per family, in order {list(data.families)}, got {list(fits)}"
        )
    return fits


def point_estimate(
    data: PairData,
    family_weights: NDArray[np.float64],
    *,
    anchor: int,
    l2: float = 1e-3,
    fits: Mapping[str, FamilyPoint] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], dict[str, NDArray[np.float64]]]:
    """(elo [K] anchored, tokens_per_task [K], family -> centred theta [K] with NaN for unobserved arms).

    fits: fit_families(data, l2=l2) when the caller has it already (then nothing is fitted here).

    Args:
        data: The indexed comparisons and tokens (analysis.design.pair_data).
        family_weights: Weight of each family, in data.families order.
        anchor: The arm placed at 1000 Elo.
        l2: L2 penalty on theta (0: the plain maximum-likelihood fit).
        fits: Per-family fits already made (fit_families; None: fitted here).
    """
    weights = _weights(data, family_weights)
    anchor = _check_anchor(data, anchor)
    fits = _point_fits(data, fits, l2)
    per_family: dict[str, NDArray[np.float64]] = {}
    tok = np.asarray(data.task_tokens, dtype=float)
    fam_tok = np.full((len(data.families), int(data.n_arms)), np.nan)
    for f, name in enumerate(data.families):
        per_family[name] = merge_thetas({name: fits[name].theta()}, {name: 1.0})  # centred over observed arms
        fam_tok[f] = _tokens_per_task(tok[np.asarray(data.task_family) == f])
    elo = theta_to_elo(merge_thetas(per_family, weights), anchor)
    fw = np.array([weights[name] for name in data.families])
    return elo, _weighted_tokens(fam_tok, fw), per_family


def _resample_counts(rng: np.random.Generator, n_rounds: int, n_tasks: int) -> NDArray[np.float64]:
    """[n_rounds, n_tasks] multiplicities of each task in a with-replacement resample of n_tasks tasks."""
    draws = rng.integers(0, n_tasks, size=(n_rounds, n_tasks))
    draws += np.arange(n_rounds)[:, None] * n_tasks
    return np.bincount(draws.ravel(), minlength=n_rounds * n_tasks).reshape(n_rounds, n_tasks).astype(float)


def _fit_rounds(wins: NDArray[np.float64], l2: float) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    fit = newton_batch(wins, l2=l2)
    theta, ok = fit.theta.copy(), fit.converged.copy()
    if l2 == 0:
        # Without a penalty a separated resample drifts off until its gradient underflows the tolerance;
        # that is not a fit, so check that the MLE exists (a graph test per round, only in this mode).
        ok &= np.array([mle_exists(w) for w in wins], dtype=bool)
    for r in np.nonzero(~ok)[0]:  # rare: only rounds where batched Newton gave up
        single = fit_bt_counts(wins[r], l2=l2)
        theta[r], ok[r] = single.theta, single.converged
    return _mask_unobserved(theta, wins), ok


@dataclass(frozen=True)
class _FamilyPart:
    """What every round of one family needs, built once: the family's tasks as a sparse [K*K, T_f] matrix of
    per-task weighted pair counts (transposed), its tokens, and the point values rounds are stretched from."""

    n_tasks: int
    counts_t: Any  # scipy.sparse csr [K*K, T_f]
    tok0: NDArray[np.float64]  # [T_f, K] tokens, NaN -> 0
    ran: NDArray[np.float64]  # [T_f, K] 1.0 where the arm ran the task
    th0: NDArray[np.float64]  # [K] point theta (see small_sample_factor)
    tok_pt: NDArray[np.float64]  # [K] point tokens per task
    stretch: float
    cols: (
        tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]] | None
    )  # _group_columns, task -> the family's local index


def _family_part(
    data: PairData, f: int, point: FamilyPoint, df_total: int, level: float = 0.95
) -> _FamilyPart:
    from scipy import sparse

    k = int(data.n_arms)
    task_family = np.asarray(data.task_family)
    task = np.asarray(data.task)
    pair = np.asarray(data.winner).astype(np.int64) * k + np.asarray(data.loser)
    tasks_f = np.nonzero(task_family == f)[0]
    local = np.full(task_family.shape[0], -1)
    local[tasks_f] = np.arange(tasks_f.size)
    sel = local[task] >= 0
    counts = sparse.csr_matrix(
        (np.asarray(data.weight, dtype=float)[sel], (local[task[sel]], pair[sel])),
        shape=(tasks_f.size, k * k),
    )  # duplicate (task, pair) entries are summed
    tok = np.asarray(data.task_tokens, dtype=float)[tasks_f]
    cols = _group_columns(data, f)
    if cols is not None:
        cols = (cols[0], cols[1], local[cols[2]])  # column -> the family's local task index
    return _FamilyPart(
        n_tasks=int(tasks_f.size),
        counts_t=counts.T.tocsr(),
        tok0=np.nan_to_num(tok),
        ran=(~np.isnan(tok)).astype(float),
        th0=point.fit.theta if tasks_f.size else np.zeros(k),
        tok_pt=_tokens_per_task(tok) if tasks_f.size else np.full(k, np.nan),
        stretch=small_sample_factor(tasks_f.size, df_total or None, level),
        cols=cols,
    )


def _resampled_tokens(part: _FamilyPart, c: NDArray[np.float64]) -> NDArray[np.float64]:
    """[n, K] tokens per task of the family in each of n resamples (task multiplicities c [n, T_f])."""
    with np.errstate(invalid="ignore", divide="ignore"):
        tok_n = c @ part.ran
        out = np.where(tok_n > 0, (c @ part.tok0) / np.where(tok_n > 0, tok_n, 1.0), np.nan)
        stretch = part.stretch if math.isfinite(part.stretch) else np.nan
        tokens: NDArray[np.float64] = part.tok_pt + stretch * (out - part.tok_pt)
    return tokens


def _resampled_theta(
    part: _FamilyPart, name: str, c: NDArray[np.float64], k: int, l2: float, batch: int
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """([n, K] stretched, centred theta, [n] converged) of the family in each of n resamples."""
    n = c.shape[0]
    theta_out = np.full((n, k), np.nan)
    ok_out = np.ones(n, dtype=bool)
    # Count matrices exist only for one fit batch at a time: [batch, K, K], bounded by the budget.
    for b0 in range(0, n, batch):
        sub = slice(b0, min(n, b0 + batch))
        if part.cols is None:
            wins = np.asarray(part.counts_t @ c[sub].T).T.reshape(-1, k, k)
        else:
            wins = _group_wins_bounded(part.cols, c[sub])
            if part.counts_t.nnz:
                wins += np.asarray(part.counts_t @ c[sub].T).T.reshape(-1, k, k)
        theta, ok = _fit_rounds(wins, l2)
        del wins
        # Expanded percentile: stretch the round's deviation from the point fit (the merge absorbs any
        # per-family constant, so the centring of either does not matter).
        with np.errstate(invalid="ignore"):
            if math.isfinite(part.stretch):
                theta = part.th0 + part.stretch * (theta - part.th0)
            else:
                theta = np.full_like(theta, np.nan)
        theta_out[sub] = merge_thetas({name: theta}, {name: 1.0})  # centred over observed arms
        ok_out[sub] = ok
    return theta_out, ok_out


def _merged_elo(
    fam_theta: dict[str, NDArray[np.float64]], rows: slice, weights: dict[str, float], anchor: int
) -> NDArray[np.float64] | float:
    """Elo of the rounds `rows`, merged over the positively weighted families' thetas."""
    live = {name: theta[rows] for name, theta in fam_theta.items() if weights[name] > 0}
    if all(np.isnan(v).all() for v in live.values()):
        return np.nan  # no weighted family can be resampled (all have < 2 tasks)
    return theta_to_elo(merge_thetas(live, weights), anchor)


def bootstrap(
    data: PairData,
    family_weights: NDArray[np.float64],
    *,
    anchor: int,
    rounds: int = 1000,
    seed: int = 0,
    l2: float = 1e-3,
    progress: Callable[[int], None] | None = None,
    fit_budget: int = _FIT_BUDGET,
    fits: Mapping[str, FamilyPoint] | None = None,
    level: float = 0.95,
) -> BootstrapResult:
    """Task-level bootstrap within each family.

    Args:
        data: the comparisons by task.
        family_weights: weight per family [F].
        anchor: index of the arm held at Elo 0.
        rounds: bootstrap rounds.
        seed: the resampling seed.
        l2: the fits' ridge prior.
        progress: called with the rounds done so far.
        fit_budget: bytes for the batched fits' working set (see fit_batch_size); speed and memory only.
        fits: fit_families(data, l2=l2) when the caller has it already (the point fits rounds are
            stretched from; then only the rounds are fitted here).
        level: the interval level the rounds will be read at; the small-sample stretch (small_sample_factor)
            uses its quantile, so a 99% interval is widened with t_{0.995} rather than t_{0.975}.
    """
    weights = _weights(data, family_weights)
    anchor = _check_anchor(data, anchor)
    if int(rounds) != rounds or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    rounds = int(rounds)
    fits = _point_fits(data, fits, l2)
    k = int(data.n_arms)
    rng = np.random.default_rng(seed)
    fw = np.array([weights[name] for name in data.families])
    n_f = np.bincount(np.asarray(data.task_family), minlength=len(data.families))
    # Degrees of freedom of the merged estimate: the families that enter it, n_f - 1 each.
    df_total = int(np.sum(np.where((fw > 0) & (n_f >= 2), n_f - 1, 0)))
    parts = [_family_part(data, f, fits[name], df_total, level) for f, name in enumerate(data.families)]

    elo = np.empty((rounds, k))
    tpt = np.empty((rounds, k))
    fam_theta = {name: np.full((rounds, k), np.nan) for name in data.families}
    failed = np.zeros(rounds, dtype=bool)
    batch = fit_batch_size(k, fit_budget)
    for start in range(0, rounds, _CHUNK):
        n = min(_CHUNK, rounds - start)
        rows = slice(start, start + n)
        fam_tok = np.full((len(parts), n, k), np.nan)
        for f, part in enumerate(parts):
            if part.n_tasks == 0:
                continue
            c = _resample_counts(rng, n, part.n_tasks)
            fam_tok[f] = _resampled_tokens(part, c)
            theta, ok = _resampled_theta(part, data.families[f], c, k, l2, batch)
            fam_theta[data.families[f]][rows] = theta
            failed[rows] |= ~ok
        elo[rows] = _merged_elo(fam_theta, rows, weights, anchor)
        tpt[rows] = _weighted_tokens(fam_tok, fw)
        if progress is not None:
            progress(start + n)
    if np.any((fw > 0) & (n_f == 1)):
        # A merged family of one task cannot be resampled: rounds without it would describe another
        # estimand than the point estimate, so nothing merged with it gets an interval.
        elo[:] = np.nan
        tpt[:] = np.nan
    return BootstrapResult(
        elo=elo,
        tokens_per_task=tpt,
        failed_rounds=int(failed.sum()),
        seed=int(seed),
        rounds=rounds,
        family_theta=fam_theta,
    )
