"""How `ept view` knows a run's state without listing it per page (issue 39): a cheap marker of what the run
holds, measured off the request thread and kept for a short while, and analyses cached on disk under that
marker so a cold server answers from the cache.

The marker (RunState.token) digests the run's content state: its manifest, its failure objects' names, its
committed segments and the job keys no segment holds. For a compacted run those keys come from the run's
declared or recorded key space and its change log (ledger/keyspace.py, ledger/changelog.py): no listing of
jobs/, no walk. Only a run that is not compacted (a sweep still running, say) is listed — by the background
refresher, at most once per `ttl` (longer when a count is slow), never by a request.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elo_per_token.ledger import Ledger
from elo_per_token.viewer.reading import MAX_MANIFEST_BYTES, read_capped

CACHE_FORMAT = 1  # bump when what is pickled changes shape
CACHE_ENTRIES = 32  # analyses kept on disk (oldest dropped first)…
CACHE_BYTES = 4 * 2**30  # …and at most this much (a 100k-job run's analysis is ~150 MB)


@dataclass(frozen=True)
class RunState:
    """What a run holds, as cheaply as it can be known: job objects done (in segments or not), failures,
    and a digest of that content (equal digests: the same analysis)."""

    done: int
    failed: int
    token: str
    how: str  # "segments" (no listing) or "listed" (a run that is not compacted)
    at: float  # time.monotonic() of the measurement
    took: float  # seconds it took


def measure(ledger: Ledger, run_id: str) -> RunState:
    """The run's state: its compacted segments plus the keys they lack (found without a listing when the run
    declares or recorded its keys), else a listing of jobs/."""
    from elo_per_token.ledger.keyspace import tail_or_why
    from elo_per_token.ledger.segments import read_index, segment_state

    t0 = time.monotonic()
    h = hashlib.sha256()
    got = read_capped(ledger, f"runs/{run_id}/manifest.json", MAX_MANIFEST_BYTES + 1)
    h.update(hashlib.sha256(got[0] if got else b"").digest())
    failures = sorted(ledger.iter_failure_keys(run_id))
    h.update("\n".join(failures).encode())
    st = segment_state(ledger, run_id)
    tail: list[str] | str = "the run is not compacted"
    done = 0
    if st.committed:
        index = read_index(ledger, run_id, st.committed)
        tail = tail_or_why(ledger, run_id, index)
        done = index.height
    if isinstance(tail, str):
        keys, how, done = sorted(ledger.list_jobs(run_id)), "listed", 0
    else:
        keys, how = tail, "segments"
        h.update(repr(st.committed).encode())
    h.update(b"\0" + "\n".join(keys).encode())
    done += len(keys)
    return RunState(done, len(failures), h.hexdigest()[:32], how, time.monotonic(), time.monotonic() - t0)


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


class DiskCache:
    """Analyses pickled under a digest of (ledger, run, RunState.token, options). The folder is this user's
    (0700); a folder or file that another user could have written is never unpickled."""

    def __init__(self, folder: str | Path | None) -> None:
        self.folder = Path(folder) if folder is not None else None

    def key(self, *parts: Any) -> str:
        from elo_per_token import __version__

        raw = json.dumps([CACHE_FORMAT, __version__, *parts], default=str, sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:40]

    def _safe(self, path: Path) -> bool:
        try:
            st = os.lstat(path)
        except OSError:
            return False
        return st.st_uid == os.getuid() and not st.st_mode & 0o022 and not stat.S_ISLNK(st.st_mode)

    def load(self, key: str) -> Any:
        """The cached value, None on a miss (or a file that cannot be trusted or read)."""
        if self.folder is None:
            return None
        path = self.folder / f"{key}.pickle"
        if not (self._safe(self.folder) and self._safe(path)):
            return None
        try:
            return pickle.loads(path.read_bytes())  # our own 0700 folder, checked above
        except Exception:  # a file from another version of the code: a miss
            return None

    def save(self, key: str, value: Any) -> None:
        """Store `value` (atomically: a reader sees the old file or the whole new one); errors are ignored
        (a cache that cannot be written only costs the next cold start)."""
        if self.folder is None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not self._safe(self.folder):
                return
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".pickle")
            with os.fdopen(fd, "wb") as f:
                f.write(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            os.replace(tmp, self.folder / f"{key}.pickle")
            self._prune()
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            return

    def _prune(self) -> None:
        if self.folder is None:
            return
        files = sorted(self.folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
        total = 0
        for i, p in enumerate(files):  # newest first: the oldest past either bound go
            total += p.stat().st_size
            if i >= CACHE_ENTRIES or (i and total > CACHE_BYTES):
                p.unlink(missing_ok=True)


def default_cache_dir() -> Path:
    """$EPT_VIEW_CACHE, else $XDG_CACHE_HOME/ept/view (~/.cache/ept/view)."""
    from elo_per_token.contracts.settings import read_str

    if configured := read_str("EPT_VIEW_CACHE"):
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ept" / "view"
