"""Provider weather across Celery workers: each worker process reports its provider client's cumulative figures
(egress.client.ProviderClient.weather: 429s, pauses, rate-limit waits, retries, outages) into one Redis hash
per profile after every job; the coordinator reads the hash when its sweep starts and when it ends, and the
sweep's weather is the difference (coordinator.weather.weather_line prints it, as for a local sweep)."""

from __future__ import annotations

import json
import math
from typing import Any

TTL_S = 7 * 24 * 3600
MAX_WORKERS = 10_000  # reports read back at most (a hash grown past it is not read whole)
# The provider being down is one event every worker saw: the most any worker waited, not the sum.
_MAX_FIELDS = ("outages", "outage_s")
_SUM_FIELDS = ("rate_limited", "pauses", "limiter_wait_s", "retry_wait_s")


def weather_key(profile: str) -> str:
    """The broker's hash holding each worker's last weather report for `profile`.

    Args:
        profile: The provider profile's name.
    """
    return f"ept:weather:{profile}"


def report(r: Any, profile: str, worker: str, weather: dict[str, Any]) -> None:
    """Store this worker process's cumulative weather (overwrites its previous report).

    Args:
        r: A redis client on the broker.
        profile: The provider profile's name.
        worker: The worker process's name (a hash field).
        weather: Its cumulative counts and waits since it started.
    """
    key = weather_key(profile)
    pipe = r.pipeline(transaction=False)
    pipe.hset(key, worker, json.dumps(weather, default=str))
    pipe.expire(key, TTL_S)
    pipe.execute()


def _num(v: Any) -> float:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v < 1e15
    return float(v) if ok else 0.0


def read_reports(r: Any, profile: str) -> dict[str, dict[str, Any]]:
    """Every worker's last report for `profile` (unreadable ones skipped: the broker may hold anything).

    Args:
        r: A redis client on the broker.
        profile: The provider profile's name.
    """
    out: dict[str, dict[str, Any]] = {}
    for i, (k, v) in enumerate(r.hscan_iter(weather_key(profile), count=500)):
        if i >= MAX_WORKERS:
            break
        try:
            doc = json.loads(v)
        except (ValueError, TypeError, RecursionError):
            continue
        if isinstance(doc, dict):
            out[k.decode() if isinstance(k, bytes) else str(k)] = doc
    return out


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """One worker's figures over the sweep; counters lower than before are a restarted process: all new."""
    if any(_num(after.get(f)) < _num(before.get(f)) for f in (*_SUM_FIELDS, *_MAX_FIELDS)):
        before = {}
    d: dict[str, Any] = {f: _num(after.get(f)) - _num(before.get(f)) for f in (*_SUM_FIELDS, *_MAX_FIELDS)}
    ra, rb = after.get("retries"), before.get("retries")
    ra, rb = (ra if isinstance(ra, dict) else {}), (rb if isinstance(rb, dict) else {})
    d["retries"] = {str(c)[:40]: max(0.0, _num(n) - _num(rb.get(c))) for c, n in list(ra.items())[:100]}
    return d


def sweep_weather(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The sweep's weather from the reports at its start and end: counts and waits summed over the workers,
    outages the most any one worker saw.

    Args:
        before: read_reports at the sweep's start.
        after: read_reports at its end.
    """
    total: dict[str, Any] = {f: 0.0 for f in (*_SUM_FIELDS, *_MAX_FIELDS)}
    retries: dict[str, float] = {}
    for w, doc in after.items():
        d = _delta(before.get(w, {}), doc)
        for f in _SUM_FIELDS:
            total[f] += d[f]
        for f in _MAX_FIELDS:
            total[f] = max(total[f], d[f])
        for c, n in d["retries"].items():
            retries[c] = retries.get(c, 0.0) + n
    out = {**total, "retries": {c: int(n) for c, n in retries.items() if n}}
    for f in ("rate_limited", "pauses", "outages"):
        out[f] = int(out[f])
    return out
