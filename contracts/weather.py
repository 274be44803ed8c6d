"""Provider weather across Celery workers: each worker process reports its provider client's cumulative figures
(egress.client.ProviderClient.weather: 429s, pauses, rate-limit waits, retries, outages) into one Redis hash
per profile after every job; the coordinator reads the hash when its sweep starts and when it ends, and the
sweep's weather is the difference (coordinator.weather.weather_line prints it, as for a local sweep).

An outage under way is reported apart, as it happens (a job does not end while its provider is down): each
worker process's `egress.outage.Outage` stores when it began, what it is and the patience in
`ept:outage:<profile>` when it begins and at each failed probe, and deletes it when the provider answers; the
coordinator's progress line reads the earliest live one (`read_outage`)."""

from __future__ import annotations

import json
import math
import time
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


# A worker's outage report older than this is not shown (the worker died mid-outage, or lost the broker): a
# worker in an outage probes at least every egress.outage.PROBE_CAP_S and rewrites its report each time.
OUTAGE_FRESH_S = 30.0


def outage_key(profile: str) -> str:
    """The Redis hash where a profile's workers report the outage they are waiting out.

    Args:
        profile: the profile's name.
    """
    return f"ept:outage:{profile}"


def report_outage(r: Any, profile: str, worker: str, state: dict[str, Any] | None) -> None:
    """Store this worker's outage under way, or clear it.

    Args:
        r: a Redis client on the broker.
        profile: the profile's name.
        worker: this worker's name (one report per worker).
        state: since (epoch s), what, patience (s); None: the outage ended.
    """
    key = outage_key(profile)
    if state is None:
        r.hdel(key, worker)
        return
    pipe = r.pipeline(transaction=False)
    pipe.hset(key, worker, json.dumps({**state, "seen": time.time()}))
    pipe.expire(key, 3600)
    pipe.execute()


def _outage(doc: Any, now: float) -> dict[str, Any] | None:
    """One report checked (the broker may hold anything): a fresh one with a sane start, kind and patience."""
    if not isinstance(doc, dict):
        return None
    nums = [doc.get(k) for k in ("since", "seen", "patience")]
    if not all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in nums):
        return None
    since, seen, patience = (float(x) for x in nums)  # type: ignore[arg-type]  # checked just above
    what = doc.get("what")
    if not isinstance(what, str) or not 0 <= now - seen <= OUTAGE_FRESH_S or not 0 <= patience < 1e7:
        return None
    kind = "".join(c if c.isalnum() or c == " " else "?" for c in what[:40])
    return {"since": since, "what": kind, "patience": patience}


def read_outage(r: Any, profile: str, now: float | None = None) -> dict[str, Any] | None:
    """The outage the profile's workers are waiting out now: the earliest start among the fresh reports, or
    None (no worker reports one).

    Args:
        r: a Redis client on the broker (its contents are untrusted: malformed reports are passed over).
        profile: the profile's name.
        now: the clock (epoch s) reports are aged against; None: now.
    """
    now = time.time() if now is None else now
    best: dict[str, Any] | None = None
    for i, (_k, v) in enumerate(r.hscan_iter(outage_key(profile), count=500)):
        if i >= MAX_WORKERS:
            break
        try:
            doc = _outage(json.loads(v), now)
        except (ValueError, TypeError, RecursionError):
            continue
        if doc is not None and (best is None or doc["since"] < best["since"]):
            best = doc
    return best
