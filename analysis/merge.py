"""Cross-family merge: one global theta plus an offset per family (weighted least squares), Elo.

A family's theta is only defined up to the opponents it was measured against, so families are not
centred separately (that mixes zero points when families observe different arms); the merge fits a
zero-point offset per family from the arms the families share. With every arm observed everywhere this
is the weighted sum of centred vectors, sum_f w_f * centred_f. See docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from elo_per_token.contracts.errors import InputError

__all__ = ["ELO_BASE", "ELO_SCALE", "merge_fit", "merge_thetas", "parse_weights", "theta_to_elo"]

ELO_SCALE = 400.0 / math.log(10.0)
ELO_BASE = 1000.0


def parse_weights(spec: str | None, families: Sequence[str]) -> dict[str, float]:
    """Family weights from "math=0.4,code=0.4,tool_use=0.2", normalised to sum 1.

    None or '' gives equal weights. Families present in the data but absent from the spec get weight 0
    (they are left out of the merge). Negative, non-finite or malformed items, unknown or repeated
    families, and an all-zero spec raise InputError(field='--weights').

    Args:
        spec: "fam=w,..." (None or '': equal weights).
        families: The families the data has (a weight for another is an InputError).
    """
    families = list(dict.fromkeys(families))
    if not families:
        raise InputError("no task families to weight", field="--weights")
    if spec is None or not spec.strip():
        return {f: 1.0 / len(families) for f in families}
    raw: dict[str, float] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise InputError(f"malformed item {item!r}; expected FAMILY=WEIGHT", field="--weights")
        try:
            w = float(value)
        except ValueError:
            raise InputError(f"weight {value!r} for {name!r} is not a number", field="--weights") from None
        if not math.isfinite(w) or w < 0:
            raise InputError(
                f"weight for {name!r} must be a finite number >= 0, got {value}", field="--weights"
            )
        if name not in families:
            raise InputError(
                f"unknown family {name!r}; families in the data: {', '.join(families)}", field="--weights"
            )
        if name in raw:
            raise InputError(f"family {name!r} is given twice", field="--weights")
        raw[name] = w
    total = sum(raw.values())
    if total <= 0:
        raise InputError(
            "all weights are zero; at least one family needs a positive weight", field="--weights"
        )
    return {f: raw.get(f, 0.0) / total for f in families}


def _weighted(
    thetas: Mapping[str, NDArray[np.float64]], weights: Mapping[str, float]
) -> tuple[list[str], list[NDArray[np.float64]], list[float]]:
    """(families, thetas, weights) of the families with a positive weight; a ValueError for a negative or
    non-finite weight, or when no family has a positive one."""
    fams, ys, ws = [], [], []
    for fam, theta in thetas.items():
        w = float(weights.get(fam, 0.0))
        if w < 0 or not math.isfinite(w):
            raise ValueError(f"weight for family {fam!r} must be finite and >= 0")
        if w == 0:
            continue
        fams.append(fam)
        ys.append(np.asarray(theta, dtype=float))
        ws.append(w)
    if not fams:
        raise ValueError("no family with a positive weight to merge")
    return fams, ys, ws


def merge_fit(
    thetas: Mapping[str, NDArray[np.float64]], weights: Mapping[str, float]
) -> tuple[NDArray[np.float64], dict[str, NDArray[np.float64]]]:
    """Weighted least-squares merge with one offset per family: (global theta [..., K], offsets).

    Each family's theta is only defined up to a constant (its zero point depends on the arms it
    observed), so the merge fits

        theta_f[k] = theta[k] + b_f + error          for every arm k that family f observed,

    minimising sum_f w_f sum_{k observed in f} (theta_f[k] - theta[k] - b_f)**2. A family's offset b_f is
    estimated from the arms it shares with the others, so which arms a family lacks moves no other arm
    (a clone of an arm observed in one family only comes out equal to the original). With every arm
    observed everywhere the solution (shifted to mean 0 over arms) is exactly the weighted sum of centred
    vectors, sum_f w_f * centred_f. Arms no positively weighted family observed are NaN; the result has mean 0
    over the arms that are not NaN. Works on stacks ([..., K]); each row is solved on its own pattern.

    Args:
        thetas: family -> its fitted theta [..., K] (NaN on the arms it did not observe).
        weights: family -> weight (a family weighted 0 or absent takes no part).
    """
    fams, ys, ws = _weighted(thetas, weights)
    y = np.stack(np.broadcast_arrays(*ys), axis=-2)  # [..., F, K]
    obs = ~np.isnan(y)
    y0 = np.where(obs, y, 0.0)
    wo = np.asarray(ws)[:, None] * obs  # [..., F, K] weight of each observed cell
    # Normal equations of the two-way additive model. Given the offsets, theta_k is the weighted mean of
    # y_fk - b_f over the families that observed k; substituting it leaves an F x F system for the
    # offsets (cost O(F*K + F**3) per row, so many arms stay cheap):
    #     (diag(m) - C) b = r,   m_f = sum_k W_fk,  C_gf = sum_k W_gk W_fk / n_k,
    #     r_g = sum_k W_gk (y_gk - ybar_k),  n_k = sum_f W_fk,  ybar_k = sum_f W_fk y_fk / n_k.
    n_k = wo.sum(axis=-2)  # [..., K]
    seen = n_k > 0
    inv_n = np.where(seen, 1.0 / np.where(seen, n_k, 1.0), 0.0)
    ybar = (wo * y0).sum(axis=-2) * inv_n  # [..., K]
    c = np.einsum("...gk,...fk,...k->...gf", wo, wo, inv_n)
    a = -c
    m = wo.sum(axis=-1)  # [..., F]
    idx = np.arange(len(fams))
    a[..., idx, idx] += m
    r = (wo * (y0 - ybar[..., None, :])).sum(axis=-1)
    # Singular along "add c to every offset" (absorbed by theta) and, if the families' arm sets split into
    # groups that share no arm, between groups; the pseudo-inverse picks one solution.
    b = (np.linalg.pinv(a, hermitian=True) @ r[..., None])[..., 0]  # [..., F]
    theta = np.where(seen, ybar - np.einsum("...fk,...f->...k", wo, b) * inv_n, np.nan)
    n_seen = seen.sum(axis=-1, keepdims=True)
    shift = np.nansum(theta, axis=-1, keepdims=True) / np.maximum(n_seen, 1)
    theta = theta - shift
    offsets = {f: b[..., i] + shift[..., 0] for i, f in enumerate(fams)}
    return theta, offsets


def merge_thetas(
    thetas: Mapping[str, NDArray[np.float64]], weights: Mapping[str, float]
) -> NDArray[np.float64]:
    """Weighted merge of per-family theta vectors (shape [..., K]; NaN = arm not observed by the family).

    See `merge_fit`: a least-squares fit of theta_f[k] = theta[k] + b_f, so the result does not depend
    on which arms a family lacks. With every arm observed everywhere it is exactly the weighted sum of
    centred vectors, sum_f w_f * centred_f (weights summing to 1). An arm no weighted family observed is NaN.

    Args:
        thetas: Family -> its centred theta [..., K] (NaN: arm not observed by the family).
        weights: Family -> weight (>= 0).
    """
    return merge_fit(thetas, weights)[0]


def theta_to_elo(theta: NDArray[np.float64], anchor: int | None = None) -> NDArray[np.float64]:
    """Elo = 1000 + 400/ln10 * theta; with `anchor`, shifted so arm `anchor` is exactly 1000 (per row).

    Args:
        theta: Centred strengths [..., K].
        anchor: The arm placed at exactly 1000 Elo (None: no shift).
    """
    theta = np.asarray(theta, dtype=float)
    if anchor is not None:
        k = theta.shape[-1]
        if not -k <= anchor < k:
            raise ValueError(f"anchor {anchor} is not an arm index in [0, {k})")
        theta = theta - theta[..., anchor : anchor + 1]
    return ELO_BASE + ELO_SCALE * theta
