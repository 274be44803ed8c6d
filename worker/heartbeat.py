"""Worker liveness on the broker: each `ept worker` process keeps a short-lived key per queue it consumes.

Graders run with Celery's remote control off (worker/cli.py: their restricted Redis user has no pidbox), so a
broadcast cannot tell the coordinator that a grader is there. Instead every worker process refreshes
`<queue>.alive.<node>` every HEARTBEAT_S with a TTL of TTL_S while it runs (the key starts with the queue's
name, so the graders' ACL pattern `~grade*` covers it) and deletes it when it stops; a process that dies
leaves a key that expires. coordinator.consumers counts these keys as consumers.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

log = logging.getLogger("ept.worker")

HEARTBEAT_S = 10.0  # how often a live worker refreshes its key
TTL_S = 30.0  # a worker silent this long (killed, frozen, cut from the broker) no longer counts


def heartbeat_key(queue: str, node: str) -> str:
    """The key a worker process consuming `queue` keeps alive (node: its Celery node name)."""
    return f"{queue}.alive.{node}"


def live_consumers(r: Any, queue: str) -> int:
    """How many worker processes consuming `queue` refreshed their key within TTL_S (0 when Redis fails)."""
    try:
        return sum(1 for _ in r.scan_iter(match=heartbeat_key(queue, "*"), count=100))
    except Exception:  # the broker's state is evidence only when it can be read
        return 0


class Heartbeat:
    """A running heartbeat: `stop()` ends it and deletes the key (joined, so a process exiting right after
    leaves no key behind for TTL_S)."""

    def __init__(self, thread: threading.Thread, stop_event: threading.Event) -> None:
        self._thread, self._stop = thread, stop_event

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)


def start_heartbeat(
    r: Any, queue: str, node: str, every: float = HEARTBEAT_S, ttl: float = TTL_S
) -> Heartbeat:
    """Keep `heartbeat_key(queue, node)` alive from a daemon thread until `stop()` (then the key is deleted).
    Broker errors are logged and retried at the next beat: a Redis restart is ridden out."""
    stop = threading.Event()
    key = heartbeat_key(queue, node)

    def beat() -> None:
        while True:
            try:
                r.set(key, "1", px=int(ttl * 1000))
            except Exception as e:
                log.warning("heartbeat %s not written: %s", key, type(e).__name__)
            if stop.wait(every):
                break
        with contextlib.suppress(Exception):
            r.delete(key)

    t = threading.Thread(target=beat, name="ept-heartbeat", daemon=True)
    t.start()
    return Heartbeat(t, stop)
