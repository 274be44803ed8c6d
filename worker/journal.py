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
import time
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


# The end of a sweep waits this long for a journal's job claim: a dead worker's lease (worker.celery_job.Claims,
# 20 s) runs out within it; a live holder (a delivery still running) keeps its journal.
END_WAIT_S = 25.0
MAX_JOURNALS = 100_000  # journals of one run read at a sweep's end at most (the broker may hold anything)
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


def claim_key(run_id: str, key: str) -> str:
    """The Redis lease a delivery of the job holds while it runs (worker.celery_job.Claims)."""
    return f"ept:claim:{run_id}:{key}"


def journal_set_key(run_id: str, key: str) -> str:
    """The set naming the job's attempts with a journal on the broker (read with the job's claim)."""
    return f"ept:journals:{run_id}:{key}"


_set_key = journal_set_key


def _list_key(run_id: str, key: str, attempt: str) -> str:
    return f"ept:journal:{run_id}:{key}:{attempt}"


class CallJournal:
    """Journals of one worker process on one Redis (the broker)."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self._listed: set[str] = set()  # attempts already in their job's set (and their list given a TTL)
        # (run, job key) -> drops deferred to the claim's release (defer_drops)
        self._deferred: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
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
        self._drop_key(job.run_id, job.key, attempt)

    def defer_drops(self, job: Job) -> None:
        """Until `take_drops` or `release`: drop `job`'s journals in the round trip that gives its claim up
        (worker.celery_job.Claims.release), not one round trip each. Safe because nobody reads a job's journals
        without its claim, and each is dropped only once its calls are durable (a journal a lost round trip
        leaves is recovered as any other: nothing is recorded twice)."""
        with self._lock:
            self._deferred[(job.run_id, job.key)] = []

    def take_drops(self, job: Job) -> list[tuple[str, str, str]]:
        """The drops deferred for `job` (its journal list, its set, the attempt), now the caller's to run
        (`drop_into`); deferring ends."""
        with self._lock:
            return self._deferred.pop((job.run_id, job.key), None) or []

    @staticmethod
    def drop_into(pipe: Any, drops: list[tuple[str, str, str]]) -> None:
        """Queue `drops` (from `take_drops`) on a Redis pipeline."""
        for lk, sk, attempt in drops:
            pipe.delete(lk)
            pipe.srem(sk, attempt)

    def _drop_key(self, run_id: str, key: str, attempt: str) -> None:
        with self._lock:
            self._listed.discard(attempt)
            later = self._deferred.get((run_id, key))
            if later is not None:
                later.append((_list_key(run_id, key, attempt), _set_key(run_id, key), attempt))
                return
        with contextlib.suppress(Exception):
            pipe = self.r.pipeline(transaction=False)
            pipe.delete(_list_key(run_id, key, attempt))
            pipe.srem(_set_key(run_id, key), attempt)
            pipe.execute()

    def release(self, job: Job) -> None:
        """Stop journaling `job` in this process (the delivery is over, whatever happened); drops still
        deferred (not taken) are run now."""
        with _active_lock:
            _active.pop((job.run_id, job.key), None)
        if drops := self.take_drops(job):
            with contextlib.suppress(Exception):
                pipe = self.r.pipeline(transaction=False)
                self.drop_into(pipe, drops)
                pipe.execute()

    def recover(self, ledger: Ledger, job: Job, members: Any = None) -> int:
        """Write the journals an earlier, dead delivery of `job` left as spent objects; the calls recovered.
        Call only with the job's claim held. members: the job's journal set (journal_set_key) as read with the
        claim (Claims.acquire_reading), or the error reading it; None: read it now."""
        return self.recover_key(ledger, job.run_id, job.key, members)

    def recover_key(self, ledger: Ledger, run_id: str, key: str, members: Any = None) -> int:
        """`recover` by the job's run and key (the end of a sweep knows only the journal's name)."""
        from elo_per_token.contracts.spent import SPENT_DIR, SPENT_SUFFIX, spent_bytes

        try:
            if members is None:
                members = self.r.smembers(_set_key(run_id, key))
            if isinstance(members, Exception):  # unreadable (not a set): as when the broker cannot be read
                return 0
            attempts = sorted(a.decode() if isinstance(a, bytes) else str(a) for a in members)
        except Exception:
            return 0
        recovered = 0
        for attempt in attempts:
            name = f"{SPENT_DIR}{attempt}{SPENT_SUFFIX}"
            lines = _parsed(self.r.lrange(_list_key(run_id, key, attempt), 0, MAX_LINES))
            committed = bool(lines) and lines[-1] == COMMIT
            calls = [x for x in lines if isinstance(x, dict) and x.get("kind") == "call"]
            done = ledger.get_blob(run_id, name) is not None or (committed and ledger.has_job(run_id, key))
            if calls and not done:
                ledger.put_blob(
                    run_id, name, spent_bytes(calls, reason="lost", error_class=None, attempt=0, at=0.0)
                )
                recovered += len(calls)
            self._drop_key(run_id, key, attempt)
            with _active_lock:
                if _active.get((run_id, key), (None, ""))[1] == attempt:
                    _active.pop((run_id, key), None)
        return recovered


def _glob_escape(s: str) -> str:
    """`s` matched literally by a Redis SCAN pattern (a run id may hold `*`, `?`, `[`)."""
    return "".join("\\" + c if c in "*?[]\\^" else c for c in s)


def journaled_keys(r: redis.Redis, run_id: str, limit: int = MAX_JOURNALS) -> list[str]:
    """The keys of the run's jobs with a journal left on the broker (at most `limit`)."""
    prefix = _set_key(run_id, "")
    out: list[str] = []
    for k in r.scan_iter(match=_glob_escape(prefix) + "*", count=1000):
        name = k.decode(errors="replace") if isinstance(k, bytes) else str(k)
        if name.startswith(prefix) and len(out) < limit:
            out.append(name[len(prefix) :])
        if len(out) >= limit:
            break
    return out


def recover_run(r: redis.Redis, ledger: Ledger, run_id: str, wait_s: float = END_WAIT_S) -> tuple[int, int]:
    """At the end of a sweep: turn every journal of `run_id` no live delivery holds into a spent object, so a
    call paid for by a delivery that died (and was never delivered again: the sweep ended, the run was stopped
    or went over its budget) is recorded by the end of the sweep. Each job's claim is taken first (a dead
    holder's lease runs out within `wait_s`). Returns (calls recovered, journals left to a live holder)."""
    journal, owner = CallJournal(r), f"ept-sweep-end:{uuid.uuid4().hex}"
    pending, recovered = journaled_keys(r, run_id), 0
    deadline = time.monotonic() + wait_s
    while pending:
        held = []
        for key in pending:
            ck = claim_key(run_id, key)
            if not r.set(ck, owner, nx=True, px=60_000):
                held.append(key)
                continue
            try:
                recovered += journal.recover_key(ledger, run_id, key)
            finally:
                with contextlib.suppress(Exception):
                    r.eval(_RELEASE, 1, ck, owner)
        pending = held
        if pending and time.monotonic() < deadline:
            time.sleep(0.5)
        else:
            break
    return recovered, len(pending)


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
