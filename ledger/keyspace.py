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
objects) and records every key it found as `planned/listed-<digest>.parquet` (a newer one replaces the older):
readers then treat those keys like declared ones and read the compacted run without a listing. An object the
other tool writes after that listing began is found by a local reader in the directories changed since
(directory times: no object is read or listed one by one); on S3, which cannot tell, it is read after the
next `ept compact` (which always lists a run holding `listed-` records), or at once with `EPT_VERIFY_JOBS=1`.
`ReadPlan.why` says why a reader listed.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from elo_per_token.contracts import settings
from elo_per_token.contracts.errors import InputError

if TYPE_CHECKING:
    from elo_per_token.ledger import Ledger

PLANNED_DIR = "planned/"
_DECL = re.compile(r"^planned/keys-[0-9a-f]{16,64}\.parquet$")
# Keys `ept compact` found by listing a run that declared nothing (written by another tool).
_LISTED = re.compile(r"^planned/listed-[0-9a-f]{16,64}\.parquet$")
VERIFY_ENV = "EPT_VERIFY_JOBS"
# Directory times compared with a listing's start: a margin for coarse file-system timestamps.
_MTIME_SLACK_S = 2.0


def declaration_name(keys: pl.Series, kind: str = "keys") -> str:
    """The declaration's name: a digest of its (sorted, unique) keys, so equal key spaces share one object.
    `kind`: "keys" (declared by a writer) or "listed" (found by a compaction's listing)."""
    h = hashlib.sha256()
    for chunk in keys.str.join("\n").to_list():  # one string; a million keys is ~40 MB, hashed once
        h.update(chunk.encode())
    return f"{PLANNED_DIR}{kind}-{h.hexdigest()[:32]}.parquet"


def declare_keys(ledger: Ledger, run_id: str, keys: pl.Series) -> str:
    """Declare `keys` as keys that may be written in the run; returns the declaration's URL. Idempotent:
    the same key space is one object (the exclusive create of an existing one is a no-op)."""
    return _write_keys(ledger, run_id, keys, "keys")


def record_listed(ledger: Ledger, run_id: str, keys: pl.Series, listed_at: float | None = None) -> str | None:
    """After a compaction listed a run nobody declared: record every key the listing found, so readers of
    the compacted run need not list it again (see the module docstring). Earlier `listed-` records are
    removed once the new one (a superset: objects are never deleted) exists. Returns its URL, or None when
    the run has writer declarations or an `open-` marker (then the record would be wrong or unused)."""
    names = ledger.list_blobs(run_id, PLANNED_DIR)
    if any(not _LISTED.match(n) for n in names):
        return None
    url = _write_keys(
        ledger, run_id, keys, "listed", listed_at=time.time() if listed_at is None else listed_at
    )
    mine = declaration_name(keys.cast(pl.String).unique().sort().rename("job_key"), "listed")
    for n in names:
        if n != mine:
            ledger.delete_blob(run_id, n)
    return url


def _write_keys(
    ledger: Ledger, run_id: str, keys: pl.Series, kind: str, listed_at: float | None = None
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
        frame.write_parquet(tmp, compression="zstd")
        ledger.create_blob(run_id, name, tmp)  # False: already declared, same content by its name
    finally:
        os.unlink(tmp)
    return ledger.blob_url(run_id, name)


def declare_open(ledger: Ledger, run_id: str) -> str:
    """Mark the run as written by someone who could not declare its keys: from now on readers list it."""
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
) -> tuple[pl.Series, float | None] | str:
    """(declared keys, when the earliest `listed-` record's listing began (None: no such record)), or the
    reason the run's keys cannot be known without a listing."""
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
    parts: list[pl.Series] = []
    since: list[float] = []
    for n in decls:
        raw = ledger.get_blob(run_id, n)
        try:
            if raw is None:
                return f"{ledger.blob_url(run_id, n)} is gone"
            frame = pl.read_parquet(io.BytesIO(raw))
            parts.append(frame["job_key"].cast(pl.String))
            if _LISTED.match(n):
                since.append(float(frame["listed_at"].min() if frame.height else time.time()))  # type: ignore[arg-type]
        except (pl.exceptions.PolarsError, OSError, ValueError, TypeError):
            # listing is always correct; a damaged declaration only costs the fast path
            return f"{ledger.blob_url(run_id, n)} is unreadable"
    keys = pl.concat(parts).unique() if len(parts) > 1 else parts[0]
    return keys, (min(since) if since else None)


def verify_requested() -> bool:
    """EPT_VERIFY_JOBS (or `ept --verify-jobs`, which sets it for the command): list every job object instead
    of trusting the declared keys."""
    return settings.read_bool(VERIFY_ENV)


def probe_limit(declared: int) -> int:
    """Unindexed declared keys probed one request each, at most: beyond this a listing (1,000 keys per
    request) is cheaper. 1% of the run, at least 200."""
    return max(200, declared // 100)


def existing_jobs(ledger: Ledger, run_id: str, keys: list[str], threads: int = 32) -> list[str]:
    """Those of `keys` whose job object exists (a HEAD each on S3, a stat locally), in `keys` order."""
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
    segments' (job_key, …), deduplicated."""
    verify = verify_requested() if verify is None else verify
    if verify:
        return f"{VERIFY_ENV} is set"
    if not index.height:
        return "the run is not compacted"
    got = declared_or_why(ledger, run_id, listed=listed)
    if isinstance(got, str):
        return got
    declared, since = got
    newer: list[str] = []
    if since is not None:
        # Keys a compaction found by listing: objects the other tool wrote after that listing began are found
        # where the store can tell (a local folder: the directories changed since); S3 cannot, see above.
        found = ledger.iter_job_keys_since(run_id, since - _MTIME_SLACK_S)
        if found is not None:
            listed_now = pl.Series("job_key", list(found), dtype=pl.String).to_frame()
            newer = listed_now.join(index.select("job_key"), on="job_key", how="anti")["job_key"].to_list()
    missing = declared.to_frame("job_key").join(index.select("job_key"), on="job_key", how="anti")
    if missing.height + len(newer) > probe_limit(declared.len()):
        return f"{missing.height + len(newer)} known keys are not compacted (a listing is cheaper than probing them)"
    seen = set(newer)
    try:
        there = existing_jobs(ledger, run_id, [k for k in missing["job_key"].to_list() if k not in seen])
    except InputError as e:  # a name another tool gave an object that is no job key ept could probe
        return f"a recorded key cannot be probed ({e})"
    return sorted({*there, *newer})  # `newer` exist: they were just found in the folder


def unindexed_keys(
    ledger: Ledger, run_id: str, index: pl.DataFrame, *, verify: bool | None = None
) -> tuple[list[str], str]:
    """(job keys of the run that no committed segment holds, sorted; how they were found: "declared" or
    "listed")."""
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
    safe, else by listing; the plan says which, and why it listed."""
    from elo_per_token.ledger.listing import list_keys, tail_keys

    got = tail_or_why(ledger, run_id, index, verify=verify)
    if not isinstance(got, str):
        return ReadPlan(got, "declared")
    return ReadPlan(tail_keys(list_keys(ledger, run_id, index=index), index), "listed", got)
