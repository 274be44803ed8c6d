"""Reading a ledger run: its committed segments plus the job objects no segment holds."""

from __future__ import annotations

import polars as pl

from elo_per_token.analysis.io.recovery import _settle_flagged, _slow_read
from elo_per_token.analysis.io.scan import _collect_sliced, _scan_parquet
from elo_per_token.analysis.io.schema import RAW_SCHEMA, RECORD_SCHEMA, BadLine, _normalise
from elo_per_token.analysis.io.sources import RunSource, open_run, storage_options
from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger import JOB_SUFFIX, Ledger

RUN_CHUNK_JOBS = 20_000  # objects parsed per polars call: ~60 MB of JSONL, bounded whatever the run's size


def read_run(
    src: RunSource, *, skip_bad: bool = False, threads: int = 32, chunk_jobs: int = RUN_CHUNK_JOBS
) -> tuple[pl.DataFrame, list[BadLine], list[str]]:
    """A run's records (RECORD_SCHEMA, `file` naming each row's job object, Categorical), what was skipped,
    and the names read (segments, then the run's jobs/ folder for the objects no segment holds).

    Args:
        src: The run (its ledger and id).
        skip_bad: Skip bad lines (reported) instead of raising InputError.
        threads: Job objects read in flight.
        chunk_jobs: Job objects read and parsed per chunk.
    """
    from elo_per_token.analysis.io import taskcheck
    from elo_per_token.ledger.keyspace import unindexed_keys
    from elo_per_token.ledger.segments import read_index, seg_name, segment_state

    led = open_run(src)
    run = src.run_id
    # Every outcome must be of the run's recorded task (analysis.io.taskcheck): forged ones are refused.
    expected, skipped = taskcheck.expected_digests(led, run, skip_bad=skip_bad)
    committed = [] if src.objects_only else segment_state(led, run).committed
    raw = read_index(led, run, committed, dedupe=False)
    # In segment order: the lowest number holds a key. (A window over a million job keys took 8 s.) The
    # deduplicated index is the one the run's state was measured with (`ept analyze` reads it once).
    index = read_index(led, run, committed)
    dups = raw.filter(~raw["job_key"].is_first_distinct()) if raw.height != index.height else raw.clear()
    # The objects no segment holds: from the run's declared key space when it is safe, else by listing.
    tail, _ = unindexed_keys(led, run, index)
    parts: list[pl.DataFrame] = []
    names: list[str] = []
    for n in committed:
        url = led.blob_url(run, seg_name(n))
        names.append(url)
        drop = dups.filter(pl.col("seg") == n)["job_key"] if dups.height else None
        if expected is not None:
            forged_keys, bad = _forged_in_segment(led, run, url, expected, skip_bad=skip_bad)
            skipped += bad
            drop = forged_keys if drop is None else pl.concat([drop, forged_keys])
        got, bad = _read_segment(led, run, url, raw.filter(pl.col("seg") == n), drop, skip_bad=skip_bad)
        parts += got
        skipped += bad
    got_objects, bad_objects = _read_keys(
        led, run, tail, expected, skip_bad=skip_bad, threads=threads, chunk_jobs=chunk_jobs
    )
    parts += got_objects
    skipped += bad_objects
    names.append(led.run_url(run) + "/jobs/")
    parts = [p.drop("bad_field", "bad_msg").with_columns(pl.col("file").cast(pl.Categorical)) for p in parts]
    # No rechunk: a copy of the whole frame next to its parts was the read's peak (0.75 GB at 1M jobs).
    frame = pl.concat(parts, how="vertical", rechunk=False) if parts else pl.DataFrame(schema=RECORD_SCHEMA)
    if committed and tail:
        # Segments and the tail interleave job keys; one order (the job objects') keeps results identical
        # to reading the objects alone.
        frame = frame.sort(pl.col("file").cast(pl.String), "row")
    return frame, skipped, names


def read_run_jobs(
    src: RunSource, keys: list[str], *, skip_bad: bool = False, threads: int = 32
) -> tuple[pl.DataFrame, list[BadLine]]:
    """The records of the run's job objects `keys` alone (those that exist; no segment, no listing), validated
    as read_run validates them (a forged outcome refused): for a reader that holds the rest of the run already
    (the adaptive sweep reads each round's jobs once, coordinator/adaptive/sweep.py).

    Args:
        src: the run (ledger and run id).
        keys: job keys to read; keys with no object (failed jobs) are passed over.
        skip_bad: report bad lines instead of stopping at the first.
        threads: parallel object reads.

    Returns:
        The validated records, and the bad lines met (empty unless skip_bad).
    """
    from elo_per_token.analysis.io import taskcheck

    led = open_run(src)
    run = src.run_id
    expected, skipped = taskcheck.expected_digests(led, run, skip_bad=skip_bad)
    present = [k for k in keys if led.has_job(run, k)]  # a failed job has no object
    parts, bad = _read_keys(led, run, present, expected, skip_bad=skip_bad, threads=threads)
    parts = [p.drop("bad_field", "bad_msg").with_columns(pl.col("file").cast(pl.String)) for p in parts]
    frame = pl.concat(parts, how="vertical") if parts else pl.DataFrame(schema=RECORD_SCHEMA)
    return frame, skipped + bad


def _read_keys(
    led: Ledger,
    run: str,
    keys: list[str],
    expected: dict[str, str] | None,
    *,
    skip_bad: bool,
    threads: int,
    chunk_jobs: int = RUN_CHUNK_JOBS,
) -> tuple[list[pl.DataFrame], list[BadLine]]:
    """The job objects `keys`, chunk by chunk, validated; outcomes not of the run's recorded task (`expected`
    digests) refused, or skipped and reported with skip_bad."""
    from elo_per_token.analysis.io import taskcheck
    from elo_per_token.ledger.segments import parsed_chunks

    parts: list[pl.DataFrame] = []
    skipped: list[BadLine] = []
    schema = RAW_SCHEMA if expected is None else {**RAW_SCHEMA, taskcheck.DIGEST_FIELD: pl.String()}
    for df, unparsable in parsed_chunks(led, run, keys, schema, chunk_jobs=chunk_jobs, threads=threads):
        if expected is not None:
            forged = taskcheck.mismatches(df, expected)
            if forged.height:
                skipped += taskcheck.refuse_or_report(led, run, forged, skip_bad=skip_bad)
                df = df.filter(~pl.col("job_key").is_in(forged["job_key"].implode()))
        got, bad = _read_objects(led, run, df, unparsable, skip_bad=skip_bad)
        parts += got
        skipped += bad
    return parts, skipped


def _forged_in_segment(
    led: Ledger, run: str, url: str, expected: dict[str, str], *, skip_bad: bool
) -> tuple[pl.Series, list[BadLine]]:
    """Job keys of the segment's outcomes that are not of the run's recorded tasks (refused without skip_bad)."""
    from elo_per_token.analysis.io import taskcheck

    opts = storage_options() if url.startswith("s3://") else None
    try:
        forged = taskcheck.segment_mismatches(url, opts, expected)
    except (pl.exceptions.PolarsError, OSError):  # a corrupt segment: _read_segment names it
        return pl.Series("job_key", [], dtype=pl.String), []
    return forged["job_key"], taskcheck.refuse_or_report(led, run, forged, skip_bad=skip_bad)


def _read_segment(
    led: Ledger, run: str, url: str, index: pl.DataFrame, drop: pl.Series | None, *, skip_bad: bool
) -> tuple[list[pl.DataFrame], list[BadLine]]:
    """One segment, its rows named by job object and line (so every error names the object, as the objects
    themselves would). `index`: its (job_key, rows) in row order, so the object of each row comes from the
    index (one string per job, not per row). `drop`: keys an earlier segment holds (two compactions at once)."""
    import numpy as np  # here, not at the top: `ept tokens` on a log never needs it (0.1 s of its start-up)

    opts = storage_options() if url.startswith("s3://") else None
    urls = ((led.run_url(run) + "/jobs/") + index["job_key"] + JOB_SUFFIX).cast(pl.Categorical)
    per_row = pl.Series(np.repeat(np.arange(index.height, dtype=np.int64), index["rows"].to_numpy()))
    keep = None if drop is None or not drop.len() else ~index["job_key"].is_in(drop.implode())
    try:
        scan = _scan_parquet(url, opts, extra=("line",))
        n_rows = scan.select(pl.len()).collect().item()
        if n_rows != per_row.len():
            raise OSError(f"it holds {n_rows} rows, its index says {per_row.len()}")

        def rows(o: int, n: int) -> pl.LazyFrame:
            at = per_row.slice(o, n)
            lf = scan.slice(o, n).with_columns(
                urls.gather(at).alias("file"), (pl.col("line") - 1).cast(pl.Int64).alias("row")
            )
            return _normalise(lf if keep is None else lf.filter(keep.gather(at)))

        # A million-job segment is normalised slice by slice, in morsels, never over all rows at once.
        frame = _collect_sliced(rows, n_rows)
    except (pl.exceptions.PolarsError, OSError) as e:
        raise InputError(
            f"segment is corrupt or truncated ({str(e).splitlines()[0][:200]}); the job objects are intact: "
            f"rebuild the segments with `ept compact {run} --rebuild --ledger {led.url}`",
            file=url,
        ) from e
    return _settle_flagged(frame, skip_bad=skip_bad)


def _read_objects(
    led: Ledger, run: str, df: pl.DataFrame, unparsable: list[str], *, skip_bad: bool
) -> tuple[list[pl.DataFrame], list[BadLine]]:
    """A parsed chunk of job objects (ledger.segments.parsed_chunks), validated; objects polars could not
    parse go through the line-by-line path, which names the line."""
    prefix = led.run_url(run) + "/jobs/"
    df = df.with_columns(
        (pl.lit(prefix) + pl.col("job_key") + pl.lit(JOB_SUFFIX)).cast(pl.Categorical).alias("file"),
        pl.col("line0").alias("row"),
    )
    parts, skipped = _settle_flagged(_normalise(df.lazy()).collect(), skip_bad=skip_bad)
    for k in unparsable:
        good, bad = _slow_read(led.job_url(run, k), skip_bad=skip_bad)
        parts.append(good)
        skipped += bad
    return parts, skipped
