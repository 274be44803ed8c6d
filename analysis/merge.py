"""Cross-family merge: centre theta per family, weighted sum, Elo.

Each family's theta is centred over the arms that family observed, because theta is only defined up to
the opponents it was measured against; the weighted sum of centred vectors is the seed's merge. Arms a
family did not observe are NaN in that family's vector; their global theta is the weighted mean over
the families that did observe them (weights renormalised per arm). See docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from contracts.errors import InputError

__all__ = ["ELO_BASE", "ELO_SCALE", "merge_thetas", "parse_weights", "theta_to_elo"]

ELO_SCALE = 400.0 / math.log(10.0)
ELO_BASE = 1000.0


def parse_weights(spec: str | None, families: Sequence[str]) -> dict[str, float]:
    """Family weights from "math=0.4,code=0.4,tool_use=0.2", normalised to sum 1.

    None or '' gives equal weights. Families present in the data but absent from the spec get weight 0
    (they are left out of the merge). Negative, non-finite or malformed items, unknown or repeated
    families, and an all-zero spec raise InputError(field='--weights').
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


def merge_thetas(thetas: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """Weighted merge of per-family theta vectors (shape [..., K]; NaN = arm not observed by the family).

    Each vector is centred over its observed arms, then global[k] = sum_f w_f * c_f[k] / sum_f w_f over
    the families f with w_f > 0 that observed arm k. With every arm observed everywhere and weights
    summing to 1 this is exactly the seed's sum_f w_f * centred_f. An arm no weighted family observed is NaN.
    """
    num = None
    den = None
    for fam, theta in thetas.items():
        w = float(weights.get(fam, 0.0))
        if w < 0 or not math.isfinite(w):
            raise ValueError(f"weight for family {fam!r} must be finite and >= 0")
        if w == 0:
            continue
        t = np.asarray(theta, dtype=float)
        obs = ~np.isnan(t)
        n_obs = obs.sum(axis=-1, keepdims=True)
        mean = np.where(n_obs > 0, np.nansum(t, axis=-1, keepdims=True) / np.maximum(n_obs, 1), 0.0)
        centred = np.where(obs, t - mean, 0.0)
        num = w * centred if num is None else num + w * centred
        den = w * obs if den is None else den + w * obs
    if num is None:
        raise ValueError("no family with a positive weight to merge")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def theta_to_elo(theta: np.ndarray, anchor: int | None = None) -> np.ndarray:
    """Elo = 1000 + 400/ln10 * theta; with `anchor`, shifted so arm `anchor` is exactly 1000 (per row)."""
    theta = np.asarray(theta, dtype=float)
    if anchor is not None:
        k = theta.shape[-1]
        if not -k <= anchor < k:
            raise ValueError(f"anchor {anchor} is not an arm index in [0, {k})")
        theta = theta - theta[..., anchor : anchor + 1]
    return ELO_BASE + ELO_SCALE * theta
