"""Declared key spaces: how a reader of a compacted run finds the job objects no segment holds WITHOUT
listing every job key (on S3, listing is one request per 1,000 keys and was most of a compacted read).

Layout under runs/<run>/ (see ledger/store.py):

    planned/keys-<digest>.parquet   a key-space declaration: every job key some writer may write (Parquet,
                                    one column `job_key`, sorted, unique; <digest> is of that content)
    planned/open-<id>               a writer that could not declare its keys: readers must list

The rule a writer follows: before it writes (or enqueues) the first job object of a session, it makes sure a
declaration naming every key of that session exists — conditionally created, so the same key space declared
twice is one object. `ept sweep` and `ept retry` (coordinator/sweep.py `execute`) declare every key of the
run's plan (plus any job they were handed) before running anything; Celery workers only write the jobs a
coordinator enqueued, after it declared them. Job objects are created exclusively and never replaced, so once
a segment holds a key, no other object can appear under it.

Hence what a reader must fetch besides the segments is: declared keys − indexed keys (probed one by one;
those not written yet are simply absent). It lists the run instead — always correct — when:

* the run has no declaration (written by an older ept, or by a tool that writes job objects itself), or its
  manifest names a session that did not declare (`declares_keys` missing: an older ept resumed the run),
* there is an `open-*` marker, or a declaration cannot be read,
* too many declared keys are unindexed (an uncompacted run: a listing is cheaper than a probe per key),
* `EPT_VERIFY_JOBS=1` is set — use it when something outside ept may have written job objects under keys
  its plan does not name: such an object is invisible to the declared path.

A run written by another tool declares nothing. `ept compact` of such a run lists it (it must, to find the
objects) and records every key it found as `planned/listed-<digest>.parquet` (a newer one replaces the older),
with the size of each change file (ledger/changelog.py) as it stood when the listing began: readers then treat
those keys like declared ones and read the compacted run without a listing or a walk. An object the other
tool writes after that listing began is found through the change log, if the tool keeps one (the lines past
the recorded sizes); one it does not log is read after the next `ept compact` (which always lists a run
holding `listed-` records), or at once with `EPT_VERIFY_JOBS=1` — on a local folder and on S3 alike (a walk
of every job directory's time cost more than reading the run's records: issue 39).
`ReadPlan.why` says why a reader listed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl
import pyarrow.parquet as pq

from elo_per_token.contracts import settings
from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger.changelog import new_keys

if TYPE_CHECKING:
    from elo_per_token.ledger import Ledger

PLANNED_DIR = "planned/"
_DECL = re.compile(r"^planned/keys-[0-9a-f]{16,64}\.parquet$")
# Keys `ept compact` found by listing a run that declared nothing (written by another tool).
_LISTED = re.compile(r"^planned/listed-[0-9a-f]{16,64}\.parquet$")
VERIFY_ENV = "EPT_VERIFY_JOBS"
# The listed- record's Parquet metadata key: {change file: its size when the listing began}.
CHANGES_META = b"ept.changes"


def declaration_name(keys: pl.Series, kind: str = "keys") -> str:
    """The declaration's name: a digest of its (sorted, unique) keys, so equal key spaces share one object.
    `kind`: "keys" (declared by a writer) or "listed" (found by a compaction's listing).

    Args:
        keys: The key space (any order, duplicates allowed).
        kind: "keys" (declared by a writer) or "listed" (found by a compaction's listing).
    """
    h = hashlib.sha256()
    for chunk in keys.str.join("\n").to_list():  # one string; a million keys is ~40 MB, hashed once
        h.update(chunk.encode())
    return f"{PLANNED_DIR}{kind}-{h.hexdigest()[:32]}.parquet"


def declare_keys(ledger: Ledger, run_id: str, keys: pl.Series) -> str:
    """Declare `keys` as keys that may be written in the run; returns the declaration's URL. Idempotent:
    the same key space is one object (the exclusive create of an existing one is a no-op).

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        keys: Every job key the session may write.
    """
    return _write_keys(ledger, run_id, keys, "keys")


def record_listed(
    ledger: Ledger,
    run_id: str,
    keys: pl.Series,
    listed_at: float | None = None,
    changes: dict[str, int] | None = None,
) -> str | None:
    """After a compaction listed a run nobody declared: record every key the listing found, so readers of
    the compacted run need not list it again (see the module docstring). Earlier `listed-` records are
    removed once the new one (a superset: objects are never deleted) exists. Returns its URL, or None when
    the run has writer declarations or an `open-` marker (then the record would be wrong or unused).

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        keys: Every job key the compaction's listing found.
        listed_at: When the listing began (time.time(); None: now).
        changes: Each change file's size when the listing began (change_sizes).
    """
    names = ledger.list_blobs(run_id, PLANNED_DIR)
    if any(not _LISTED.match(n) for n in names):
        return None
    url = _write_keys(
        ledger,
        run_id,
        keys,
        "listed",
        listed_at=time.time() if listed_at is None else listed_at,
        changes=changes,
    )
    mine = declaration_name(keys.cast(pl.String).unique().sort().rename("job_key"), "listed")
    for n in names:
        if n != mine:
            ledger.delete_blob(run_id, n)
    return url


def _write_keys(
    ledger: Ledger,
    run_id: str,
    keys: pl.Series,
    kind: str,
    listed_at: float | None = None,
    changes: dict[str, int] | None = None,
) -> str:
    keys = keys.cast(pl.String).unique().sort().rename("job_key")
    name = declaration_name(keys, kind)
    if name in ledger.list_blobs(run_id, PLANNED_DIR):  # a resumed sweep: declared by an earlier session
        return ledger.blob_url(run_id, name)
    fd, tmp = tempfile.mkstemp(prefix="ept-planned-", suffix=".parquet")
    os.close(fd)
    frame = keys.to_frame()
    if listed_at is not None:  # when the listing began: objects written since are looked for (local store)
        frame = frame.with_columns(pl.lit(listed_at, pl.Float64).alias("listed_at"))
    try:
        table = frame.to_arrow()
        if changes is not None:  # the change files' sizes when the listing began (ledger/changelog.py)
            meta = {CHANGES_META: json.dumps(changes, sort_keys=True).encode()}
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
        pq.write_table(table, tmp, compression="zstd")
        ledger.create_blob(run_id, name, tmp)  # False: already declared, same content by its name
    finally:
        os.unlink(tmp)
    return ledger.blob_url(run_id, name)


def declare_open(ledger: Ledger, run_id: str) -> str:
    """Mark the run as written by someone who could not declare its keys: from now on readers list it.

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
    """
    fd, tmp = tempfile.mkstemp(prefix="ept-open-")
    os.close(fd)
    name = f"{PLANNED_DIR}open-{uuid.uuid4().hex}"
    try:
        ledger.create_blob(run_id, name, tmp)
    finally:
        os.unlink(tmp)
    return ledger.blob_url(run_id, name)


def declared_or_why(
    ledger: Ledger, run_id: str, *, listed: bool = True
) -> tuple[pl.Series, dict[str, int] | None] | str:
    """(declared keys, the change files' sizes the `listed-` record noted (None: no such record; {} for a
    record of an older ept, which noted none)), or the reason the run's keys cannot be known without a
    listing.

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        listed: Also accept the keys a compaction recorded (`listed-` records) as declared.
    """
    manifest = ledger.get_manifest(run_id) or {}
    if any(not (isinstance(s, dict) and s.get("declares_keys")) for s in manifest.get("sessions") or []):
        return "a session of an older ept wrote to the run without declaring its keys"
    names = ledger.list_blobs(run_id, PLANNED_DIR)
    decls = [n for n in names if _DECL.match(n) or (listed and _LISTED.match(n))]
    if not listed and any(_LISTED.match(n) for n in names):
        return "another tool wrote the run: a compaction lists it to find the objects written since"
    if len(decls) != len(names):  # an open- marker, or anything this version does not know
        return f"{ledger.blob_url(run_id, PLANNED_DIR)} holds a writer that could not declare its keys"
    if not decls:
        return (
            "the run declares no keys (written by another tool or an older ept; `ept compact` records them)"
        )
    from elo_per_token.ledger.memo import remember

    # Declarations are named by a digest of their content: within a read_once() scope they are read once.
    return remember(
        ("declared", ledger.url, run_id, tuple(decls)), lambda: _read_declared(ledger, run_id, decls)
    )


def _read_declared(
    ledger: Ledger, run_id: str, decls: list[str]
) -> tuple[pl.Series, dict[str, int] | None] | str:
    """The keys of the declarations `decls` (names under the run) and the sizes their `listed-` records
    noted, or why they cannot be used."""
    parts: list[pl.Series] = []
    seen: dict[str, int] | None = None
    for n in decls:
        raw = ledger.get_blob(run_id, n)
        try:
            if raw is None:
                return f"{ledger.blob_url(run_id, n)} is gone"
            parts.append(pl.read_parquet(io.BytesIO(raw), columns=["job_key"])["job_key"].cast(pl.String))
            if _LISTED.match(n):
                sizes = _noted_sizes(raw)
                seen = sizes if seen is None else {k: min(v, seen.get(k, v)) for k, v in sizes.items()}
        except (pl.exceptions.PolarsError, OSError, ValueError, TypeError):
            # listing is always correct; a damaged declaration only costs the fast path
            return f"{ledger.blob_url(run_id, n)} is unreadable"
    keys = pl.concat(parts).unique() if len(parts) > 1 else parts[0]
    return keys, seen


def _noted_sizes(raw: bytes) -> dict[str, int]:
    """The change files' sizes a `listed-` record noted in its Parquet metadata ({} when none); ValueError
    when the note is not a table of whole sizes (another tool's bytes: the reader then lists)."""
    meta = pq.read_schema(io.BytesIO(raw)).metadata or {}
    note = meta.get(CHANGES_META)
    if note is None:
        return {}
    got = json.loads(note)
    if not isinstance(got, dict) or not all(
        isinstance(k, str) and type(v) is int and v >= 0 for k, v in got.items()
    ):
        raise ValueError("the change-file sizes noted are not a table of whole numbers")
    return got


def verify_requested() -> bool:
    """EPT_VERIFY_JOBS (or `ept --verify-jobs`, which sets it for the command): list every job object instead
    of trusting the declared keys."""
    return settings.read_bool(VERIFY_ENV)


def probe_limit(declared: int) -> int:
    """Unindexed declared keys probed one request each, at most: beyond this a listing (1,000 keys per
    request) is cheaper. 1% of the run, at least 200.

    Args:
        declared: How many declared keys no segment holds.
    """
    return max(200, declared // 100)


def existing_jobs(ledger: Ledger, run_id: str, keys: list[str], threads: int = 32) -> list[str]:
    """Those of `keys` whose job object exists (a HEAD each on S3, a stat locally), in `keys` order.

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        keys: The job keys to probe.
        threads: Requests (or reads) in flight at once.
    """
    if not keys:
        return []
    if len(keys) < 8 or threads <= 1:
        return [k for k in keys if ledger.has_job(run_id, k)]
    with ThreadPoolExecutor(min(threads, 32)) as ex:
        there = list(ex.map(lambda k: ledger.has_job(run_id, k), keys))
    return [k for k, ok in zip(keys, there, strict=True) if ok]


def tail_or_why(
    ledger: Ledger, run_id: str, index: pl.DataFrame, *, verify: bool | None = None, listed: bool = True
) -> list[str] | str:
    """The job keys of the run no committed segment holds, sorted, found from the declared key space without
    a listing — or why the reader must list instead (see the module docstring). `index`: the committed
    segments' (job_key, …), deduplicated.

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        index: The committed segments' index (read_index: job_key, seg).
        verify: List the run even when its declared keys would do (None: EPT_VERIFY_JOBS decides).
        listed: Also accept the keys a compaction recorded (`listed-` records) as declared.
    """
    verify = verify_requested() if verify is None else verify
    if verify:
        return f"{VERIFY_ENV} is set"
    if not index.height:
        return "the run is not compacted"
    got = declared_or_why(ledger, run_id, listed=listed)
    if isinstance(got, str):
        return got
    declared, seen = got
    newer: list[str] = []
    if seen is not None:
        # Keys a compaction found by listing: objects the other tool logged since that listing began are read
        # from the change log (ledger/changelog.py) — no walk, no listing of jobs/.
        logged = new_keys(ledger, run_id, seen)
        if isinstance(logged, str):
            return logged
        if logged:  # (an anti-join against a million keys costs 0.1 s even when nothing was logged)
            logged_now = pl.Series("job_key", logged, dtype=pl.String).unique().to_frame()
            newer = logged_now.join(index.select("job_key"), on="job_key", how="anti")["job_key"].to_list()
    missing = _unindexed(declared, index)
    if missing.height + len(newer) > probe_limit(declared.len()):
        return f"{missing.height + len(newer)} known keys are not compacted (a listing is cheaper than probing them)"
    try:
        # Logged keys are probed too: a line names an object that exists, or garbage (not read).
        there = existing_jobs(ledger, run_id, sorted({*missing["job_key"].to_list(), *newer}))
    except InputError as e:  # a name another tool gave an object that is no job key ept could probe
        return f"a recorded key cannot be probed ({e})"
    return there


def _unindexed(declared: pl.Series, index: pl.DataFrame) -> pl.DataFrame:
    """The declared keys no segment holds (`job_key`). An anti-join of a million keys against a million:
    within a read_once() scope it is done once per (declarations, index) pair, the memo holding both
    frames (so their ids name them while it lives)."""
    from elo_per_token.ledger.memo import remember

    def compute() -> tuple[pl.Series, pl.DataFrame, pl.DataFrame]:
        keys = index["job_key"]
        if keys.len() == declared.len() and (keys == declared).all():
            # The common case, a run compacted once: its record and its index name the same keys in the same
            # (sorted) order; comparing them costs a tenth of the join.
            return declared, index, declared.clear().to_frame("job_key")
        got = declared.to_frame("job_key").join(index.select("job_key"), on="job_key", how="anti")
        return declared, index, got

    return remember(("unindexed", id(declared), id(index)), compute)[2]


def unindexed_keys(
    ledger: Ledger, run_id: str, index: pl.DataFrame, *, verify: bool | None = None
) -> tuple[list[str], str]:
    """(job keys of the run that no committed segment holds, sorted; how they were found: "declared" or
    "listed").

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        index: The committed segments' index (read_index: job_key, seg).
        verify: List the run even when its declared keys would do (None: EPT_VERIFY_JOBS decides).
    """
    plan = read_plan(ledger, run_id, index, verify=verify)
    return plan.tail, plan.found_by


@dataclass(frozen=True)
class ReadPlan:
    """The job objects a reader must fetch besides the segments, and how they were found."""

    tail: list[str]  # job keys no committed segment holds, sorted
    found_by: str  # "declared" (no listing) or "listed"
    why: str = ""  # when listed: the reason the declared key space could not be used


def read_plan(ledger: Ledger, run_id: str, index: pl.DataFrame, *, verify: bool | None = None) -> ReadPlan:
    """Find the run's uncompacted job objects: from its declared (or compaction-recorded) keys when that is
    safe, else by listing; the plan says which, and why it listed.

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        index: The committed segments' index (read_index: job_key, seg).
        verify: List the run even when its declared keys would do (None: EPT_VERIFY_JOBS decides).
    """
    from elo_per_token.ledger.listing import list_keys, tail_keys

    got = tail_or_why(ledger, run_id, index, verify=verify)
    if not isinstance(got, str):
        return ReadPlan(got, "declared")
    return ReadPlan(tail_keys(list_keys(ledger, run_id, index=index), index), "listed", got)
