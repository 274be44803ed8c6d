"""The sweep's provider weather in one line: 429s, shared pauses, rate-limit waits, retries and outages.

The sweep summary and `ept status` (from the session's manifest entry) print this same line; a manifest read
back may hold anything, so every field is checked here.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["weather_line"]


def _num(v: Any) -> float:
    """A finite number from a weather field (a manifest read back may hold anything): else 0."""
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and abs(v) < 1e15
    return float(v) if ok else 0.0


def weather_line(w: dict[str, Any] | None) -> str | None:
    """The sweep's rate-limit, outage and retry figures in one line (None when there were none): 429s, pauses,
    time blocked by the limiter, retries by class and their backoff (times summed over the worker threads),
    outages and the time the provider was down. The sweep summary and `ept status` print this same line."""
    if not isinstance(w, dict):
        return None
    raw = w.get("retries")
    # Class names as words only: a manifest read back may hold newlines or markup in its keys.
    retries = (
        {re.sub(r"[^\w-]", "?", str(k))[:40]: int(_num(n)) for k, n in raw.items()}
        if isinstance(raw, dict)
        else {}
    )
    n429, pauses, outages = (int(_num(w.get(k))) for k in ("rate_limited", "pauses", "outages"))
    if not (n429 or pauses or any(retries.values()) or outages or _num(w.get("limiter_wait_s")) >= 1):
        return None
    by_class = ", ".join(f"{cls} {n}" for cls, n in sorted(retries.items()))
    return (
        f"provider weather: {n429} answered 429 · {pauses} shared pause(s) · "
        f"{_num(w.get('limiter_wait_s')):.1f}s waiting for the rate limit · {sum(retries.values())} retries"
        + (f" ({by_class}, {_num(w.get('retry_wait_s')):.1f}s backing off)" if retries else "")
        + " (times summed over threads)"
        + (
            f" · {outages} outage(s), {_num(w.get('outage_s')):.1f}s with the provider down"
            if outages
            else ""
        )
    )
