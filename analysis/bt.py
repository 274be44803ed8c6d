"""Bradley-Terry fit: the penalised logistic objective below, minimised exactly and fast.

Objective (with optional per-comparison weights; unit weights give the plain Bradley-Terry likelihood):

    f(theta) = -sum_k w_k * log sigmoid(theta[winner_k] - theta[loser_k]) + l2 * sum(theta**2)

Comparisons are first aggregated into a K x K weighted win-count matrix W (W[i, j] = weight of
"i beat j"), so the cost of a fit no longer depends on the number of comparisons. With N = W + W.T
and P[i, j] = sigmoid(theta_i - theta_j):

    gradient  g_i  = sum_j (N_ij * P_ij - W_ij) + 2 * l2 * theta_i      (expected minus actual wins)
    Hessian   H_ij = -N_ij * P_ij * P_ji  (i != j),   H_ii = sum_j N_ij * P_ij * P_ji + 2 * l2

Newton with a backtracking line search converges in a handful of iterations because f is strictly
convex for l2 > 0. A batched version (`newton_batch`) fits many count matrices at once for the
bootstrap. See docs/statistics.md for what is returned (centring) and the tie rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

__all__ = [
    "PRIOR_COMPARISONS",
    "BTFit",
    "BatchFit",
    "aggregate_wins",
    "bt_objective",
    "fit_bt",
    "fit_bt_counts",
    "fit_bt_detailed",
    "mle_exists",
    "newton_batch",
    "prior_l2",
]

# Default prior of `ept analyze` / `ept compare` (docs/statistics.md section 1): every arm plays one
# virtual tie, of the weight of one real comparison, against an average arm (theta = 0). A tie of weight c
# adds c/2 * (-log s(t) - log s(-t)) = const + c * t**2 / 8 + O(t**4), i.e. l2 = c / 8: a Gaussian prior
# N(0, 2**2) on theta (sd 347 Elo). It is counted in comparisons, the unit of the data, so it restrains a
# family of a handful of comparisons (separation cannot run theta off) and fades like 1/n with more data
# (at 40 tasks x 3 opponents it moves theta by ~1%). The seed's fixed 1e-3 stays the default of fit_bt.
PRIOR_COMPARISONS = 1.0


def prior_l2(virtual_comparisons: float = PRIOR_COMPARISONS) -> float:
    """The l2 of `virtual_comparisons` virtual ties per arm against theta = 0 (see PRIOR_COMPARISONS).

    Args:
        virtual_comparisons: Virtual ties per arm against theta = 0.
    """
    c = float(virtual_comparisons)
    if not np.isfinite(c) or c < 0:
        raise ValueError(f"virtual comparisons must be a finite number >= 0, got {virtual_comparisons!r}")
    return c / 8.0


_MAX_ITER = 100
_ARMIJO = 1e-4
_MAX_HALVINGS = 60


@dataclass(frozen=True)
class BTFit:
    """Result of one Bradley-Terry fit.

    theta: minimiser shifted to mean 0 (for l2 > 0 the minimiser already has mean 0, see
    docs/statistics.md); converged: the optimiser met the gradient tolerance (always False when
    l2 == 0 and the maximum-likelihood estimate does not exist); unobserved: arms with no
    comparison of positive weight (their theta is 0 for l2 > 0); objective: f at the returned theta.
    """

    theta: NDArray[np.float64]
    converged: bool
    n_iter: int
    grad_norm: float
    unobserved: NDArray[np.float64]
    objective: float


@dataclass(frozen=True)
class BatchFit:
    """Results of R independent fits (one per count matrix), each row as in BTFit."""

    theta: NDArray[np.float64]  # [R, K], centred
    converged: NDArray[np.bool_]  # [R] bool
    n_iter: NDArray[np.int64]  # [R] int
    grad_norm: NDArray[np.float64]  # [R]
    objective: NDArray[np.float64]  # [R]


def _check_l2(l2: float) -> float:
    l2 = float(l2)
    if not np.isfinite(l2) or l2 < 0:
        raise ValueError(f"l2 must be a finite number >= 0, got {l2!r}")
    return l2


def aggregate_wins(
    winner: NDArray[np.integer[Any]],
    loser: NDArray[np.integer[Any]],
    n_arms: int,
    weights: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """K x K matrix W with W[i, j] = total weight of comparisons where i beat j (validated).

    Args:
        winner: Winning arm index of each comparison.
        loser: Losing arm index of each comparison.
        n_arms: K, the number of arms (indices 0..K-1).
        weights: Per-comparison weights, finite and >= 0 (None: 1 each).
    """
    if int(n_arms) != n_arms or n_arms < 1:
        raise ValueError(f"n_arms must be a positive integer, got {n_arms!r}")
    n_arms = int(n_arms)
    winner = np.asarray(winner)
    loser = np.asarray(loser)
    if winner.ndim != 1 or loser.ndim != 1 or winner.shape != loser.shape:
        raise ValueError("winner and loser must be 1-D arrays of the same length")
    for name, idx in (("winner", winner), ("loser", loser)):
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"{name} must hold integer arm indices, got dtype {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() >= n_arms):
            raise ValueError(f"{name} holds an index outside [0, {n_arms})")
    w = None
    if weights is not None:
        w = np.asarray(weights, dtype=float)
        if w.shape != winner.shape:
            raise ValueError("weights must have the same length as winner/loser")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weights must be finite and >= 0")
    if np.any(winner == loser):
        raise ValueError("a comparison has the same arm as winner and loser")
    flat = winner.astype(np.int64, copy=False) * n_arms + loser.astype(np.int64, copy=False)
    counts = np.bincount(flat, weights=w, minlength=n_arms * n_arms)
    return counts.astype(float, copy=False).reshape(n_arms, n_arms)


def _check_wins(wins: NDArray[np.float64]) -> NDArray[np.float64]:
    w = np.asarray(wins, dtype=float)
    if w.ndim < 2 or w.shape[-1] != w.shape[-2] or w.shape[-1] < 1:
        raise ValueError(f"wins must be a square K x K matrix (or a stack of them), got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("wins must be finite and >= 0")
    diag = np.diagonal(w, axis1=-2, axis2=-1)
    if np.any(diag != 0):
        raise ValueError("wins has a non-zero diagonal (an arm cannot beat itself)")
    return w


def bt_objective(theta: NDArray[np.float64], wins: NDArray[np.float64], l2: float) -> NDArray[np.float64]:
    """f(theta) for count matrices; works on a batch ([R, K] theta with [R, K, K] wins).

    Args:
        theta: Strengths [K] or a batch [R, K].
        wins: Win counts [K, K] or a batch [R, K, K].
        l2: L2 penalty on theta (0: the plain maximum-likelihood fit).
    """
    d = theta[..., :, None] - theta[..., None, :]
    # -log sigmoid(d) = logaddexp(0, -d): finite for every d, so 0 * it is 0 on empty cells.
    nll = np.sum(wins * np.logaddexp(0.0, -d), axis=(-2, -1))
    f: NDArray[np.float64] = nll + l2 * np.sum(theta**2, axis=-1)  # numpy's stubs type the sums as Any
    return f


def _grad_hess(
    theta: NDArray[np.float64], wins: NDArray[np.float64], n_pair: NDArray[np.float64], l2: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    d = theta[..., :, None] - theta[..., None, :]
    p = expit(d)
    g = np.sum(n_pair * p - wins, axis=-1) + 2.0 * l2 * theta
    c = n_pair * p * (1.0 - p)
    k = theta.shape[-1]
    h = -c
    diag = np.sum(c, axis=-1) + 2.0 * l2
    h[..., np.arange(k), np.arange(k)] = diag
    return g, h


def _gtol(wins: NDArray[np.float64]) -> NDArray[np.float64]:
    # Gradient entries are sums of up to total-weight terms of size <= 1, so the attainable
    # precision scales with the total weight; 1e-9 relative keeps theta errors far below 1e-6.
    tol: NDArray[np.float64] = 1e-9 * np.maximum(1.0, np.sum(wins, axis=(-2, -1)))
    return tol


def _line_search(
    th: NDArray[np.float64],
    wa: NDArray[np.float64],
    g: NDArray[np.float64],
    step: NDArray[np.float64],
    l2: float,
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Damped Newton step of each round (theta th, wins wa, gradient g): t halves from 1 until the Armijo
    condition holds, at most _MAX_HALVINGS times; (new theta, rounds where no step was accepted)."""
    f0 = bt_objective(th, wa, l2)
    slope = np.sum(g * step, axis=-1)  # directional decrease along -step
    t = np.ones(len(th))
    pending = np.ones(len(th), dtype=bool)
    new = th.copy()
    for _h in range(_MAX_HALVINGS):
        idx = np.nonzero(pending)[0]
        if idx.size == 0:
            break
        cand = th[idx] - t[idx, None] * step[idx]
        f1 = bt_objective(cand, wa[idx], l2)
        ok = f1 <= f0[idx] - _ARMIJO * t[idx] * slope[idx]
        # Near the optimum f cannot resolve the decrease any more; a full Newton step
        # is then the right move (quadratic convergence), so take it.
        ok |= (t[idx] == 1.0) & (np.abs(f1 - f0[idx]) <= 1e-13 * np.maximum(1.0, np.abs(f0[idx])))
        new[idx[ok]] = cand[ok]
        pending[idx[ok]] = False
        t[idx[~ok]] *= 0.5
    return new, pending


def newton_batch(wins: NDArray[np.float64], *, l2: float = 1e-3, max_iter: int = _MAX_ITER) -> BatchFit:
    """Fit R count matrices [R, K, K] at once with damped Newton (all rounds share each solve call).

    For l2 == 0 the Hessian is singular along constant shifts (and on unobserved arms), so steps use
    the pseudo-inverse; whether the MLE exists is NOT checked here (see `mle_exists`).

    Args:
        wins: win counts [R, K, K].
        l2: the ridge prior (0: none).
        max_iter: Newton steps at most per round.
    """
    l2 = _check_l2(l2)
    w = _check_wins(wins)
    if w.ndim != 3:
        raise ValueError("newton_batch expects wins of shape [R, K, K]")
    r, k, _ = w.shape
    n_pair = w + np.swapaxes(w, -1, -2)
    theta = np.zeros((r, k))
    converged = np.zeros(r, dtype=bool)
    n_iter = np.zeros(r, dtype=np.int64)
    grad_norm = np.full(r, np.inf)
    gtol = _gtol(w)
    active = np.arange(r)
    for _ in range(max_iter + 1):
        if active.size == 0:
            break
        th, wa, na = theta[active], w[active], n_pair[active]
        g, h = _grad_hess(th, wa, na, l2)
        gn = np.max(np.abs(g), axis=-1)
        grad_norm[active] = gn
        done = gn <= gtol[active]
        converged[active[done]] = True
        keep = ~done
        if not np.any(keep) or n_iter[active[keep]].max() >= max_iter:
            active = active[keep]
            break
        active, th, wa, g, h = active[keep], th[keep], wa[keep], g[keep], h[keep]
        if l2 > 0:
            step = np.linalg.solve(h, g[..., None])[..., 0]
        else:
            step = (np.linalg.pinv(h, hermitian=True) @ g[..., None])[..., 0]
        new, pending = _line_search(th, wa, g, step, l2)
        theta[active] = new
        n_iter[active] += 1
        stuck = pending  # no acceptable step: give up on these rounds (reported as not converged)
        active = active[~stuck]
    theta = theta - theta.mean(axis=-1, keepdims=True)
    return BatchFit(
        theta=theta,
        converged=converged,
        n_iter=n_iter,
        grad_norm=grad_norm,
        objective=bt_objective(theta, w, l2),
    )


def _objective_and_p(
    theta: NDArray[np.float64], w: NDArray[np.float64], l2: float
) -> tuple[float, NDArray[np.float64]]:
    """f(theta) and P = sigmoid(theta_i - theta_j) from one exp: with e = exp(-|d|),
    log sigmoid(d) = min(d, 0) - log1p(e) and sigmoid(d) = 1/(1+e) or e/(1+e); never overflows."""
    d = theta[:, None] - theta[None, :]
    e = np.exp(-np.abs(d))
    inv = 1.0 / (1.0 + e)
    p = np.where(d >= 0, inv, e * inv)
    nll = float(np.vdot(w, np.log1p(e) - np.minimum(d, 0.0)))
    return nll + l2 * float(theta @ theta), p


def _newton_single(
    w: NDArray[np.float64], l2: float, max_iter: int
) -> tuple[NDArray[np.float64], bool, int, float, float]:
    """Damped Newton on one K x K count matrix; the same iteration as newton_batch without the
    active-set bookkeeping, which dominates the cost of a single small fit."""
    k = w.shape[0]
    n_pair = w + w.T
    diag = np.diag_indices(k)
    gtol = float(_gtol(w))
    theta = np.zeros(k)
    f, p = _objective_and_p(theta, w, l2)
    grad_norm = np.inf
    for it in range(max_iter + 1):
        g = np.sum(n_pair * p - w, axis=1) + 2.0 * l2 * theta
        grad_norm = float(np.max(np.abs(g)))
        if grad_norm <= gtol:
            return theta, True, it, grad_norm, f
        if it == max_iter:
            break
        c = n_pair * p * p.T  # p.T = 1 - p
        h = -c
        h[diag] = c.sum(axis=1) + 2.0 * l2
        step = np.linalg.solve(h, g) if l2 > 0 else np.linalg.pinv(h, hermitian=True) @ g
        slope = float(g @ step)
        t = 1.0
        for _h in range(_MAX_HALVINGS):
            cand = theta - t * step
            f1, p1 = _objective_and_p(cand, w, l2)
            if f1 <= f - _ARMIJO * t * slope or (t == 1.0 and abs(f1 - f) <= 1e-13 * max(1.0, abs(f))):
                theta, f, p = cand, f1, p1
                break
            t *= 0.5
        else:
            return theta, False, it + 1, grad_norm, f  # no acceptable step
    return theta, False, max_iter, grad_norm, f


def mle_exists(wins: NDArray[np.float64]) -> bool:
    """True when the unpenalised (l2 = 0) maximum-likelihood estimate is finite.

    Zermelo/Ford condition: within every connected group of arms, the directed "beat" graph
    must be strongly connected (no subset of arms that never lost to the rest of its group).

    Args:
        wins: K x K weighted win counts (wins[i, j]: weight of i beating j).
    """
    from scipy.sparse.csgraph import connected_components

    w = _check_wins(wins)
    beat = w > 0
    # Strong components refine weak ones, so equal counts mean equal partitions.
    n_weak, _ = connected_components(beat, directed=True, connection="weak")
    n_strong, _ = connected_components(beat, directed=True, connection="strong")
    return bool(n_weak == n_strong)


def _scipy_fallback(
    w: NDArray[np.float64], l2: float, theta0: NDArray[np.float64]
) -> tuple[NDArray[np.float64], int]:
    from scipy.optimize import minimize

    n_pair = w + w.T

    def fun(th: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        g, _ = _grad_hess(th, w, n_pair, l2)
        return float(bt_objective(th, w, l2)), g

    def hess(th: NDArray[np.float64]) -> NDArray[np.float64]:
        return _grad_hess(th, w, n_pair, l2)[1]

    res = minimize(fun, theta0, jac=True, hess=hess, method="trust-exact", options={"gtol": 1e-12})
    return res.x, int(res.nit)


def fit_bt_counts(wins: NDArray[np.float64], *, l2: float = 1e-3, max_iter: int = _MAX_ITER) -> BTFit:
    """Fit from a K x K weighted win-count matrix (wins[i, j] = weight of i beating j).

    Args:
        wins: K x K weighted win counts (wins[i, j]: weight of i beating j).
        l2: L2 penalty on theta (0: the plain maximum-likelihood fit).
        max_iter: Newton iterations before the fit gives up (then scipy's trust-region solver finishes it).
    """
    l2 = _check_l2(l2)
    w = _check_wins(wins)
    if w.ndim != 2:
        raise ValueError(f"wins must be a K x K matrix, got shape {w.shape}")
    n_pair = w + w.T
    unobserved = np.nonzero(n_pair.sum(axis=1) == 0)[0]
    exists = l2 > 0 or mle_exists(w)
    theta, converged, n_iter, grad_norm, objective = _newton_single(w, l2, max_iter)
    if not converged and exists:
        x, nit = _scipy_fallback(w, l2, theta)
        n_iter += nit
        g, _ = _grad_hess(x, w, n_pair, l2)
        grad_norm, objective, theta = float(np.max(np.abs(g))), float(bt_objective(x, w, l2)), x
        converged = grad_norm <= float(_gtol(w))
    # Centring: for l2 > 0 the minimiser already has mean 0 (the gradient sums to 2*l2*sum(theta)), so
    # this only removes rounding; for l2 == 0 f is shift-invariant and this picks the mean-0 minimiser.
    theta = theta - theta.mean()
    return BTFit(
        theta=theta,
        converged=bool(converged and exists),
        n_iter=int(n_iter),
        grad_norm=float(grad_norm),
        unobserved=unobserved.astype(np.int64),
        objective=float(objective),
    )


def fit_bt_detailed(
    winner: NDArray[np.integer[Any]],
    loser: NDArray[np.integer[Any]],
    n_arms: int,
    *,
    l2: float = 1e-3,
    weights: NDArray[np.float64] | None = None,
) -> BTFit:
    """Same as fit_bt, with diagnostics. A tie is passed as two rows (a beat b, b beat a), weight 0.5 each.

    Args:
        winner: Winning arm index of each comparison.
        loser: Losing arm index of each comparison.
        n_arms: K, the number of arms (indices 0..K-1).
        l2: L2 penalty on theta (0: the plain maximum-likelihood fit).
        weights: Per-comparison weights (None: 1 each).
    """
    return fit_bt_counts(aggregate_wins(winner, loser, n_arms, weights), l2=l2)


def fit_bt(
    winner: NDArray[np.integer[Any]],
    loser: NDArray[np.integer[Any]],
    n_arms: int,
    *,
    l2: float = 1e-3,
    weights: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """Centred theta minimising -sum w*log sigmoid(theta_win - theta_lose) + l2*sum(theta**2).

    Args:
        winner: Winning arm index of each comparison.
        loser: Losing arm index of each comparison.
        n_arms: K, the number of arms (indices 0..K-1).
        l2: L2 penalty on theta (0: the plain maximum-likelihood fit).
        weights: Per-comparison weights (None: 1 each).
    """
    return fit_bt_detailed(winner, loser, n_arms, l2=l2, weights=weights).theta
