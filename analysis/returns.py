"""Diminishing-returns tables (ΔElo and ΔElo per 1k tokens between arms ordered by cost), frontier
probability and the heterogeneity warning.

Each row is compared with a predecessor: the next-cheaper arm (`returns_table`), the previous budget
of the same strategy (`per_strategy_table`) or the next-cheaper arm on the frontier
(`frontier_steps_table`). Intervals are percentile intervals of the same quantity recomputed in every
bootstrap round with the row order fixed by the point estimate. ΔElo per 1k tokens is reported only
where the token step is resolved (its interval excludes 0); see docs/statistics.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
from numpy.typing import ArrayLike

from elo_per_token.analysis.level import check_level
from elo_per_token.analysis.merge import ELO_SCALE

__all__ = [
    "family_heterogeneity",
    "frontier_probability",
    "frontier_steps_table",
    "per_1k_rounds",
    "per_strategy_table",
    "returns_table",
]

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


def _validate(
    arms: Sequence[str],
    strategies: Sequence[str],
    budgets: Sequence[int],
    tokens_per_task: ArrayLike,
    elo_points: ArrayLike,
    elo_samples: ArrayLike | None,
    tokens_samples: ArrayLike | None,
    level: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    k = len(arms)
    if not (len(strategies) == len(budgets) == k):
        raise ValueError("arms, strategies and budgets must have the same length")
    tokens = np.asarray(tokens_per_task, dtype=float)
    elo = np.asarray(elo_points, dtype=float)
    if tokens.shape != (k,) or elo.shape != (k,):
        raise ValueError(f"tokens_per_task and elo must have shape [{k}]")
    check_level(level)  # LevelError is a ValueError too
    out: list[np.ndarray | None] = []
    for name, s in (("elo_samples", elo_samples), ("tokens_samples", tokens_samples)):
        arr = None
        if s is not None:
            arr = np.asarray(s, dtype=float)
            if arr.ndim != 2 or arr.shape[1] != k:
                raise ValueError(f"{name} must have shape [R, {k}]")
        out.append(arr)
    if out[0] is not None and out[1] is not None and out[0].shape != out[1].shape:
        raise ValueError("elo_samples and tokens_samples must have the same number of rounds")
    return tokens, elo, out[0], out[1]


def _per_1k(d_elo: np.ndarray, d_tok: np.ndarray) -> np.ndarray:
    # Undefined (NaN -> null) when the row is not more expensive than its predecessor.
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio: np.ndarray = np.where(d_tok > 0, d_elo / np.where(d_tok > 0, d_tok, 1.0) * 1000.0, np.nan)
    return ratio


def per_1k_rounds(d_elo: np.ndarray, d_tok: np.ndarray) -> np.ndarray:
    """Per-round ratio for an interval: a round whose token step is <= 0 is not dropped (that would select
    the rounds that agree with the point estimate) but counted at the end its ΔElo points to: the ratio
    of a step that shrinks to 0 goes to +inf (ΔElo > 0) or -inf (ΔElo < 0); 0/0 stays NaN."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(d_tok > 0, d_elo / np.where(d_tok > 0, d_tok, 1.0) * 1000.0, np.nan)
    edge = ~(d_tok > 0) & ~np.isnan(d_tok)
    with np.errstate(invalid="ignore"):
        out: np.ndarray = np.where(edge & (d_elo != 0), np.sign(d_elo) * np.inf, ratio)
    return out


def _frontier(tokens: np.ndarray, elo: np.ndarray) -> np.ndarray:
    """True where no other arm is at least as cheap and at least as strong, and strictly better in one
    of the two (weakly dominated arms are off the frontier). NaN Elo or tokens is never on it. Works on
    stacks ([..., K]: one frontier per bootstrap round)."""
    t_le = tokens[..., None, :] <= tokens[..., :, None]  # [.., i, j]: arm j at most as costly as arm i
    e_ge = elo[..., None, :] >= elo[..., :, None]
    strict = (tokens[..., None, :] < tokens[..., :, None]) | (elo[..., None, :] > elo[..., :, None])
    dominated = np.any(t_le & e_ge & strict, axis=-1)
    on: np.ndarray = ~dominated & ~np.isnan(elo) & ~np.isnan(tokens)
    return on


def frontier_probability(elo_samples: np.ndarray, tokens_samples: np.ndarray) -> np.ndarray:
    """Share of bootstrap rounds in which each arm is on that round's frontier ([K]); rounds where an arm's
    Elo or tokens are NaN count as off."""
    tok, elo = np.asarray(tokens_samples, dtype=float), np.asarray(elo_samples, dtype=float)
    # _frontier compares every pair of arms: [rounds, K, K] booleans. Chunks of rounds keep that near 32M
    # booleans per temporary for many arms (1,000 arms x 200 rounds would be 200M each); same result.
    step = max(1, 2**25 // max(1, tok.shape[-1]) ** 2)
    if tok.ndim < 2 or tok.shape[0] <= step:
        share: np.ndarray = _frontier(tok, elo).mean(axis=0)
        return share
    on = [_frontier(tok[i : i + step], elo[i : i + step]) for i in range(0, tok.shape[0], step)]
    share = np.concatenate(on).mean(axis=0)
    return share


def _or_none(cond: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`values` where `cond`, else None (an object array; polars reads the None as null)."""
    # numpy's stubs do not accept None as np.where's `y`; at run time it gives an object array.
    out: np.ndarray = np.where(cond, values, None)  # type: ignore[call-overload]
    return out


def _build(
    arms: Sequence[str],
    strategies: Sequence[str],
    budgets: Sequence[int],
    tokens: np.ndarray,
    elo: np.ndarray,
    es: np.ndarray | None,
    ts: np.ndarray | None,
    level: float,
    order: np.ndarray,
    prev: np.ndarray,
    eligible: np.ndarray | None = None,
) -> pl.DataFrame:
    """Rows `order`; row i is compared with arm prev[i] (-1 = no predecessor). eligible [K]: arms that may
    be on the frontier (default all); the others are never on it, dominate nothing, frontier_prob null."""
    elig = np.ones(tokens.shape, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    has_prev = prev >= 0
    p = np.where(has_prev, prev, 0)
    d_elo = np.where(has_prev, elo[order] - elo[p], np.nan)
    d_tok = np.where(has_prev, tokens[order] - tokens[p], np.nan)
    cols: dict[str, Any] = {  # column name -> values (arrays, or lists of strings)
        "arm": [arms[i] for i in order],
        "strategy": [strategies[i] for i in order],
        "budget_n": np.asarray(budgets, dtype=np.int64)[order],
        "tokens_per_task": tokens[order],
        "elo": elo[order],
        "d_elo": d_elo,
        "d_elo_per_1k": _per_1k(d_elo, d_tok),
        "d_tokens": d_tok,
    }
    q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
    nan = np.full(order.size, np.nan)
    resolved = np.full(order.size, None, dtype=object)
    dropped = np.full(order.size, None, dtype=object)
    if es is not None:
        ts = np.broadcast_to(tokens, es.shape) if ts is None else ts
        d_es = np.where(has_prev, es[:, order] - es[:, p], np.nan)
        d_ts = np.where(has_prev, ts[:, order] - ts[:, p], np.nan)
        ranges = {
            "elo": es[:, order],
            "d_elo": d_es,
            "d_elo_per_1k": per_1k_rounds(d_es, d_ts),
            "d_tokens": d_ts,
        }
        for name, samples in ranges.items():
            with warnings.catch_warnings():
                # All-NaN columns (the first row's deltas) legitimately give NaN -> null.
                warnings.simplefilter("ignore", RuntimeWarning)
                lo, hi = np.nanpercentile(samples, q, axis=0)
            cols[f"{name}_lo"], cols[f"{name}_hi"] = lo, hi
        # The ratio is a number only where the token step is resolved: its own interval excludes 0 (and
        # the ratio's bounds are finite). Elsewhere it is null and `per_1k_resolved` says why.
        note = _ratio_notes(cols, has_prev, tokens[order])
        ok = has_prev & (note == "")
        for name in ("d_elo_per_1k", "d_elo_per_1k_lo", "d_elo_per_1k_hi"):
            cols[name] = np.where(ok, cols[name], np.nan)
        resolved = _or_none(has_prev, ok)
        dropped = _or_none(has_prev, np.sum(~(d_ts > 0) & ~np.isnan(d_ts), axis=0))
        masked = np.where(elig, es, np.nan)
        cols["frontier_prob"] = np.where(elig, frontier_probability(masked, ts), np.nan)[order]
    else:
        for name in ("elo", "d_elo", "d_elo_per_1k", "d_tokens"):
            cols[f"{name}_lo"], cols[f"{name}_hi"] = nan, nan
        cols["frontier_prob"] = nan
        small = has_prev & ~(
            np.nan_to_num(d_tok) >= STEP_MIN * tokens[order]
        )  # no interval: the size rule only
        cols["d_elo_per_1k"] = np.where(small, np.nan, cols["d_elo_per_1k"])
        note = np.where(small & (np.nan_to_num(d_tok) > 0), _step_text(d_tok, tokens[order]), "")
    cols["frontier"] = _frontier(tokens, np.where(elig, elo, np.nan))[order]
    df = pl.DataFrame(cols).with_columns(
        pl.Series("per_1k_resolved", resolved.tolist(), dtype=pl.Boolean),
        pl.Series("per_1k_nonpositive_rounds", dropped.tolist(), dtype=pl.Int64),
        pl.Series("per_1k_note", [n or None for n in np.asarray(note).tolist()], dtype=pl.String),
    )
    return _columns(df)


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


def _step_text(d_tok: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = 100.0 * d_tok / tokens
    return np.array([f"token step {p:.1f}% of cost" for p in np.nan_to_num(pct)], dtype=object)


def _ratio_notes(cols: dict[str, Any], has_prev: np.ndarray, tokens: np.ndarray) -> np.ndarray:
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


def returns_table(
    arms: list[str],
    strategies: list[str],
    budgets: list[int],
    tokens_per_task: np.ndarray,
    elo: np.ndarray,
    elo_samples: np.ndarray | None,
    tokens_samples: np.ndarray | None,
    level: float = 0.95,
    eligible: np.ndarray | None = None,
) -> pl.DataFrame:
    """Rows by tokens/task ascending; deltas against the previous (next-cheaper) row.

    d_elo = elo - prev_elo; d_tokens = tokens - prev_tokens; d_elo_per_1k = d_elo / d_tokens * 1000, null
    when d_tokens is not positive and, with samples, when d_tokens' interval includes 0
    (per_1k_resolved = False; per_1k_nonpositive_rounds counts the rounds with a step <= 0, which enter
    the ratio's interval at +-inf). frontier = the point estimate is not weakly dominated; frontier_prob
    = share of bootstrap rounds in which it is not. *_lo/*_hi: percentile interval at `level` over
    bootstrap rounds (null without samples); when tokens_samples is None the point tokens are used in
    every round.
    """
    tokens, elo, es, ts = _validate(
        arms, strategies, budgets, tokens_per_task, elo, elo_samples, tokens_samples, level
    )
    order = np.argsort(tokens, kind="stable")
    prev = np.concatenate([[-1], order[:-1]]) if order.size else order
    return _build(arms, strategies, budgets, tokens, elo, es, ts, level, order, prev, eligible)


def per_strategy_table(
    arms: list[str],
    strategies: list[str],
    budgets: list[int],
    tokens_per_task: np.ndarray,
    elo: np.ndarray,
    elo_samples: np.ndarray | None,
    tokens_samples: np.ndarray | None,
    level: float = 0.95,
    eligible: np.ndarray | None = None,
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
    return _build(arms, strategies, budgets, tokens, elo, es, ts, level, order, prev, eligible)


def frontier_steps_table(
    arms: list[str],
    strategies: list[str],
    budgets: list[int],
    tokens_per_task: np.ndarray,
    elo: np.ndarray,
    elo_samples: np.ndarray | None,
    tokens_samples: np.ndarray | None,
    level: float = 0.95,
    eligible: np.ndarray | None = None,
) -> pl.DataFrame:
    """Rows as in returns_table, but each row against the next-cheaper arm ON the (point-estimate) frontier
    (column `vs`), so a dominated arm in between does not inflate the next arm's return. Frontier arms'
    rows are the steps along the frontier; an off-frontier arm's row says what it adds (or loses) over
    the frontier arm below it."""
    tokens, elo, es, ts = _validate(
        arms, strategies, budgets, tokens_per_task, elo, elo_samples, tokens_samples, level
    )
    order = np.argsort(tokens, kind="stable")
    elig = np.ones(tokens.shape, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    front = _frontier(tokens, np.where(elig, elo, np.nan))
    prev = np.full(order.size, -1)
    last = -1
    for pos, i in enumerate(order):  # K rows: a loop over arms, not over data
        prev[pos] = last
        if front[i]:
            last = i
    df = _build(arms, strategies, budgets, tokens, elo, es, ts, level, order, prev, eligible)
    return df.insert_column(3, pl.Series("vs", [arms[j] if j >= 0 else None for j in prev], dtype=pl.String))


def family_heterogeneity(
    point_theta: Mapping[str, np.ndarray],
    round_theta: Mapping[str, np.ndarray],
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
    offset fit and the rest retested, so one divergent arm does not make every arm look divergent. Only
    families with a positive weight count.
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
        res = _cochran_q(
            {f: np.where(out_set, np.nan, v) for f, v in y0.items()},
            y0,
            {f: np.where(out_set, np.nan, v) for f, v in yr.items()},
            yr,
            w,
        )
        q, df, p, views = res
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
    out = []
    for kk, qk, pk, dfk, view in flagged:
        out.append(
            f"{arms[kk]}: the families disagree about its strength beyond noise (heterogeneity test "
            f"chi2={qk:.1f}, df={dfk}, p={pk:.2g} < {alpha / n_tested:.2g}); each family's view vs their "
            f"precision-weighted mean, in Elo: {view}. The global Elo is a weighted average of different "
            "effects: check the per-family view before trusting it"
        )
    return out


def _cochran_q(
    fit0: Mapping[str, np.ndarray],
    y0: Mapping[str, np.ndarray],
    fitr: Mapping[str, np.ndarray],
    yr: Mapping[str, np.ndarray],
    w: Mapping[str, float],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
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
