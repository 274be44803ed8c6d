"""Diminishing-returns tables (the seed's section 5) and the one-family-dominates warning.

Each row is compared with a predecessor: the next-cheaper arm (`returns_table`) or the previous budget
of the same strategy (`per_strategy_table`). Intervals are percentile intervals of the same quantity
recomputed in every bootstrap round with the row order fixed by the point estimate.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from analysis.merge import ELO_SCALE

__all__ = ["family_dominance", "per_strategy_table", "returns_table"]

_FLOAT_COLS = [
    "tokens_per_task",
    "elo",
    "elo_lo",
    "elo_hi",
    "d_elo",
    "d_elo_lo",
    "d_elo_hi",
    "d_elo_per_1k",
    "d_elo_per_1k_lo",
    "d_elo_per_1k_hi",
]


def _validate(arms, strategies, budgets, tokens, elo, elo_samples, tokens_samples, level):
    k = len(arms)
    if not (len(strategies) == len(budgets) == k):
        raise ValueError("arms, strategies and budgets must have the same length")
    tokens = np.asarray(tokens, dtype=float)
    elo = np.asarray(elo, dtype=float)
    if tokens.shape != (k,) or elo.shape != (k,):
        raise ValueError(f"tokens_per_task and elo must have shape [{k}]")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    out = []
    for name, s in (("elo_samples", elo_samples), ("tokens_samples", tokens_samples)):
        if s is not None:
            s = np.asarray(s, dtype=float)
            if s.ndim != 2 or s.shape[1] != k:
                raise ValueError(f"{name} must have shape [R, {k}]")
        out.append(s)
    if out[0] is not None and out[1] is not None and out[0].shape != out[1].shape:
        raise ValueError("elo_samples and tokens_samples must have the same number of rounds")
    return tokens, elo, out[0], out[1]


def _per_1k(d_elo: np.ndarray, d_tok: np.ndarray) -> np.ndarray:
    # Undefined (NaN -> null) when the row is not more expensive than its predecessor.
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(d_tok > 0, d_elo / np.where(d_tok > 0, d_tok, 1.0) * 1000.0, np.nan)


def _frontier(tokens: np.ndarray, elo: np.ndarray) -> np.ndarray:
    """True where no strictly cheaper arm has a strictly higher Elo (NaN Elo is never on it)."""
    cheaper = tokens[None, :] < tokens[:, None]
    beaten = np.any(cheaper & (elo[None, :] > elo[:, None]), axis=1)
    return ~beaten & ~np.isnan(elo) & ~np.isnan(tokens)


def _build(arms, strategies, budgets, tokens, elo, es, ts, level, order, prev):
    """Rows `order`; row i is compared with arm prev[i] (-1 = no predecessor)."""
    has_prev = prev >= 0
    p = np.where(has_prev, prev, 0)
    d_elo = np.where(has_prev, elo[order] - elo[p], np.nan)
    d_tok = np.where(has_prev, tokens[order] - tokens[p], np.nan)
    cols: dict[str, object] = {
        "arm": [arms[i] for i in order],
        "strategy": [strategies[i] for i in order],
        "budget_n": np.asarray(budgets, dtype=np.int64)[order],
        "tokens_per_task": tokens[order],
        "elo": elo[order],
        "d_elo": d_elo,
        "d_elo_per_1k": _per_1k(d_elo, d_tok),
    }
    q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
    nan = np.full(order.size, np.nan)
    if es is not None:
        ts = np.broadcast_to(tokens, es.shape) if ts is None else ts
        d_es = np.where(has_prev, es[:, order] - es[:, p], np.nan)
        d_ts = np.where(has_prev, ts[:, order] - ts[:, p], np.nan)
        ranges = {
            "elo": es[:, order],
            "d_elo": d_es,
            "d_elo_per_1k": _per_1k(d_es, d_ts),
        }
        for name, samples in ranges.items():
            with warnings.catch_warnings():
                # All-NaN columns (the first row's deltas) legitimately give NaN -> null.
                warnings.simplefilter("ignore", RuntimeWarning)
                lo, hi = np.nanpercentile(samples, q, axis=0)
            cols[f"{name}_lo"], cols[f"{name}_hi"] = lo, hi
    else:
        for name in ("elo", "d_elo", "d_elo_per_1k"):
            cols[f"{name}_lo"], cols[f"{name}_hi"] = nan, nan
    cols["frontier"] = _frontier(tokens, elo)[order]
    df = pl.DataFrame(cols)
    return df.select(
        "arm",
        "strategy",
        "budget_n",
        *[pl.col(c).cast(pl.Float64).fill_nan(None) for c in _FLOAT_COLS],
        "frontier",
    )


def returns_table(
    arms: list[str],
    strategies: list[str],
    budgets: list[int],
    tokens_per_task: np.ndarray,
    elo: np.ndarray,
    elo_samples: np.ndarray | None,
    tokens_samples: np.ndarray | None,
    level: float = 0.95,
) -> pl.DataFrame:
    """Rows by tokens/task ascending; deltas against the previous (next-cheaper) row.

    d_elo = elo - prev_elo; d_elo_per_1k = d_elo / (tokens - prev_tokens) * 1000 (null when the token
    difference is not positive); frontier = no strictly cheaper arm has a strictly higher Elo.
    *_lo/*_hi: percentile interval at `level` over bootstrap rounds (null without samples); when
    tokens_samples is None the point tokens are used in every round.
    """
    tokens, elo, es, ts = _validate(
        arms, strategies, budgets, tokens_per_task, elo, elo_samples, tokens_samples, level
    )
    order = np.argsort(tokens, kind="stable")
    prev = np.concatenate([[-1], order[:-1]]) if order.size else order
    return _build(arms, strategies, budgets, tokens, elo, es, ts, level, order, prev)


def per_strategy_table(
    arms: list[str],
    strategies: list[str],
    budgets: list[int],
    tokens_per_task: np.ndarray,
    elo: np.ndarray,
    elo_samples: np.ndarray | None,
    tokens_samples: np.ndarray | None,
    level: float = 0.95,
) -> pl.DataFrame:
    """Each budget against the previous (smaller) budget of the same strategy; same columns as
    returns_table (frontier is still the global frontier). Strategies are listed cheapest first."""
    tokens, elo, es, ts = _validate(
        arms, strategies, budgets, tokens_per_task, elo, elo_samples, tokens_samples, level
    )
    strat = np.asarray(strategies, dtype=object)
    names, inv = np.unique(strat.astype(str), return_inverse=True)
    cheapest = np.full(names.size, np.inf)
    np.minimum.at(cheapest, inv, np.nan_to_num(tokens, nan=np.inf))
    rank = np.argsort(np.argsort(cheapest, kind="stable"), kind="stable")[inv]
    order = np.lexsort((tokens, np.asarray(budgets), rank))
    same = np.concatenate([[False], inv[order][1:] == inv[order][:-1]]) if order.size else order.astype(bool)
    prev = np.where(same, np.concatenate([[-1], order[:-1]]) if order.size else order, -1)
    return _build(arms, strategies, budgets, tokens, elo, es, ts, level, order, prev)


def family_dominance(
    per_family_theta: Mapping[str, np.ndarray],
    weights: Mapping[str, float],
    arms: Sequence[str],
    threshold: float = 0.6,
    *,
    anchor: int = 0,
    min_gain_elo: float = 1.0,
) -> list[str]:
    """Warnings for arms whose weighted global gain over `anchor` comes mostly from one family.

    For arm k, family f contributes c_f = w_f * (theta_f[k] - theta_f[anchor]) / sum of w over families
    that observed both arms (the same renormalisation as merge_thetas). A warning is raised when some
    c_f / sum(c) > threshold, provided at least two weighted families observed the arm and the global
    gain is at least `min_gain_elo` Elo in size (a near-zero gain makes shares meaningless).
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    fams = [f for f in per_family_theta if float(weights.get(f, 0.0)) > 0]
    k = len(arms)
    if not fams:
        return []
    th = np.stack([np.asarray(per_family_theta[f], dtype=float) for f in fams])  # [F, K]
    if th.shape[1] != k:
        raise ValueError(f"per-family theta vectors must have {k} entries")
    w = np.array([float(weights[f]) for f in fams])
    diff = th - th[:, anchor : anchor + 1]  # NaN where the family lacks the arm or the anchor
    seen = ~np.isnan(diff)
    den = (w[:, None] * seen).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        contrib = np.where(seen, w[:, None] * np.nan_to_num(diff), 0.0) / np.where(den > 0, den, 1.0)
    gain = contrib.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = contrib / np.where(gain != 0, gain, 1.0)
    eligible = (seen.sum(axis=0) >= 2) & (np.abs(gain) * ELO_SCALE >= min_gain_elo)
    eligible[anchor] = False
    top = np.argmax(np.where(seen, share, -np.inf), axis=0)
    top_share = share[top, np.arange(k)]
    flagged = np.nonzero(eligible & (top_share > threshold))[0]
    return [
        f"{arms[i]}: family '{fams[top[i]]}' supplies {top_share[i]:.0%} of its weighted gain over "
        f"{arms[anchor]} ({gain[i] * ELO_SCALE:+.0f} Elo)"
        # Over 100% means the other families pull the arm down: the global gain hides a loss there.
        + (" while other families lose" if top_share[i] > 1 else "")
        + "; check the per-family view before trusting the global Elo"
        for i in flagged
    ]
