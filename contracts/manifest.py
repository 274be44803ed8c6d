"""What a run's manifest tells the analysis: the settings its table was computed with, as plain data.

The coordinator writes `manifest["analysis"]` = {"weights": {family: weight}, "anchor": arm or null,
"rounds": bootstrap rounds, "seed": int, "prices": "in=…,out=…[,cached=…]" or null} when a session starts;
`ept report RUN` starts from it. The prices come from the run's profile, as `ept sweep` used them.
"""

from __future__ import annotations

from typing import Any

MAX_BOOTSTRAP_ROUNDS = 100_000
MAX_SEED = 2**63 - 1  # sent to the provider as a JSON integer


def profile_prices(profile: dict[str, Any]) -> str | None:
    """The profile's prices as AnalysisOptions.prices ('in=…,cached=…,out=…'), None unless in and out are set.

    Args:
        profile: The profile as recorded in the manifest (its `prices` table, if any).
    """
    pi, po, pc = (profile.get(k) for k in ("price_in_per_1m", "price_out_per_1m", "price_cached_in_per_1m"))
    if pi is None or po is None:
        return None
    return f"in={pi},out={po}" + (f",cached={pc}" if pc is not None else "")


def weights_option(weights: dict[str, float]) -> str | None:
    """Family weights as AnalysisOptions.weights ('fam=w,…', sorted), None when there are none.

    Args:
        weights: Family -> weight.
    """
    return ",".join(f"{k}={v}" for k, v in sorted(weights.items())) or None
