"""The headline table's frontier: which arms may be on it, what each row is against, and the
frontier label as a band.

- Partial arms: an arm some positively weighted family never observed is placed on the global scale
  through the family offsets, which assume no family x arm interaction; one family gives no degrees of
  freedom to test that. Such an arm is marked with the families it was seen in ("math only"), kept off
  the global frontier (it neither sits on it nor dominates another arm), and its ΔElo is computed on the
  families it shares with the arm it is compared to (`shared_family_delta`).
- Rows: each row's ΔElo is against the previous arm ON the frontier (column `vs`), so a dominated arm
  in between does not inflate the next step.
- Bands: the bootstrap share of rounds in which an arm is on the frontier is not a probability (across
  random designs it is conservative in the middle, docs/statistics.md); it is printed as a band: on
  (>= ON_SHARE), off (<= OFF_SHARE) or uncertain, with the share.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.analysis.curve import ArmCurve, prev_on_frontier
from elo_per_token.analysis.merge import ELO_SCALE
from elo_per_token.analysis.steps import step_table

__all__ = [
    "OFF_SHARE",
    "ON_SHARE",
    "band",
    "families_seen",
    "headline_table",
    "seen_label",
    "shared_family_delta",
]

ON_SHARE = 0.95
OFF_SHARE = 0.05


def band(frontier: bool | None, share: float | None, partial: bool = False) -> str:
    """'on', 'uncertain' or 'off' from the bootstrap share (the point label without rounds).

    Args:
        frontier: The point estimate's frontier label (None: not computed).
        share: The share of bootstrap rounds with the arm on the frontier (None: no rounds).
        partial: The arm was seen by only some families (never on the frontier).
    """
    if partial:
        return "off (partial)"
    if share is None or share != share:
        return "on" if frontier else "off"
    if share >= ON_SHARE:
        return "on"
    if share <= OFF_SHARE:
        return "off"
    return "uncertain"


def families_seen(
    per_family_theta: Mapping[str, NDArray[np.float64]], weights: Mapping[str, float], arms: Sequence[str]
) -> dict[str, list[str]]:
    """Arm -> the positively weighted families that observed it, for the arms some such family did not.

    Args:
        per_family_theta: Family -> its centred point theta [K] (NaN: arm not observed).
        weights: Family -> weight.
        arms: The arm labels, in index order.
    """
    fams = [f for f, th in per_family_theta.items() if weights.get(f, 0.0) > 0]
    out = {}
    for k, arm in enumerate(arms):
        seen = [f for f in fams if not np.isnan(np.asarray(per_family_theta[f], dtype=float)[k])]
        if len(seen) < len(fams):
            out[arm] = seen
    return out


def seen_label(seen: Sequence[str]) -> str:
    """'math only', 'math+code only', 'no family'.

    Args:
        seen: The families that observed the arm.
    """
    return "+".join(seen) + " only" if seen else "no family"


def shared_family_delta(
    k: int,
    j: int,
    per_family_theta: Mapping[str, NDArray[np.float64]],
    round_theta: Mapping[str, NDArray[np.float64]] | None,
    weights: Mapping[str, float],
    level: float,
) -> tuple[float, float, float]:
    """ΔElo of arm k over arm j on the families both were observed in, each family's own difference
    weighted by the family weights renormalised over those families (no offset, so no assumption about
    the families they lack): (point, lo, hi); NaN where they share no family or without rounds.

    Args:
        k: The arm's index.
        j: The other arm's index.
        per_family_theta: Family -> its centred point theta [K] (NaN: arm not observed).
        round_theta: Family -> its bootstrap thetas [R, K] (None: no rounds).
        weights: Family -> weight.
        level: Interval level in (0.5, 1).
    """
    fams = [
        f
        for f, th in per_family_theta.items()
        if weights.get(f, 0.0) > 0 and not np.isnan(th[k]) and not np.isnan(th[j])
    ]
    if not fams:
        return np.nan, np.nan, np.nan
    w = np.array([weights[f] for f in fams])
    w = w / w.sum()
    point = float(
        ELO_SCALE
        * sum(wi * (per_family_theta[f][k] - per_family_theta[f][j]) for wi, f in zip(w, fams, strict=True))
    )
    if not round_theta:
        return point, np.nan, np.nan
    d = ELO_SCALE * sum(
        wi * (round_theta[f][:, k] - round_theta[f][:, j]) for wi, f in zip(w, fams, strict=True)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanpercentile(np.asarray(d), [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return point, float(lo), float(hi)


def headline_table(
    curve: ArmCurve,
    *,
    partial: Mapping[str, list[str]],
    per_family_theta: Mapping[str, NDArray[np.float64]],
    round_theta: Mapping[str, NDArray[np.float64]] | None,
    weights: Mapping[str, float],
) -> pl.DataFrame:
    """Rows by tokens per task; each row against the previous arm on the frontier of the arms observed in
    every weighted family (`vs`); partial arms are off that frontier and their ΔElo is over the shared
    families only (`seen_in` names them; their ΔElo per 1k is not reported: its tokens are over other
    families than its predecessor's).

    Args:
        curve: the arms, their cost and Elo, rounds and level; its `eligible` arms minus the partial ones
            may be on the frontier.
        partial: arm -> the families it was seen in, for the arms some weighted family never observed
            (families_seen).
        per_family_theta: family -> [K] the family's own strengths (NaN: not observed).
        round_theta: family -> [R, K] those strengths per bootstrap round, or None.
        weights: family -> weight.

    Returns:
        One row per arm: returns_table's columns, then vs, seen_in, frontier_band.
    """
    arms = curve.arms
    curve = replace(curve, eligible=curve.eligible & np.array([a not in partial for a in arms], dtype=bool))
    order = np.argsort(curve.tokens, kind="stable")
    prev = prev_on_frontier(order, curve.frontier())
    df = step_table(curve, order, prev)
    df = df.with_columns(
        pl.Series("vs", [arms[j] if j >= 0 else None for j in prev], dtype=pl.String),
        pl.Series(
            "seen_in",
            [seen_label(partial[arms[i]]) if arms[i] in partial else None for i in order],
            dtype=pl.String,
        ),
    )
    if partial:
        df = _partial_rows(
            df, arms, order, prev, partial, per_family_theta, round_theta, weights, curve.level
        )
    return df.with_columns(
        pl.Series(
            "frontier_band",
            [
                band(r["frontier"], r["frontier_prob"], r["seen_in"] is not None)
                for r in df.iter_rows(named=True)
            ],
            dtype=pl.String,
        )
    )


def _partial_rows(
    df: pl.DataFrame,
    arms: Sequence[str],
    order: NDArray[np.intp],
    prev: NDArray[np.intp],
    partial: Mapping[str, list[str]],
    per_family_theta: Mapping[str, NDArray[np.float64]],
    round_theta: Mapping[str, NDArray[np.float64]] | None,
    weights: Mapping[str, float],
    level: float,
) -> pl.DataFrame:
    """Partial arms' rows: ΔElo on the shared families, no ratio (per_1k_note says why)."""
    cols = {
        c: df[c].to_list()
        for c in (
            "d_elo",
            "d_elo_lo",
            "d_elo_hi",
            "d_elo_per_1k",
            "d_elo_per_1k_lo",
            "d_elo_per_1k_hi",
            "per_1k_resolved",
            "per_1k_note",
        )
    }
    for pos, i in enumerate(order):
        if arms[i] not in partial or prev[pos] < 0:
            continue
        d = shared_family_delta(int(i), int(prev[pos]), per_family_theta, round_theta, weights, level)
        for c, v in zip(("d_elo", "d_elo_lo", "d_elo_hi"), d, strict=True):
            cols[c][pos] = None if v != v else v
        for c in ("d_elo_per_1k", "d_elo_per_1k_lo", "d_elo_per_1k_hi"):
            cols[c][pos] = None
        cols["per_1k_resolved"][pos] = False
        cols["per_1k_note"][pos] = "partial arm: ΔElo on shared families only"
    return df.with_columns(pl.Series(c, v, dtype=df.schema[c]) for c, v in cols.items())
