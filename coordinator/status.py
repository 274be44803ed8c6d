"""`ept status` and `ept compact`: read a run's progress and records back from the ledger."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.jobs import Job
from elo_per_token.ledger import Ledger

# Written by the coordinator when it stops a Celery sweep because a queue has work and no consumer
# (coordinator.consumers): {"at": unix time, "message": why}.
STOP_BLOB = "coordinator-stopped.json"

if TYPE_CHECKING:  # analysis (polars) is imported only for a compacted run and by the compact command
    from elo_per_token.ledger.segments import CompactResult


@dataclass
class RunStatus:
    run_id: str
    run_url: str
    n_jobs: int | None
    done: int
    failed: dict[str, int]  # error class -> jobs whose last attempt failed (and have no result)
    failed_jobs: list[dict[str, Any]]
    manifest: dict[str, Any] | None
    # Jobs whose failure predates the run's latest session: that session queued them again, so they are
    # being retried (counted as pending), not failed.
    retrying: int = 0
    retrying_jobs: list[dict[str, Any]] = field(default_factory=list)
    # Why the latest session's coordinator stopped the sweep early (a queue nobody consumed), if it did.
    stopped: str | None = None

    @property
    def pending(self) -> int | None:
        if self.n_jobs is None:
            return None
        return max(0, self.n_jobs - self.done - sum(self.failed.values()))


def run_status(ledger: Ledger, run_id: str) -> RunStatus:
    manifest = ledger.get_manifest(run_id)
    done, has_result = _results(ledger, run_id)
    if manifest is None and not done:
        known = ", ".join(ledger.list_runs()[:20]) or "none"
        raise InputError(f"no run {run_id!r} in ledger {ledger.url} (runs: {known})", field="RUN")
    # A failure object left behind by a job that later succeeded is stale: the result wins.
    failures = ledger.list_failures(run_id)
    finished = has_result(list(failures))
    fails = {k: v for k, v in failures.items() if k not in finished}
    since = _last_session_start(manifest)
    retrying = {k: v for k, v in fails.items() if since is not None and float(v.get("at") or 0) < since}
    fails = {k: v for k, v in fails.items() if k not in retrying}
    return RunStatus(
        run_id=run_id,
        run_url=ledger.run_url(run_id),
        n_jobs=(manifest or {}).get("n_jobs"),
        done=done,
        failed=dict(Counter(str(f.get("class")) for f in fails.values())),
        failed_jobs=[{"key": k, **v} for k, v in sorted(fails.items())],
        manifest=manifest,
        retrying=len(retrying),
        retrying_jobs=[{"key": k, **v} for k, v in sorted(retrying.items())],
        stopped=_stopped(ledger, run_id, _session_start(manifest)),
    )


def _stopped(ledger: Ledger, run_id: str, since: float | None) -> str | None:
    """The stop message of this session's coordinator (an older session's stop was followed by a resume)."""
    import json

    raw = ledger.get_blob(run_id, STOP_BLOB)
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        at, message = float(doc["at"]), str(doc["message"])
    except (ValueError, KeyError, TypeError):
        return None
    return message if since is None or at >= since else None


def _session_start(manifest: dict[str, Any] | None) -> float | None:
    from datetime import datetime

    sessions = (manifest or {}).get("sessions") or []
    try:
        return datetime.fromisoformat(str(sessions[-1]["started_at"]).replace("Z", "+00:00")).timestamp()
    except (IndexError, KeyError, ValueError, TypeError):
        return None


def _results(ledger: Ledger, run_id: str) -> tuple[int, Callable[[list[str]], set[str]]]:
    """(jobs with a result, which of some keys have one). A compacted run is counted from its segment
    indexes plus the job objects no segment holds (found from the declared keys, as `ept analyze` finds
    them), not by listing every job object: on S3 a listing is one request per 1,000 keys."""
    import polars as pl

    from elo_per_token.ledger.segments import COMPACT_DIR

    if not ledger.list_blobs(run_id, COMPACT_DIR):
        jobs = ledger.list_jobs(run_id)
        return len(jobs), lambda keys: {k for k in keys if k in jobs}
    from elo_per_token.ledger.keyspace import unindexed_keys
    from elo_per_token.ledger.segments import read_index, segment_state

    index = read_index(ledger, run_id, segment_state(ledger, run_id).committed)
    tail = set(unindexed_keys(ledger, run_id, index)[0])
    indexed = index["job_key"]

    def has_result(keys: list[str]) -> set[str]:
        asked = pl.Series(keys, dtype=pl.String)
        return set(asked.filter(asked.is_in(indexed.implode())).to_list()) | (set(keys) & tail)

    return index.height + len(tail), has_result


def _last_session_start(manifest: dict[str, Any] | None) -> float | None:
    from datetime import datetime

    sessions = (manifest or {}).get("sessions") or []
    if len(sessions) < 2:  # one session: every failure is from it
        return None
    try:
        return datetime.fromisoformat(str(sessions[-1]["started_at"]).replace("Z", "+00:00")).timestamp()
    except (KeyError, ValueError):
        return None


def failed_jobs(status: RunStatus) -> list[Job]:
    """Jobs without a result whose last attempt failed (also those a later session may still be retrying)."""
    return [
        Job.from_dict(f["job"])
        for f in status.failed_jobs + status.retrying_jobs
        if isinstance(f.get("job"), dict)
    ]


def compact(ledger: Ledger, run_id: str, threads: int = 16) -> tuple[str, int]:
    """Fold the run's uncompacted job objects into a new segment; (where, records) as before segments."""
    res = compact_cmd(ledger, run_id)
    where = ", ".join(res.segments) or f"{ledger.run_url(run_id)}/compact (nothing new)"
    return where, res.rows


def compact_cmd(ledger: Ledger, run_id: str, *, rebuild: bool = False) -> CompactResult:
    """ledger.segments.compact_run with a progress line on stderr (a million objects take a while)."""
    import sys

    from elo_per_token.ledger.segments import compact_run

    last = [0.0]

    def progress(stage: str, done: int, total: int) -> None:
        import time

        now = time.monotonic()
        if sys.stderr.isatty() and now - last[0] > 0.5:
            last[0] = now
            sys.stderr.write(f"\r{stage} {done:,}" + (f" / {total:,}" if total else "") + " job objects   ")
            sys.stderr.flush()

    res = compact_run(ledger, run_id, rebuild=rebuild, on_progress=progress)
    if sys.stderr.isatty() and last[0]:
        sys.stderr.write("\n")
    return res


def run_endpoints(manifest: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The endpoints and models a run's sessions ran against, in order, with the sessions of each (1-based).
    Sessions of an ept before endpoints were recorded count under the manifest's profile."""
    m = manifest or {}
    prof: dict[str, Any] = m["profile"] if isinstance(m.get("profile"), dict) else {}
    out: dict[tuple[str, str], list[int]] = {}
    for i, sess in enumerate(m.get("sessions") or [], 1):
        sess = sess if isinstance(sess, dict) else {}
        key = (
            str(sess.get("endpoint") or prof.get("base_url") or "?"),
            str(sess.get("model") or prof.get("model") or "?"),
        )
        out.setdefault(key, []).append(i)
    return [{"endpoint": e, "model": mo, "sessions": s} for (e, mo), s in out.items()]


def last_stop(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """Why the run's last session stopped early ('budget', 'egress', 'interrupted'), with what it spent."""
    sessions = [s for s in (manifest or {}).get("sessions") or [] if isinstance(s, dict)]
    if not sessions or not sessions[-1].get("stopped"):
        return None
    last = sessions[-1]
    spent = sum(int(s.get("tokens") or 0) for s in sessions)
    return {"reason": last["stopped"], "tokens": spent, "cap": last.get("cap")}


def status_notes(manifest: dict[str, Any] | None) -> list[str]:
    """Lines for `ept status` about the run's endpoints and how its last session ended."""
    from elo_per_token.contracts.secrets import mask_url

    eps = run_endpoints(manifest)
    lines = [
        f"endpoint {mask_url(e['endpoint'])} · model {e['model']} · sessions {', '.join(map(str, e['sessions']))}"
        for e in eps
    ]
    if len(eps) > 1:
        lines.append(
            "[yellow]this run used more than one endpoint[/] (--allow-endpoint-change): see the sessions above"
        )
    stop = last_stop(manifest)
    if stop and stop["reason"] == "budget":
        cap = stop.get("cap") or {}
        caps = " / ".join(
            x
            for x in (
                f"{cap['max_tokens']:,} tokens" if cap.get("max_tokens") else "",
                f"${cap['max_cost']:g}" if cap.get("max_cost") else "",
            )
            if x
        )
        lines.append(
            f"stopped at its budget ({caps or 'cap'}): {stop['tokens']:,} tokens spent; the run is "
            "analysable as it stands, raise --max-tokens/--max-cost and rerun the sweep to continue"
        )
    elif stop:
        lines.append(
            f"last session stopped early ({stop['reason']}): rerun the sweep or `ept retry` to continue"
        )
    if (weather := last_weather(manifest)) is not None:
        lines.append(f"last session: {weather}")
    return lines


def last_weather(manifest: dict[str, Any] | None) -> str | None:
    """The last session's provider weather (429s, pauses, outages, retries) as the sweep summary printed it."""
    from rich.markup import escape

    from elo_per_token.contracts.errors import printable
    from elo_per_token.coordinator.weather import weather_line

    sessions = [s for s in (manifest or {}).get("sessions") or [] if isinstance(s, dict)]
    w = sessions[-1].get("weather") if sessions else None
    line = weather_line(w) if isinstance(w, dict) else None
    return escape(printable(line)) if line else None  # a manifest's class names reach a terminal as text
