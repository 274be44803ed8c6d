"""The call journal: a Celery worker's calls of a running attempt, on the broker, until they are in the ledger.

A worker killed mid-job (SIGKILL, OOM, a node lost) takes its in-memory call records with it; the job is
delivered again and its calls are paid for a second time, and the first ones are recorded nowhere (one kill
can lose tens of calls and tens of thousands of tokens). So each call, as it is recorded, is also appended to a Redis list for
its attempt (`ept:journal:<run>:<job key>:<attempt id>`, listed in the set `ept:journals:<run>:<job key>`).
When the attempt's calls are durable — a spent object named after the attempt, or the job's object — the
journal is dropped. The next delivery of the job, once it holds the job's claim (so no live worker is still
writing it), turns every journal left behind into a spent object `spent/<attempt id>.jsonl` (reason
"lost"), unless that object exists or the journal ends with the commit mark written just before the job's
object and that object exists.

Best effort by design: a broker that fails here never fails the job (the calls are still recorded the usual
way when the attempt ends); only a worker that dies AND a broker that lost the journal lose calls.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

    from elo_per_token.contracts.jobs import Job
    from elo_per_token.contracts.records import CallRecord
    from elo_per_token.ledger import Ledger

TTL_S = 7 * 24 * 3600
COMMIT = {"kind": "commit"}
# The most journal entries read back for one attempt (a strategy's calls per job are bounded far below this).
MAX_LINES = 100_000

_active: dict[tuple[str, str], tuple[CallJournal, str]] = {}
_active_lock = threading.Lock()


def _set_key(run_id: str, key: str) -> str:
    return f"ept:journals:{run_id}:{key}"


def _list_key(run_id: str, key: str, attempt: str) -> str:
    return f"ept:journal:{run_id}:{key}:{attempt}"


class CallJournal:
    """Journals of one worker process on one Redis (the broker)."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self._listed: set[str] = set()  # attempts already in their job's set (and their list given a TTL)
        self._lock = threading.Lock()

    def begin(self, job: Job) -> str:
        """A new attempt of `job`: its calls are journaled under the returned id until `end`."""
        attempt = uuid.uuid4().hex
        with _active_lock:
            _active[(job.run_id, job.key)] = (self, attempt)
        return attempt

    def _push(self, job: Job, attempt: str, line: dict[str, Any]) -> None:
        data = json.dumps(line, sort_keys=True, default=str)
        lk = _list_key(job.run_id, job.key, attempt)
        with self._lock:
            first = attempt not in self._listed
            self._listed.add(attempt)
        with contextlib.suppress(Exception):
            if not first:  # one round trip per call after the attempt's first
                self.r.rpush(lk, data)
                return
            pipe = self.r.pipeline(transaction=False)
            pipe.rpush(lk, data)
            pipe.expire(lk, TTL_S)
            pipe.sadd(_set_key(job.run_id, job.key), attempt)
            pipe.expire(_set_key(job.run_id, job.key), TTL_S)
            pipe.execute()

    def commit(self, job: Job, attempt: str) -> None:
        """Mark that the attempt's calls are about to become the job's object (written just before it)."""
        self._push(job, attempt, COMMIT)

    def end(self, job: Job, attempt: str) -> None:
        """The attempt's calls are in the ledger: drop its journal."""
        with _active_lock:
            if _active.get((job.run_id, job.key), (None, ""))[1] == attempt:
                _active.pop((job.run_id, job.key), None)
        with self._lock:
            listed = attempt in self._listed
        if listed:  # else the attempt journaled nothing: nothing on the broker to drop
            self._drop(job, attempt)

    def _drop(self, job: Job, attempt: str) -> None:
        with self._lock:
            self._listed.discard(attempt)
        with contextlib.suppress(Exception):
            pipe = self.r.pipeline(transaction=False)
            pipe.delete(_list_key(job.run_id, job.key, attempt))
            pipe.srem(_set_key(job.run_id, job.key), attempt)
            pipe.execute()

    def release(self, job: Job) -> None:
        """Stop journaling `job` in this process (the delivery is over, whatever happened)."""
        with _active_lock:
            _active.pop((job.run_id, job.key), None)

    def recover(self, ledger: Ledger, job: Job) -> int:
        """Write the journals an earlier, dead delivery of `job` left as spent objects; the calls recovered.
        Call only with the job's claim held."""
        from elo_per_token.contracts.spent import SPENT_DIR, SPENT_SUFFIX, spent_bytes

        try:
            attempts = sorted(
                a.decode() if isinstance(a, bytes) else str(a)
                for a in self.r.smembers(_set_key(job.run_id, job.key))
            )
        except Exception:
            return 0
        recovered = 0
        for attempt in attempts:
            name = f"{SPENT_DIR}{attempt}{SPENT_SUFFIX}"
            lines = _parsed(self.r.lrange(_list_key(job.run_id, job.key, attempt), 0, MAX_LINES))
            committed = bool(lines) and lines[-1] == COMMIT
            calls = [x for x in lines if isinstance(x, dict) and x.get("kind") == "call"]
            done = ledger.get_blob(job.run_id, name) is not None or (
                committed and ledger.has_job(job.run_id, job.key)
            )
            if calls and not done:
                ledger.put_blob(
                    job.run_id, name, spent_bytes(calls, reason="lost", error_class=None, attempt=0, at=0.0)
                )
                recovered += len(calls)
            self._drop(job, attempt)
            with _active_lock:
                if _active.get((job.run_id, job.key), (None, ""))[1] == attempt:
                    _active.pop((job.run_id, job.key), None)
        return recovered


def _parsed(raw: list[Any]) -> list[dict[str, Any]]:
    """Journal entries as JSON objects; an entry that is not one (truncated, written by something else) is
    skipped: it cannot be a call this tool journaled."""
    out = []
    for x in raw:
        try:
            v = json.loads(x)
        except (ValueError, TypeError, RecursionError):
            continue
        if isinstance(v, dict):
            out.append(v)
    return out


def note_call(job: Job, rec: CallRecord) -> None:
    """Journal one call of `job` if this process journals it (called by the strategy context per call)."""
    with _active_lock:
        active = _active.get((job.run_id, job.key))
    if active is None:
        return
    journal, attempt = active
    from elo_per_token.contracts.records import JobResult, Outcome

    ident = JobResult(job, [], Outcome(None, None, None, {})).identity()
    journal._push(job, attempt, {**ident, "kind": "call", **rec.to_dict()})
