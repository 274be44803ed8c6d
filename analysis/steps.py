"""The rows every returns table shares: each arm against a predecessor arm, with ΔElo, Δtokens, ΔElo per 1k
tokens, their intervals and the frontier columns (`step_table`).

analysis.returns (next-cheaper arm, per strategy, vs the frontier) and analysis.frontier (the headline
table) choose the row order and the predecessors; this module computes the columns. Intervals are
percentile intervals of the same quantity recomputed in every bootstrap round with the row order fixed by
the point estimate. ΔElo per 1k tokens is reported only where the token step is resolved (its interval
excludes 0); see docs/statistics.md.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.analysis.curve import ArmCurve, frontier_probability

__all__ = ["RATIO_NOISE", "RATIO_SPREAD", "STEP_MIN", "per_1k_rounds", "step_table"]

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
# Appended after `frontier`, so the older columns keep their positions.
_EXTRA_COLS = ["d_tokens", "d_tokens_lo", "d_tokens_hi", "frontier_prob"]

# When ΔElo per 1k tokens is a number (docs/statistics.md). A token step below STEP_MIN of the
# row's cost is noise in any real run even when measured exactly (a 0.9% step turns ±10 Elo into ±1000
# per 1k). A ratio whose interval is RATIO_SPREAD times its own size, and over RATIO_NOISE times the
# width ΔElo alone would give (ΔElo's interval over the point step), owes its width to the token step.
STEP_MIN = 0.03
RATIO_SPREAD = 10.0
RATIO_NOISE = 2.0


def _per_1k(d_elo: NDArray[np.float64], d_tok: NDArray[np.float64]) -> NDArray[np.float64]:
    # Undefined (NaN -> null) when the row is not more expensive than its predecessor.
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio: NDArray[np.float64] = np.where(
            d_tok > 0, d_elo / np.where(d_tok > 0, d_tok, 1.0) * 1000.0, np.nan
        )
    return ratio


def per_1k_rounds(d_elo: NDArray[np.float64], d_tok: NDArray[np.float64]) -> NDArray[np.float64]:
    """ΔElo per 1k tokens in each bootstrap round, for an interval.

    A round whose token step is <= 0 is not dropped (that would select the rounds that agree with the
    point estimate) but counted at the end its ΔElo points to: the ratio of a step that shrinks to 0 goes
    to +inf (ΔElo > 0) or -inf (ΔElo < 0); 0/0 stays NaN.

    Args:
        d_elo: ΔElo per round (any shape, typically [R, K]).
        d_tok: the token step per round, the same shape.

    Returns:
        d_elo / d_tok * 1000 with the rule above, the same shape.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(d_tok > 0, d_elo / np.where(d_tok > 0, d_tok, 1.0) * 1000.0, np.nan)
    edge = ~(d_tok > 0) & ~np.isnan(d_tok)
    with np.errstate(invalid="ignore"):
        out: NDArray[np.float64] = np.where(edge & (d_elo != 0), np.sign(d_elo) * np.inf, ratio)
    return out


def _or_none(cond: NDArray[np.bool_], values: NDArray[Any]) -> NDArray[np.object_]:
    """`values` where `cond`, else None (an object array; polars reads the None as null)."""
    # numpy's stubs do not accept None as np.where's `y`; at run time it gives an object array.
    out: NDArray[np.object_] = np.where(cond, values, None)  # type: ignore[call-overload]
    return out


def step_table(curve: ArmCurve, order: NDArray[np.intp], prev: NDArray[np.intp]) -> pl.DataFrame:
    """The table's rows `order`, row i compared with arm prev[i].

    Args:
        curve: the arms, their cost, Elo, rounds, level and frontier eligibility.
        order: [K] arm indices in row order.
        prev: [K] per row, the arm index it is compared with (-1: no predecessor, deltas null).

    Returns:
        One row per arm: arm, strategy, budget_n, tokens_per_task, elo and its interval, d_elo,
        d_elo_per_1k and their intervals, frontier, d_tokens and its interval, frontier_prob,
        per_1k_resolved, per_1k_nonpositive_rounds, per_1k_note (NaN as null).
    """
    tokens, elo = curve.tokens, curve.elo
    has_prev = prev >= 0
    p = np.where(has_prev, prev, 0)
    d_elo = np.where(has_prev, elo[order] - elo[p], np.nan)
    d_tok = np.where(has_prev, tokens[order] - tokens[p], np.nan)
    cols: dict[str, Any] = {  # column name -> values (arrays, or lists of strings)
        "arm": [curve.arms[i] for i in order],
        "strategy": [curve.strategies[i] for i in order],
        "budget_n": np.asarray(curve.budgets, dtype=np.int64)[order],
        "tokens_per_task": tokens[order],
        "elo": elo[order],
        "d_elo": d_elo,
        "d_elo_per_1k": _per_1k(d_elo, d_tok),
        "d_tokens": d_tok,
    }
    # No arms: nothing to take percentiles of (numpy's nanpercentile of a [R, 0] stack is not [2, 0]).
    if curve.elo_samples is not None and curve.k > 0:
        resolved, dropped, note = _interval_cols(cols, curve, curve.elo_samples, order, p, has_prev)
    else:
        nan = np.full(order.size, np.nan)
        for name in ("elo", "d_elo", "d_elo_per_1k", "d_tokens"):
            cols[f"{name}_lo"], cols[f"{name}_hi"] = nan, nan
        cols["frontier_prob"] = nan
        resolved = dropped = np.full(order.size, None, dtype=object)
        small = has_prev & ~(
            np.nan_to_num(d_tok) >= STEP_MIN * tokens[order]
        )  # no interval: the size rule only
        cols["d_elo_per_1k"] = np.where(small, np.nan, cols["d_elo_per_1k"])
        note = np.where(small & (np.nan_to_num(d_tok) > 0), _step_text(d_tok, tokens[order]), "")
    cols["frontier"] = curve.frontier()[order]
    df = pl.DataFrame(cols).with_columns(
        pl.Series("per_1k_resolved", resolved.tolist(), dtype=pl.Boolean),
        pl.Series("per_1k_nonpositive_rounds", dropped.tolist(), dtype=pl.Int64),
        pl.Series("per_1k_note", [n or None for n in np.asarray(note).tolist()], dtype=pl.String),
    )
    return _columns(df)


def _interval_cols(
    cols: dict[str, Any],
    curve: ArmCurve,
    es: NDArray[np.float64],
    order: NDArray[np.intp],
    p: NDArray[np.intp],
    has_prev: NDArray[np.bool_],
) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any]]:
    """Adds the *_lo/*_hi and frontier_prob columns from the rounds `es` (curve.elo_samples) to `cols`
    and nulls the ratios whose token step is not resolved; returns per row (per_1k_resolved,
    per_1k_nonpositive_rounds, note), None on rows without a predecessor."""
    ts = np.broadcast_to(curve.tokens, es.shape) if curve.tokens_samples is None else curve.tokens_samples
    d_es = np.where(has_prev, es[:, order] - es[:, p], np.nan)
    d_ts = np.where(has_prev, ts[:, order] - ts[:, p], np.nan)
    ranges = {
        "elo": es[:, order],
        "d_elo": d_es,
        "d_elo_per_1k": per_1k_rounds(d_es, d_ts),
        "d_tokens": d_ts,
    }
    q = [100 * (1 - curve.level) / 2, 100 * (1 + curve.level) / 2]
    for name, samples in ranges.items():
        with warnings.catch_warnings():
            # All-NaN columns (the first row's deltas) legitimately give NaN -> null.
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = np.nanpercentile(samples, q, axis=0)
        cols[f"{name}_lo"], cols[f"{name}_hi"] = lo, hi
    # The ratio is a number only where the token step is resolved: its own interval excludes 0 (and
    # the ratio's bounds are finite). Elsewhere it is null and `per_1k_resolved` says why.
    note = _ratio_notes(cols, has_prev, curve.tokens[order])
    ok = has_prev & (note == "")
    for name in ("d_elo_per_1k", "d_elo_per_1k_lo", "d_elo_per_1k_hi"):
        cols[name] = np.where(ok, cols[name], np.nan)
    elig = curve.eligible
    masked = np.where(elig, es, np.nan)
    cols["frontier_prob"] = np.where(elig, frontier_probability(masked, ts), np.nan)[order]
    dropped = _or_none(has_prev, np.sum(~(d_ts > 0) & ~np.isnan(d_ts), axis=0))
    return _or_none(has_prev, ok), dropped, note


def _columns(df: pl.DataFrame) -> pl.DataFrame:
    """The table's columns in their published order, NaN as null."""
    return df.select(
        "arm",
        "strategy",
        "budget_n",
        *[pl.col(c).cast(pl.Float64).fill_nan(None) for c in _FLOAT_COLS],
        "frontier",
        *[pl.col(c).cast(pl.Float64).fill_nan(None) for c in _EXTRA_COLS],
        "per_1k_resolved",
        "per_1k_nonpositive_rounds",
        "per_1k_note",
    )


def _step_text(d_tok: NDArray[np.float64], tokens: NDArray[np.float64]) -> NDArray[np.object_]:
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = 100.0 * d_tok / tokens
    return np.array([f"token step {p:.1f}% of cost" for p in np.nan_to_num(pct)], dtype=object)


def _ratio_notes(
    cols: dict[str, Any], has_prev: NDArray[np.bool_], tokens: NDArray[np.float64]
) -> NDArray[np.object_]:
    """Why a row's ΔElo per 1k is not a number ('' where it is): the token step's interval includes 0,
    the step is below STEP_MIN of the cost, or the ratio's interval is many times its value because of
    the token step (see the constants)."""
    d_tok, lo, hi = cols["d_tokens"], cols["d_elo_per_1k_lo"], cols["d_elo_per_1k_hi"]
    with np.errstate(invalid="ignore", divide="ignore"):
        width = hi - lo
        natural = (cols["d_elo_hi"] - cols["d_elo_lo"]) / d_tok * 1000.0
        spread = (width > RATIO_SPREAD * np.abs(cols["d_elo_per_1k"])) & (width > RATIO_NOISE * natural)
    note = np.full(d_tok.shape, "", dtype=object)
    note[spread] = "ratio interval many times its value"
    small = ~(np.nan_to_num(d_tok) >= STEP_MIN * tokens) & (np.nan_to_num(d_tok) > 0)
    note[small] = _step_text(d_tok, tokens)[small]
    unresolved = ~(cols["d_tokens_lo"] > 0) | ~np.isfinite(lo) | ~np.isfinite(hi)
    note[unresolved] = "token step unresolved"
    note[~has_prev] = ""
    return note
