"""Incremental compaction of a ledger run: job objects -> Parquet segments, each with an index of its job keys.

Layout under runs/<run>/compact/ (see ledger/store.py):

    part-00001.parquet   the records of some job objects (SEGMENT_SCHEMA + job_key + line), sorted by job key
    part-00001.keys      its index: the job keys it holds, in segment order, and each key's row count
                         (Parquet: `job_key`, `rows`) — a reader names each row's object without reading
                         the segment's job_key column

Rules that make compaction safe to run twice, or while workers are still writing:

* A segment counts only once its index exists: the index is written (exclusively) after the segment, so it is
  the commit. A segment without an index (a compactor died, or is still uploading) is ignored by readers.
* A compaction folds in the job objects no committed index names, as found when it starts (declared keys
  probed, or the run listed: ledger/keyspace.py); an object written
  later is simply not in this segment and lands in the next one. Old segments are never rewritten.
* Segment numbers are claimed by an exclusive create (link locally, IfNoneMatch='*' on S3): two compactors
  never write the same name. Two concurrent compactors may still fold the same objects into two segments;
  readers keep each job key from the lowest-numbered segment only, so nothing is counted twice.
* Job objects stay the source of truth: `ept compact --rebuild` drops every segment (index first, so a reader
  never sees a segment without its objects) and folds all objects again.

Memory is bounded by the chunk size: objects are read `chunk_jobs` at a time (threads for S3 GETs), their
bytes concatenated and parsed by ONE polars call with an explicit schema, and appended to the segment file
as a row group.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.contracts.errors import InputError

if TYPE_CHECKING:
    from elo_per_token.ledger.store import Ledger
from elo_per_token.ledger.listing import list_keys, tail_keys
from elo_per_token.ledger.schema import SEGMENT_SCHEMA as SEGMENT_SCHEMA
from elo_per_token.ledger.store import JOB_SUFFIX

COMPACT_DIR = "compact/"
_PART = re.compile(r"^compact/part-(\d{5,})\.(parquet|keys)$")


def seg_name(n: int) -> str:
    """The object name of segment `n` (relative to the run).

    Args:
        n: The segment's number.
    """
    return f"{COMPACT_DIR}part-{n:05d}.parquet"


def index_name(n: int) -> str:
    """The object name of segment `n`'s index (relative to the run).

    Args:
        n: The segment's number.
    """
    return f"{COMPACT_DIR}part-{n:05d}.keys"


@dataclass
class SegmentState:
    """What compact/ holds: committed segment numbers (index present) and every number in use."""

    committed: list[int]
    used: set[int]
    orphans: list[int]  # a segment without an index: a compactor died or is still uploading


def segment_state(ledger: Ledger, run_id: str) -> SegmentState:
    """What the run's compact/ folder holds: its committed segment numbers and every number in use.

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
    """
    seen: dict[int, set[str]] = {}
    for name in ledger.list_blobs(run_id, COMPACT_DIR):
        m = _PART.match(name)
        if m:
            seen.setdefault(int(m.group(1)), set()).add(m.group(2))
    committed = sorted(n for n, kinds in seen.items() if kinds == {"parquet", "keys"})
    orphans = sorted(n for n, kinds in seen.items() if "keys" not in kinds)
    return SegmentState(committed, set(seen), orphans)


def read_index(ledger: Ledger, run_id: str, committed: list[int], *, dedupe: bool = True) -> pl.DataFrame:
    """(job_key, rows, seg) for every committed segment, in segment order; with dedupe each key is kept once,
    from the lowest-numbered segment (two compactions that ran at once may both hold it). Within a
    ledger.memo.read_once() scope the indexes are read once (they never change under their number).

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        committed: The committed segments' numbers (segment_state).
        dedupe: Keep each job key once, from the lowest-numbered segment.
    """
    from elo_per_token.ledger.memo import remember

    key = ("segment-index", ledger.url, run_id, tuple(committed))
    raw = remember(key, lambda: _read_indexes(ledger, run_id, committed))
    if not dedupe:
        return raw
    return remember((*key, "dedupe"), lambda: _first_of_each(raw))


def _first_of_each(raw: pl.DataFrame) -> pl.DataFrame:
    """The first row of each job key, in order (what unique(keep="first", maintain_order=True) keeps)."""
    keys = raw["job_key"]
    # Keys strictly increasing (a run compacted once: segments hold sorted, consecutive key ranges) have no
    # duplicate to drop; checking so costs a thirtieth of finding the first of each on a million keys.
    if keys.len() < 2 or (not keys.null_count() and (keys.slice(1) > keys.slice(0, keys.len() - 1)).all()):
        return raw
    return raw.filter(keys.is_first_distinct())


def _read_indexes(ledger: Ledger, run_id: str, committed: list[int]) -> pl.DataFrame:
    """Every committed segment's index, concatenated in segment order (duplicates kept)."""
    frames = [pl.DataFrame(schema={"job_key": pl.String, "rows": pl.Int32, "seg": pl.Int32})]
    for n in committed:
        raw = ledger.get_blob(run_id, index_name(n))
        try:
            if raw is None:
                raise OSError("gone")
            keys = pl.read_parquet(io.BytesIO(raw), columns=["job_key", "rows"])
        except (pl.exceptions.PolarsError, OSError) as e:
            raise InputError(
                f"segment index is unreadable (corrupt or truncated: {str(e).splitlines()[0]}); rebuild the "
                f"segments from the job objects with `ept compact {run_id} --rebuild`",
                file=ledger.blob_url(run_id, index_name(n)),
            ) from e
        frames.append(keys.with_columns(pl.lit(n, pl.Int32).alias("seg")))
    return pl.concat(frames, how="vertical")


def parsed_chunks(
    ledger: Ledger,
    run_id: str,
    keys: list[str],
    schema: dict[str, pl.DataType],
    *,
    chunk_jobs: int,
    threads: int,
) -> Iterator[tuple[pl.DataFrame, list[str]]]:
    """The objects of `keys`, chunk by chunk, parsed with `schema`: (frame + `job_key` + `line0` (0-based line
    in its object), keys of objects polars cannot parse). The next chunk is fetched and parsed in a
    background thread while the caller uses this one (polars releases the GIL); at most two chunks are alive.

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        keys: The job keys to read.
        schema: The polars schema the job lines are parsed with.
        chunk_jobs: Objects read and parsed per chunk.
        threads: Requests (or reads) in flight at once.
    """
    from concurrent.futures import ThreadPoolExecutor

    chunks = [keys[i : i + chunk_jobs] for i in range(0, len(keys), chunk_jobs)]
    if not chunks:
        return
    with ThreadPoolExecutor(1, thread_name_prefix="ept-prefetch") as ex:
        fut = ex.submit(_fetch_parse, ledger, run_id, chunks[0], schema, threads)
        for i in range(len(chunks)):
            got = fut.result()
            if i + 1 < len(chunks):
                fut = ex.submit(_fetch_parse, ledger, run_id, chunks[i + 1], schema, threads)
            yield got
            del got


def _fetch_parse(
    ledger: Ledger, run_id: str, keys: list[str], schema: dict[str, pl.DataType], threads: int
) -> tuple[pl.DataFrame, list[str]]:
    if ledger.url.startswith("s3://"):
        got = _scan_s3(ledger, run_id, keys, schema)
        if got is not None:
            return got, []
    blobs = ledger.get_jobs(run_id, keys, threads=threads)
    if any(not b for b in blobs):
        # An empty object is one another tool is still writing: leave it for later.
        keys, blobs = [k for k, b in zip(keys, blobs, strict=True) if b], [b for b in blobs if b]
    groups, bad = parse_good(keys, blobs, schema)
    del blobs
    frames = [pl.DataFrame(schema={**schema, "job_key": pl.String, "line0": pl.Int64})]
    for gkeys, df, counts in groups:
        obj, line = object_index(counts)
        keyser = pl.Series("job_key", gkeys, dtype=pl.String)
        frames.append(
            df.with_columns(keyser.gather(obj).alias("job_key"), pl.Series("line0", line, dtype=pl.Int64))
        )
    return pl.concat(frames, how="vertical"), bad


def _scan_s3(
    ledger: Ledger, run_id: str, keys: list[str], schema: dict[str, pl.DataType]
) -> pl.DataFrame | None:
    """One polars scan over the objects' URLs: its Rust S3 client fetches them concurrently at a tenth of the
    CPU boto3 spends per GET. None if polars refuses any of them (the caller then narrows it down)."""
    from elo_per_token.ledger.s3config import storage_options

    prefix = ledger.run_url(run_id) + "/jobs/"
    urls = [ledger.job_url(run_id, k) for k in keys]
    try:
        df = pl.scan_ndjson(
            urls, schema=schema, include_file_paths="_path", storage_options=storage_options()
        ).collect()
    except (pl.exceptions.PolarsError, OSError, ValueError):
        return None
    key = pl.col("_path").str.strip_prefix(prefix).str.strip_suffix(JOB_SUFFIX)
    return df.with_columns(
        key.alias("job_key"), pl.int_range(pl.len(), dtype=pl.Int64).over("_path").alias("line0")
    ).drop("_path")


# ---------------------------------------------------------------- parsing many objects with one polars call


def parse_objects(
    blobs: list[bytes], schema: dict[str, pl.DataType]
) -> tuple[pl.DataFrame, NDArray[np.int64]] | None:
    """Parse the concatenated objects with one polars call. Returns (frame, lines per object), or None when
    polars refuses the bytes or the row count does not match the line count (blank lines, a line that is not
    an object…): the caller then narrows down object by object.

    Args:
        blobs: The job objects' bytes, one per key.
        schema: The polars schema the job lines are parsed with.
    """
    counts = np.fromiter(
        (b.count(b"\n") + (1 if b and not b.endswith(b"\n") else 0) for b in blobs), np.int64, len(blobs)
    )
    buf = b"".join(b if not b or b.endswith(b"\n") else b + b"\n" for b in blobs)
    if not buf:
        return pl.DataFrame(schema=schema), counts
    try:
        df = pl.read_ndjson(io.BytesIO(buf), schema=schema)
    except (pl.exceptions.PolarsError, ValueError):
        return None
    if df.height != int(counts.sum()):
        return None
    return df, counts


def object_index(counts: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """For rows of objects with `counts` lines each: (object index per row, 0-based line within the object).

    Args:
        counts: Lines per object.
    """
    obj = np.repeat(np.arange(len(counts)), counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else np.zeros(0, np.int64)
    line = np.arange(int(counts.sum())) - np.repeat(starts, counts)
    return obj, line


def parse_good(
    keys: list[str], blobs: list[bytes], schema: dict[str, pl.DataType]
) -> tuple[list[tuple[list[str], pl.DataFrame, NDArray[np.int64]]], list[str]]:
    """Parse in as few polars calls as possible: halves are retried until each bad object stands alone.
    Returns the parsed groups (keys, frame, counts) and the keys of objects polars cannot parse.

    Args:
        keys: The objects' job keys, in `blobs` order.
        blobs: The job objects' bytes, one per key.
        schema: The polars schema the job lines are parsed with.
    """
    got = parse_objects(blobs, schema)
    if got is not None:
        return [(keys, got[0], got[1])], []
    if len(keys) == 1:
        return [], list(keys)
    mid = len(keys) // 2
    a, bad_a = parse_good(keys[:mid], blobs[:mid], schema)
    b, bad_b = parse_good(keys[mid:], blobs[mid:], schema)
    return a + b, bad_a + bad_b


# ---------------------------------------------------------------- compaction


@dataclass
class CompactResult:
    run_id: str
    segments: list[str] = field(default_factory=list)  # URLs written by this call
    jobs: int = 0  # job objects folded in by this call
    rows: int = 0
    already: int = 0  # job objects already in earlier segments
    unparsable: list[str] = field(
        default_factory=list
    )  # job objects left out (analysis names their bad line)
    dropped: list[str] = field(default_factory=list)  # --rebuild: segment files removed
    found_by: str = "listed"  # how the new objects were found: "listed", or "declared" (ledger/keyspace.py)
    why_listed: str = ""  # when listed: why the declared key space could not be used
    recorded: str | None = None  # the listed keys recorded for readers (ledger/keyspace.py record_listed)
    listed_at: float | None = None  # when the listing began (time.time())
    changes: dict[str, int] | None = None  # the change files' sizes then (ledger/changelog.py)


def _chunks(seq: list[str], n: int) -> Iterator[list[str]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def drop_segments(ledger: Ledger, run_id: str) -> list[str]:
    """Remove every segment and index (indexes first: a reader then falls back to the job objects).

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
    """
    st = segment_state(ledger, run_id)
    gone = []
    for n in sorted(st.used):
        ledger.delete_blob(run_id, index_name(n))
        gone.append(index_name(n))
    for n in sorted(st.used):
        ledger.delete_blob(run_id, seg_name(n))
        gone.append(seg_name(n))
    return gone


def _unfolded_keys(
    ledger: Ledger,
    run_id: str,
    index: pl.DataFrame,
    res: CompactResult,
    *,
    verify: bool | None,
    on_progress: Callable[[str, int, int], None] | None,
) -> tuple[list[str], pl.Series | None]:
    """The job keys no committed segment holds (sets res.found_by / res.already / res.why_listed): from the
    run's declared key space when that is safe (no listing), else listed. Second: every key the listing
    found (None when declared), for record_listed."""
    from elo_per_token.ledger.keyspace import tail_or_why

    # Keys an earlier compaction recorded (listed-*) do not count here: a run another tool writes is listed by
    # each compaction, which is how its newer objects are found.
    found = tail_or_why(ledger, run_id, index, verify=verify, listed=False)
    if not isinstance(found, str):
        res.found_by, res.already = "declared", index.height
        return found, None
    res.why_listed = found
    from elo_per_token.ledger.changelog import change_sizes

    # Before the listing: a line logged after this point is past the noted size, so readers read it.
    res.changes = change_sizes(ledger, run_id)
    res.listed_at = time.time()
    all_keys = list_keys(
        ledger,
        run_id,
        on_count=(lambda n: on_progress("listing", n, 0)) if on_progress else None,
        index=index,
    )
    if all_keys.len() == 0 and index.height == 0:
        known = ", ".join(ledger.list_runs()[:20]) or "none"
        raise InputError(f"run {run_id!r} has no job results in {ledger.url} (runs: {known})", field="RUN")
    new = tail_keys(all_keys, index)
    res.already = all_keys.len() - len(new)
    return new, all_keys


def _start_state(ledger: Ledger, run_id: str, rebuild: bool, res: CompactResult) -> tuple[pl.DataFrame, int]:
    """(the committed segments' index, the first segment number never used), after dropping every segment
    (into res.dropped) when rebuilding."""
    # Numbers are never reused, not even after --rebuild: a reader that listed an old index must not find a
    # new segment under the same name.
    used_before = segment_state(ledger, run_id).used
    if rebuild:
        res.dropped = drop_segments(ledger, run_id)
    st = segment_state(ledger, run_id)
    return read_index(ledger, run_id, st.committed), max(st.used | used_before, default=0) + 1


def _temp_paths() -> tuple[str, str]:
    """Two fresh temporary files (closed): a segment's and its index's."""
    fd, seg = tempfile.mkstemp(prefix="ept-seg-", suffix=".parquet")
    os.close(fd)
    fd, idx = tempfile.mkstemp(prefix="ept-idx-", suffix=".parquet")
    os.close(fd)
    return seg, idx


def _commit_segment(ledger: Ledger, run_id: str, n: int, seg_file: str, idx_file: str) -> int:
    """Store a written segment and its index under the first free number from n on; the number taken."""
    # Claim a number: the exclusive create of the segment fails if another compactor took it.
    while not ledger.create_blob(run_id, seg_name(n), seg_file):
        n += 1
    if not ledger.create_blob(run_id, index_name(n), idx_file):
        raise RuntimeError(f"{ledger.blob_url(run_id, index_name(n))} appeared while committing")
    return n


def _write_segment(
    ledger: Ledger,
    run_id: str,
    keys: list[str],
    seg_file: str,
    chunk_jobs: int,
    threads: int,
    res: CompactResult,
    parsed: Callable[[int], None],
) -> tuple[pl.DataFrame | None, int]:
    """Parse the job objects `keys` chunk by chunk and write their rows to the Parquet file `seg_file`.

    Returns the segment's index, (job_key, rows) of each object that gave rows (None: none did, nothing
    written), and the rows written. Unparsable objects are counted in `res`; `parsed(n)` is told after each
    chunk how many objects it read."""
    import pyarrow.parquet as pq

    writer = None
    kept: list[pl.DataFrame] = []
    rows = 0
    for df, bad in parsed_chunks(
        ledger, run_id, keys, SEGMENT_SCHEMA, chunk_jobs=chunk_jobs, threads=threads
    ):
        res.unparsable += bad
        if df.height:
            df = df.with_columns((pl.col("line0") + 1).cast(pl.Int32).alias("line")).drop("line0")
            table = df.to_arrow()
            if writer is None:
                writer = pq.ParquetWriter(seg_file, table.schema, compression="zstd")
            writer.write_table(table)
            rows += df.height
            # An object folds in only if it gave rows: an empty one stays for the next compaction.
            # Rows are grouped by object, in key order: (key, rows) runs are the index.
            runs = df["job_key"].rle().struct.unnest()
            kept.append(
                runs.select(pl.col("value").alias("job_key"), pl.col("len").cast(pl.Int32).alias("rows"))
            )
        parsed(df["job_key"].n_unique() + len(bad))
    if writer is None:
        return None, 0
    writer.close()
    return pl.concat(kept), rows


def compact_run(
    ledger: Ledger,
    run_id: str,
    *,
    rebuild: bool = False,
    chunk_jobs: int = 20_000,
    max_segment_jobs: int = 500_000,
    threads: int = 32,
    on_progress: Callable[[str, int, int], None] | None = None,
    verify: bool | None = None,
) -> CompactResult:
    """Fold the run's job objects that no segment holds into new segment(s). See the module docstring.

    Args:
        ledger: the ledger holding the run.
        run_id: the run.
        rebuild: drop every segment first and fold all job objects again.
        chunk_jobs: objects read and parsed per chunk.
        max_segment_jobs: jobs per segment at most.
        threads: requests (or reads) in flight at once.
        on_progress: called with (phase, done, total).
        verify: list the run even when its declared keys would do (None: EPT_VERIFY_JOBS decides).
    """
    import pyarrow.parquet as pq

    res = CompactResult(run_id)
    index, next_n = _start_state(ledger, run_id, rebuild, res)
    new, listed = _unfolded_keys(ledger, run_id, index, res, verify=verify, on_progress=on_progress)
    done = [0]

    def parsed(n: int) -> None:
        done[0] += n
        if on_progress:
            on_progress("compacting", done[0], len(new))

    for seg_keys in _chunks(new, max_segment_jobs):
        tmp, tmp_idx = _temp_paths()
        try:
            folded, rows = _write_segment(ledger, run_id, seg_keys, tmp, chunk_jobs, threads, res, parsed)
            if folded is None:
                continue  # nothing parsable in this batch
            pq.write_table(folded.to_arrow(), tmp_idx, compression="zstd")
            next_n = _commit_segment(ledger, run_id, next_n, tmp, tmp_idx)
            res.segments.append(ledger.blob_url(run_id, seg_name(next_n)))
            res.jobs += folded.height
            res.rows += rows
            next_n += 1
        finally:
            for p in (tmp, tmp_idx):
                if os.path.exists(p):
                    os.unlink(p)
    if listed is not None:
        # After the segments are committed: a reader that finds the record finds the keys compacted.
        from elo_per_token.ledger.keyspace import record_listed

        res.recorded = record_listed(ledger, run_id, listed, res.listed_at, res.changes)
    return res
