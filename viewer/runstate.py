"""How `ept view` knows a run's state without listing it per page (issue 39): a cheap marker of what the run
holds (analysis.runcache.RunState), measured off the request thread and kept for a short while; analyses are
cached on disk under that marker (analysis.runcache.DiskCache, filled by `ept analyze` too) so a cold server
answers from the cache. Only a run that is not compacted (a sweep still running, say) is listed — by the
background refresher, at most once per `ttl` (longer when a count is slow), never by a request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from elo_per_token.analysis import runcache
from elo_per_token.analysis.runcache import DiskCache, RunState, default_cache_dir
from elo_per_token.ledger import Ledger
from elo_per_token.viewer.reading import read_capped

__all__ = ["DiskCache", "RunState", "Tracker", "default_cache_dir", "measure"]


def measure(ledger: Ledger, run_id: str) -> RunState:
    """The run's state (analysis.runcache.measure), its manifest read as the viewer reads every object:
    bounded, a link out of the ledger refused."""
    st = runcache.measure(ledger, run_id, read_capped)
    assert st is not None  # listing allowed: always a state
    return st


class Tracker:
    """Each run's last RunState, refreshed in the background when older than `ttl` seconds (or 5 times what
    the last measurement took, so a slow count is not redone back to back). A request gets the last state
    at once; only a run never measured makes it wait, at most `wait_s`."""

    def __init__(self, measure_fn: Callable[[str], RunState], pool: ThreadPoolExecutor, ttl: float = 2.0):
        self._measure = measure_fn
        self._pool = pool
        self.ttl = ttl
        self._states: dict[str, RunState] = {}
        self._pending: dict[str, Future[RunState]] = {}
        self._guard = threading.Lock()

    def get(self, run_id: str, wait_s: float | None, fresh_wait_s: float | None = 0.25) -> RunState | None:
        """The run's state. When the last one is stale a refresh starts, and the caller waits for it at most
        `fresh_wait_s` (a cheap count is then current; a slow one is not waited for: the last state is
        returned). A run never measured waits at most `wait_s`; None when it is still being counted.
        (None as a wait: no limit.) A measurement's error (a bad manifest, a link out of the ledger) is raised
        here."""
        with self._guard:
            last = self._states.get(run_id)
            fut = self._pending.get(run_id)
            keep = max(self.ttl, 5 * last.took) if last is not None and self.ttl else 0.0
            stale = last is None or time.monotonic() - last.at >= keep
            if stale and fut is None:
                fut = self._pending[run_id] = self._pool.submit(self._measure, run_id)
        if fut is None:
            return last
        try:
            fut.result(timeout=wait_s if last is None else fresh_wait_s)
        except TimeoutError:
            return last
        except Exception:
            if last is None:
                self._settle(run_id, fut)  # raises it
            with self._guard:  # a failed refresh: the next request measures again
                if self._pending.get(run_id) is fut:
                    del self._pending[run_id]
                self._states.pop(run_id, None)
            raise
        return self._settle(run_id, fut)

    def _settle(self, run_id: str, fut: Future[RunState]) -> RunState:
        with self._guard:
            if self._pending.get(run_id) is fut:
                del self._pending[run_id]
        state = fut.result()  # raises the measurement's error
        with self._guard:
            self._states[run_id] = state
        return state

    def peek(self, run_id: str) -> RunState | None:
        """The last state known, without measuring."""
        with self._guard:
            return self._states.get(run_id)
