"""The on-disk cache of run analyses, written by `ept analyze` and by `ept view`, read by `ept view` (issue 39).

Keys and format live here, in the analysis stage, so the data flows forward: `ept analyze` (analysis) fills
the cache and the viewer, which imports analysis, reads it; analysis never imports the viewer.

A run's state marker (RunState.token) digests its content: its manifest, its failure objects' names, its
committed segments and the job keys no segment holds. For a compacted run those keys come from the run's
declared or recorded key space and its change log (ledger/keyspace.py, ledger/changelog.py): no listing of
jobs/, no walk. An analysis is cached under a digest of (ledger, run, token, options): equal keys, the same
numbers.

The folder is this user's (0700; $EPT_VIEW_CACHE, else ~/.cache/ept/view). Its files are still read as input
from outside: a file another user could write, a link, or one over MAX_ENTRY_BYTES is never unpickled, and
anything that does not unpickle to the expected type is a miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elo_per_token.analysis.result import AnalysisOptions, AnalysisResult
    from elo_per_token.ledger import Ledger

CACHE_FORMAT = 3  # bump when what is pickled changes shape (3: large frames as zstd Arrow IPC)
CACHE_ENTRIES = 32  # analyses kept on disk (oldest dropped first)…
CACHE_BYTES = 4 * 2**30  # …and at most this much (a 100k-job run's analysis is ~150 MB)
MAX_ENTRY_BYTES = 2 * 2**30  # one file larger than this is not an entry of ours: never read
MANIFEST_CAP = 4 * 2**20  # the manifest bytes the marker digests (a manifest is a few KB)
# A frame larger than this is pickled as zstd-compressed Arrow IPC: a 1M-job run's records are 830 MB as
# polars pickles them and 21 MB so, in a third of the CPU (the write of the file was most of it; issue 39).
FRAME_IPC_BYTES = 1 * 2**20

# (ledger, object key, cap) -> (at most `cap` bytes of the object, its size), None when there is none.
HeadReader = Callable[["Ledger", str, int], "tuple[bytes, int] | None"]


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


def _whole_head(ledger: Ledger, key: str, cap: int) -> tuple[bytes, int] | None:
    """The analysis' reader of a manifest's first bytes (the viewer passes its bounded, link-refusing one)."""
    data = ledger.store.get(key)
    return None if data is None else (data[:cap], len(data))


def measure(
    ledger: Ledger, run_id: str, head: HeadReader = _whole_head, *, list_ok: bool = True
) -> RunState | None:
    """The run's state: its compacted segments plus the keys they lack (found without a listing when the run
    declares or recorded its keys), else a listing of jobs/ — or None without `list_ok` (no listing done).

    Args:
        ledger: the run's ledger.
        run_id: the run.
        head: reads an object's head (the change log's sizes); the default reads it whole.
        list_ok: whether a listing of jobs/ may be made when nothing else says what the run holds.
    """
    from elo_per_token.ledger.keyspace import tail_or_why
    from elo_per_token.ledger.segments import read_index, segment_state

    t0 = time.monotonic()
    h = hashlib.sha256()
    got = head(ledger, f"runs/{run_id}/manifest.json", MANIFEST_CAP + 1)
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
        if not list_ok:
            return None
        keys, how, done = sorted(ledger.list_jobs(run_id)), "listed", 0
    else:
        keys, how = tail, "segments"
        h.update(repr(st.committed).encode())
    h.update(b"\0" + "\n".join(keys).encode())
    done += len(keys)
    return RunState(done, len(failures), h.hexdigest()[:32], how, time.monotonic(), time.monotonic() - t0)


@dataclass
class AnalysisEntry:
    """What `ept analyze` leaves for the viewer: the result of one run's analysis at state `token`, with the
    options it used and where they came from (analysis.surface_options.run_options)."""

    token: str
    result: AnalysisResult
    options_from: str
    took: float = 0.0


def analysis_key(cache: DiskCache, ledger_url: str, run_id: str, token: str, opts: AnalysisOptions) -> str:
    """The cache key of the analysis of run `run_id` at state `token` with options `opts`: `ept analyze` and
    `ept view` compute it the same way, so the viewer finds what analyze stored only for the same options.

    Args:
        cache: the cache the key names a file of.
        ledger_url: the run's ledger.
        run_id: the run.
        token: the run's state (RunState.token).
        opts: the analysis options.
    """
    options = json.dumps(dataclasses.asdict(opts), default=str, sort_keys=True)
    return cache.key("analysis", ledger_url, run_id, token, options)


def frame_from_ipc(data: bytes) -> Any:
    """A frame stored by _FramePickler (Arrow IPC bytes) read back: what unpickling an entry calls.

    Args:
        data: the frame's Arrow IPC bytes.
    """
    import io

    import polars as pl

    return pl.read_ipc(io.BytesIO(data))


class _FramePickler(pickle.Pickler):
    """A pickler that stores a large polars DataFrame as zstd Arrow IPC (exact dtypes, categoricals
    included), read back by frame_from_ipc; everything else as pickle stores it."""

    def reducer_override(self, obj: Any) -> Any:
        import sys

        pl = sys.modules.get("polars")  # a value with a frame in it imported polars already
        if pl is not None and isinstance(obj, pl.DataFrame) and obj.estimated_size() > FRAME_IPC_BYTES:
            import io

            buf = io.BytesIO()
            obj.write_ipc(buf, compression="zstd")
            return frame_from_ipc, (buf.getvalue(),)
        return NotImplemented


class DiskCache:
    """Values pickled under a digest of their key parts. The folder is this user's (0700); a folder or file
    that another user could have written, a link, or a file over MAX_ENTRY_BYTES is never unpickled."""

    def __init__(self, folder: str | Path | None) -> None:
        self.folder = Path(folder) if folder is not None else None

    def key(self, *parts: Any) -> str:
        """A file name for `parts` (with this code's version and the cache format).

        Args:
            parts: what the entry depends on (JSON-encodable, else by str()).
        """
        from elo_per_token import __version__

        raw = json.dumps([CACHE_FORMAT, __version__, *parts], default=str, sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:40]

    def _safe(self, path: Path) -> bool:
        try:
            st = os.lstat(path)
        except OSError:
            return False
        return st.st_uid == os.getuid() and not st.st_mode & 0o022 and not stat.S_ISLNK(st.st_mode)

    def has(self, key: str) -> bool:
        """Whether an entry this cache would read is stored under `key` (its content is not read).

        Args:
            key: a name from key().
        """
        return (
            self.folder is not None and self._safe(self.folder) and self._safe(self.folder / f"{key}.pickle")
        )

    def load(self, key: str) -> Any:
        """The cached value, None on a miss (or a file that cannot be trusted or read).

        Args:
            key: a name from key().
        """
        if self.folder is None:
            return None
        path = self.folder / f"{key}.pickle"
        if not (self._safe(self.folder) and self._safe(path)):
            return None
        try:
            # O_NOFOLLOW: a link put in place since the check is not followed; the size is the opened file's.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
                    return None
                data = f.read(
                    st.st_size + 1
                )  # the size read: a buffer as large as the bound is not allocated
            if len(data) != st.st_size:  # written meanwhile (our writes replace files whole): a miss
                return None
            return pickle.loads(data)  # our own 0700 folder, checked above
        except Exception:  # a file from another version of the code, truncated, or garbage: a miss
            return None

    def save(self, key: str, value: Any) -> None:
        """Store `value` (atomically: a reader sees the old file or the whole new one); errors are ignored
        (a cache that cannot be written only costs the next cold start).

        Args:
            key: a name from key().
            value: what to store (picklable).
        """
        if self.folder is None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not self._safe(self.folder):
                return
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".pickle")
            try:
                with os.fdopen(fd, "wb") as f:
                    _FramePickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
                os.replace(tmp, self.folder / f"{key}.pickle")
            finally:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
            self._prune()
        except (OSError, pickle.PicklingError, TypeError, AttributeError, RecursionError, ValueError):
            return

    def _prune(self) -> None:
        if self.folder is None:
            return
        files = sorted(self.folder.glob("*.pickle"), key=lambda p: p.lstat().st_mtime, reverse=True)
        total = 0
        for i, p in enumerate(files):  # newest first: the oldest past either bound go
            total += p.lstat().st_size
            if i >= CACHE_ENTRIES or (i and total > CACHE_BYTES):
                p.unlink(missing_ok=True)


def default_cache_dir() -> Path:
    """$EPT_VIEW_CACHE, else $XDG_CACHE_HOME/ept/view (~/.cache/ept/view)."""
    from elo_per_token.contracts.settings import read_str

    if configured := read_str("EPT_VIEW_CACHE"):
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ept" / "view"


def analyze_cache_on(no_cache: bool = False) -> bool:
    """Whether `ept analyze` stores its analysis of a compacted run for `ept view`: not with --no-cache nor
    with EPT_ANALYZE_CACHE=0 (then the run's state is not measured either).

    Args:
        no_cache: `ept analyze --no-cache` was given.
    """
    from elo_per_token.contracts.settings import read_bool

    return not no_cache and read_bool("EPT_ANALYZE_CACHE")


@dataclass(frozen=True)
class CompactedRun:
    """The one run `ept analyze` was given, opened once for the state measured before and after it."""

    ledger: Ledger
    run_id: str
    state: RunState


def state_before(paths: list[str]) -> CompactedRun | None:
    """The one compacted run `paths` names, opened, with its state measured before it is analysed; None for
    anything else (files, several inputs, a run that is not compacted: nothing is stored for those).

    Args:
        paths: what `ept analyze` was given.
    """
    from elo_per_token.analysis.io import open_run, run_source

    src = run_source(paths[0]) if len(paths) == 1 else None
    if src is None or src.objects_only:
        return None
    try:
        ledger = open_run(src)
        st = measure(ledger, src.run_id, list_ok=False)
    except Exception:  # the analysis reports what is wrong with the run
        return None
    return None if st is None else CompactedRun(ledger, src.run_id, st)


def save_run_analysis(
    paths: list[str], opts: AnalysisOptions, result: AnalysisResult, before: CompactedRun | None
) -> None:
    """After `ept analyze RUN`: the result stored for `ept view` when the run is compacted and did not change
    while it was analysed (its state measured before and after, without a listing). Never raises: a cache
    that cannot be written only costs the viewer's next cold start.

    Args:
        paths: what `ept analyze` was given (the options' origin is read from them).
        opts: the options it analysed with.
        result: its result.
        before: the run and its state measured before the analysis (state_before; None: nothing is stored).
    """
    from elo_per_token.analysis.surface_options import run_options

    if before is None:
        return
    try:
        cache = DiskCache(default_cache_dir())
        key = analysis_key(cache, before.ledger.url, before.run_id, before.state.token, opts)
        if cache.has(key):  # the same run state with the same options: stored by an earlier analysis
            return
        after = measure(before.ledger, before.run_id, list_ok=False)
        if after is None or after.token != before.state.token:
            return
        _, where = run_options(paths)
        cache.save(key, AnalysisEntry(before.state.token, result, where, after.at - before.state.at))
    except Exception:  # the report is printed already; the cache is an optimisation
        return
