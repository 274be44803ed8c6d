"""Counts the listings and walks of a ledger's jobs/ folders, with an audit hook (issue 39's read-path tests).

One hook for the whole process, installed on import: any `find` started, and os.scandir / os.listdir of a
path containing `/jobs`. Each sighting records the event, the path and the thread that made it, so a test can
say both "nothing listed" and "listed, by the refresher thread only".
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import NamedTuple, TypeVar

T = TypeVar("T")


class Walk(NamedTuple):
    """One listing or walk: the audit event, the path it was over, the thread's name."""

    event: str
    path: str
    thread: str


_SEEN: list[Walk] = []
_ON = threading.Event()
_LOCK = threading.Lock()  # one counting at a time: sightings of two tests must not mix


def _audit(event: str, args: tuple) -> None:
    if not _ON.is_set():
        return
    if event == "subprocess.Popen" and "find" in str(args[0]):
        _SEEN.append(Walk("find", str(args[1]), threading.current_thread().name))
    elif event in ("os.scandir", "os.listdir") and args and "/jobs" in str(args[0]):
        _SEEN.append(Walk(event, str(args[0]), threading.current_thread().name))


sys.addaudithook(_audit)


def walks(fn: Callable[[], T]) -> tuple[T, list[Walk]]:
    """(fn(), the walks and listings of jobs/ made while it ran, by any thread)."""
    with _LOCK:
        _SEEN.clear()
        _ON.set()
        try:
            return fn(), list(_SEEN)
        finally:
            _ON.clear()
