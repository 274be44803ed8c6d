"""Diminishing-returns tables (ΔElo and ΔElo per 1k tokens between arms ordered by cost) and the
heterogeneity warning.

Each row is compared with a predecessor: the next-cheaper arm (`returns_table`), the previous budget
of the same strategy (`per_strategy_table`) or the next-cheaper arm on the frontier
(`frontier_steps_table`). Intervals are percentile intervals of the same quantity recomputed in every
bootstrap round with the row order fixed by the point estimate. ΔElo per 1k tokens is reported only
where the token step is resolved (its interval excludes 0); see docs/statistics.md. The rows' columns are
analysis.steps.step_table's; the arms come as one analysis.curve.ArmCurve.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.analysis.curve import ArmCurve, frontier_probability, prev_on_frontier
from elo_per_token.analysis.merge import ELO_SCALE
from elo_per_token.analysis.steps import per_1k_rounds, step_table

# frontier_probability and per_1k_rounds live in analysis.curve and analysis.steps; named here too for the
# callers that import them from this module.
__all__ = [
    "family_heterogeneity",
    "frontier_probability",
    "frontier_steps_table",
    "per_1k_rounds",
    "per_strategy_table",
    "returns_table",
]


def returns_table(curve: ArmCurve) -> pl.DataFrame:
    """Rows by tokens/task ascending; deltas against the previous (next-cheaper) row.

    d_elo = elo - prev_elo; d_tokens = tokens - prev_tokens; d_elo_per_1k = d_elo / d_tokens * 1000, null
    when d_tokens is not positive and, with samples, when d_tokens' interval includes 0
    (per_1k_resolved = False; per_1k_nonpositive_rounds counts the rounds with a step <= 0, which enter
    the ratio's interval at +-inf). frontier = the point estimate is not weakly dominated; frontier_prob
    = share of bootstrap rounds in which it is not. *_lo/*_hi: percentile interval at `curve.level` over
    bootstrap rounds (null without samples); when tokens_samples is None the point tokens are used in
    every round.

    Args:
        curve: the arms, their cost and Elo, rounds, level and frontier eligibility.

    Returns:
        One row per arm (analysis.steps.step_table's columns).
    """
    order = np.argsort(curve.tokens, kind="stable")
    prev = np.concatenate([[-1], order[:-1]]) if order.size else order
    return step_table(curve, order, prev)


def per_strategy_table(curve: ArmCurve) -> pl.DataFrame:
    """Each budget against the previous (smaller) budget of the same strategy; frontier is still the
    global frontier. Strategies are listed cheapest first.

    Args:
        curve: the arms, their cost and Elo, rounds, level and frontier eligibility.

    Returns:
        One row per arm, returns_table's columns.
    """
    tokens = curve.tokens
    strat = np.asarray(curve.strategies, dtype=object)
    names, inv = np.unique(strat.astype(str), return_inverse=True)
    cheapest = np.full(names.size, np.inf)
    np.minimum.at(cheapest, inv, np.nan_to_num(tokens, nan=np.inf))
    rank = np.argsort(np.argsort(cheapest, kind="stable"), kind="stable")[inv]
    order = np.lexsort((tokens, np.asarray(curve.budgets), rank))
    same = np.concatenate([[False], inv[order][1:] == inv[order][:-1]]) if order.size else order.astype(bool)
    prev = np.where(same, np.concatenate([[-1], order[:-1]]) if order.size else order, -1)
    return step_table(curve, order, prev)


def frontier_steps_table(curve: ArmCurve) -> pl.DataFrame:
    """Rows as in returns_table, but each row against the next-cheaper arm ON the (point-estimate) frontier
    (column `vs`), so a dominated arm in between does not inflate the next arm's return. Frontier arms'
    rows are the steps along the frontier; an off-frontier arm's row says what it adds (or loses) over
    the frontier arm below it.

    Args:
        curve: the arms, their cost and Elo, rounds, level and frontier eligibility.

    Returns:
        One row per arm: returns_table's columns with `vs` (the predecessor's label) inserted fourth.
    """
    order = np.argsort(curve.tokens, kind="stable")
    prev = prev_on_frontier(order, curve.frontier())
    df = step_table(curve, order, prev)
    vs = [curve.arms[j] if j >= 0 else None for j in prev]
    return df.insert_column(3, pl.Series("vs", vs, dtype=pl.String))


def _heterogeneity_warning(arm: str, q: float, p: float, df: int, view: str, cut: float) -> str:
    """The warning for one flagged arm: its test statistic and each family's view of it."""
    return (
        f"{arm}: the families disagree about its strength beyond noise (heterogeneity test "
        f"chi2={q:.1f}, df={df}, p={p:.2g} < {cut:.2g}); each family's view vs their "
        f"precision-weighted mean, in Elo: {view}. The global Elo is a weighted average of different "
        "effects: check the per-family view before trusting it"
    )


def family_heterogeneity(
    point_theta: Mapping[str, NDArray[np.float64]],
    round_theta: Mapping[str, NDArray[np.float64]],
    weights: Mapping[str, float],
    arms: Sequence[str],
    *,
    alpha: float = 0.05,
) -> list[str]:
    """Warnings for arms whose strength the families disagree about beyond noise (family x arm interaction).

    Family f's view of arm k on the merged scale is z_fk = theta_f[k] - b_f (b_f: the family's offset from
    the merge, analysis.merge.merge_fit); its variance v_fk is the bootstrap variance of the same quantity
    over rounds (round_theta: family -> [R, K]). Per arm, Cochran's Q = sum_f (z_fk - zbar_k)^2 / v_fk with
    the inverse-variance mean zbar_k is compared with chi-square on (families - 1) degrees of freedom; an
    arm is flagged when p < alpha / (arms tested) (Bonferroni), so with no real interaction the chance of
    any warning is at most about alpha. Step-down: the most heterogeneous flagged arm is taken out of the
    offset fit and the rest retested, so one divergent arm does not make every arm look divergent.

    Args:
        point_theta: family -> its point theta [K].
        round_theta: family -> its bootstrap thetas [R, K].
        weights: family -> weight (only families with a positive weight count).
        arms: the arm names, indexing theta.
        alpha: the family-wise level of the test.
    """
    fams = [f for f in point_theta if float(weights.get(f, 0.0)) > 0 and f in round_theta]
    if len(fams) < 2:
        return []
    w = {f: float(weights[f]) for f in fams}
    y0 = {f: np.asarray(point_theta[f], dtype=float) for f in fams}
    yr = {f: np.asarray(round_theta[f], dtype=float) for f in fams}
    k = len(arms)
    # Step-down: an arm that differs between families also moves those families' offsets, which would make
    # every other arm look displaced too. So test, flag the most heterogeneous arm, refit the offsets
    # without it, and test the rest again, until nothing is significant.
    flagged: list[tuple[int, float, float, int, str]] = []
    out_set = np.zeros(k, dtype=bool)
    n_tested = None
    while True:
        q, df, p, views = _cochran_q(
            {f: np.where(out_set, np.nan, v) for f, v in y0.items()},
            y0,
            {f: np.where(out_set, np.nan, v) for f, v in yr.items()},
            yr,
            w,
        )
        tested = (df >= 1) & ~out_set
        if n_tested is None:
            n_tested = int(tested.sum())
        if not tested.any() or n_tested == 0:
            break
        cut = alpha / n_tested
        cand = np.where(tested & (p < cut), q / np.maximum(df, 1), -np.inf)
        best = int(np.argmax(cand))
        if not np.isfinite(cand[best]):
            break
        flagged.append((best, q[best], p[best], int(df[best]), views[best]))
        out_set[best] = True
    return [
        _heterogeneity_warning(arms[kk], qk, pk, dfk, view, alpha / n_tested)
        for kk, qk, pk, dfk, view in flagged
    ]


def _cochran_q(
    fit0: Mapping[str, NDArray[np.float64]],
    y0: Mapping[str, NDArray[np.float64]],
    fitr: Mapping[str, NDArray[np.float64]],
    yr: Mapping[str, NDArray[np.float64]],
    w: Mapping[str, float],
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], list[str]]:
    """Per arm: Q, degrees of freedom, p-value and a text of each family's deviation (Elo). Offsets are
    fitted on fit0/fitr (the arms still in the pool); every arm's view uses them."""
    from scipy.stats import chi2

    from elo_per_token.analysis.merge import merge_fit

    fams = list(w)
    _, b0 = merge_fit(fit0, w)
    _, br = merge_fit(fitr, w)
    z0 = np.stack([y0[f] - b0[f] for f in fams])  # [F, K]
    zr = np.stack([yr[f] - br[f][:, None] for f in fams])  # [F, R, K]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        v = np.nanvar(zr, axis=1, ddof=1)  # [F, K]
    use = ~np.isnan(z0) & np.isfinite(v) & (v > 0)
    n_f = use.sum(axis=0)
    iv = np.where(use, 1.0 / np.where(use, v, 1.0), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        zbar = np.sum(iv * np.nan_to_num(z0), axis=0) / np.sum(iv, axis=0)
        q = np.sum(np.where(use, (np.nan_to_num(z0) - zbar) ** 2 * iv, 0.0), axis=0)
    df = np.maximum(n_f - 1, 0)
    p = np.where(df >= 1, chi2.sf(q, np.maximum(df, 1)), 1.0)
    views = [
        ", ".join(f"{f} {(z0[i, kk] - zbar[kk]) * ELO_SCALE:+.0f}" for i, f in enumerate(fams) if use[i, kk])
        for kk in range(z0.shape[1])
    ]
    return q, df, p, views
