"""Noticing a queue nobody consumes: the coordinator stops instead of waiting forever.

Two ways a Celery sweep can wait without end: no worker consumes the job queue, or job workers
send code to a grade queue whose graders never started (a sandbox that cannot run in its container) or died.
In the second case jobs wait for verdicts that never come while the rest of the sweep goes on, so the check
cannot rely on "nothing finished". Every CHECK_EVERY_S the coordinator asks the workers which queues they
consume (Celery's remote control, one broadcast), counts the workers whose liveness key is fresh
(worker.heartbeat: graders take no broadcasts, so this is how a grader is seen) and reads how many messages
wait on the grade queue; a queue with work waiting, no consumer and no progress (a backlog that shrank since
the last check is being drained) for `window_s` ends the sweep with a message that names the queue and, when
a worker that failed to start left one on the broker (`worker_error_key`), its reason.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from elo_per_token.contracts import settings
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.jobs import worker_error_key

DEFAULT_WINDOW_S = settings.read_float("EPT_NO_CONSUMER_S", {})  # the declared default
CHECK_EVERY_S = 10.0


def window_s() -> float:
    """EPT_NO_CONSUMER_S: how long a queue may have work and no consumer before the sweep stops."""
    value = settings.read_float("EPT_NO_CONSUMER_S")
    if not 0 < value < 86400:
        raise InputError(f"must be between 0 and 86400 seconds, got {value:g}", field="EPT_NO_CONSUMER_S")
    return value


class QueueStalled(InputError):
    """A queue had work and no consumer for the whole window: the sweep stops (exit 2, a setup problem)."""


def consumers_by_queue(replies: dict[str, Any] | None) -> dict[str, int]:
    """Workers per queue name from `inspect().active_queues()` replies ({worker: [{"name": q, …}, …]})."""
    out: dict[str, int] = {}
    for queues in (replies or {}).values():
        if not isinstance(queues, list):
            continue
        for q in queues:
            name = q.get("name") if isinstance(q, dict) else None
            if isinstance(name, str):
                out[name] = out.get(name, 0) + 1
    return out


@dataclass
class QueueWatch:
    """The job queue and the grade queue, checked every CHECK_EVERY_S; `check` returns a stop message or None.

    `inspect` returns the workers' active queues (None when the broadcast failed: that check is skipped),
    `waiting(queue)` the number of messages on a queue, `reason(queue)` what a worker that could not start
    for it left on the broker, `alive(queue)` how many workers' liveness keys for it are fresh."""

    queue: str
    grade_queue: str | None
    inspect: Callable[[], dict[str, Any] | None]
    waiting: Callable[[str], int]
    reason: Callable[[str], str | None]
    window: float = DEFAULT_WINDOW_S
    every: float = CHECK_EVERY_S
    since: dict[str, float] = field(
        default_factory=dict
    )  # queue -> when it was first seen with work, no consumer
    last: float = float("-inf")
    alive: Callable[[str], int] = lambda _q: 0
    backlog: dict[str, int] = field(default_factory=dict)  # queue -> messages waiting at the last check

    def check(self, pending: int, now: float | None = None) -> str | None:
        now = time.monotonic() if now is None else now
        if now - self.last < self.every:
            return None
        self.last = now
        replies = self.inspect()
        if replies is None:
            return None
        consumers = consumers_by_queue(replies)
        self._track(self.queue, pending > 0 and not self.consumed(consumers, self.queue), now)
        if self.grade_queue:
            q = self.grade_queue
            waiting = self.waiting(q) if not self.consumed(consumers, q) else 0
            draining = 0 < waiting < self.backlog.get(q, waiting)  # fewer than last time: someone takes them
            self.backlog[q] = waiting
            self._track(q, waiting > 0 and not draining, now)
        for q, t0 in self.since.items():
            if now - t0 >= self.window:
                return self._message(q, now - t0, pending)
        return None

    def consumed(self, consumers: dict[str, int], queue: str) -> bool:
        """A consumer answered the broadcast, or keeps its liveness key fresh (graders do not answer)."""
        return bool(consumers.get(queue)) or self.alive(queue) > 0

    def _track(self, queue: str, stalled: bool, now: float) -> None:
        if stalled:
            self.since.setdefault(queue, now)
        else:
            self.since.pop(queue, None)

    def _message(self, queue: str, waited: float, pending: int) -> str:
        cause = self.reason(queue)
        why = f" A worker for it failed to start: {cause}." if cause else ""
        if queue == self.grade_queue:
            return (
                f"stopped: code jobs wait for verdicts on the grade queue {queue!r}, which no grader has consumed "
                f"for {waited:.0f}s.{why} Start a grader whose sandbox works (`ept worker --queue {queue}`; in "
                f"containers see deploy/README.md, 'Grader'), then resume the sweep. Of {pending} unfinished job(s), "
                "the queued ones are cancelled before they start; running ones end as failures with their calls "
                "recorded"
            )
        return (
            f"stopped: no worker has consumed queue {queue!r} for {waited:.0f}s.{why} Start one with "
            f"`ept worker --queue {queue}` on this broker, then resume the sweep (EPT_NO_CONSUMER_S sets this wait)"
        )


def redis_watch(app: Any, queue: str, window: float) -> QueueWatch:
    """A QueueWatch over the Celery app's broker (Redis): the grade queue is EPT_GRADE_QUEUE, else `grade`."""
    import redis

    from elo_per_token.contracts.secrets import scrub

    r = redis.Redis.from_url(str(app.conf.broker_url), socket_timeout=5)

    def inspect() -> dict[str, Any] | None:
        try:
            replies: dict[str, Any] = app.control.inspect(timeout=1.0).active_queues() or {}
            return replies
        except Exception:
            return None

    def waiting(q: str) -> int:
        try:
            return int(r.llen(q))
        except Exception:
            return 0

    def reason(q: str) -> str | None:
        with contextlib.suppress(Exception):
            raw = r.get(worker_error_key(q))
            if raw:
                text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                return scrub(text[:400])
        return None

    from elo_per_token.worker.heartbeat import live_consumers

    grade = settings.read_str("EPT_GRADE_QUEUE") or "grade"
    return QueueWatch(
        queue,
        grade if grade != queue else None,
        inspect,
        waiting,
        reason,
        window=window,
        alive=lambda q: live_consumers(r, q),
    )


def queue_lines(watch: QueueWatch) -> list[str]:
    """One line per queue (the job queue, the grade queue) that has work waiting and no consumer right now, with
    the reason a worker that failed to start for it left; [] when all is well or the broadcast failed."""
    replies = watch.inspect()
    if replies is None:
        return []
    consumers = consumers_by_queue(replies)
    out = []
    for q in (watch.queue, watch.grade_queue):
        if not q or watch.consumed(consumers, q):
            continue
        waiting = watch.waiting(q)
        if waiting:
            cause = watch.reason(q)
            out.append(
                f"queue {q!r}: {waiting} message(s) waiting and no worker consuming it"
                + (f" (a worker failed to start: {cause})" if cause else "")
            )
    return out


def broker_status(queue: str) -> list[str]:
    """queue_lines for the broker in EPT_BROKER_URL (`ept status` of a Celery run); [] without one or on error."""
    if not settings.is_set("EPT_BROKER_URL"):
        return []
    try:
        from elo_per_token.worker.celery_app import make_app

        app = make_app()
        try:
            return queue_lines(redis_watch(app, queue, DEFAULT_WINDOW_S))
        finally:
            app.close()
    except Exception:  # status reads the ledger; the broker is extra information
        return []
