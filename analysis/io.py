"""Reading call logs, outcome records, judgments and ledger objects into one validated frame.

Fast path: polars scans every input with an explicit schema and flags bad rows with expressions.
Only when polars refuses a file, or a validation expression flags a row, is that file re-read
line by line (the error path) to name the exact line and field. With `skip_bad` the offending
lines are dropped, counted and listed instead.

The record schema is documented in docs/schema.md; contracts/records.py defines the ledger lines.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.ledger import JOB_SUFFIX

KINDS = ("call", "outcome", "judgment")
WINNERS = {"a": "A", "b": "B", "tie": "tie"}
DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json.gz", ".parquet")

# The usage breakdown kept as returned (OpenAI's details objects, Anthropic's cache fields): reasoning vs
# visible output, cached vs fresh input. Segments (analysis.segments) store the same fields, so both use this.
USAGE_BREAKDOWN: dict[str, pl.DataType] = {
    "prompt_tokens_details": pl.Struct({"cached_tokens": pl.Int64}),
    "completion_tokens_details": pl.Struct({"reasoning_tokens": pl.Int64}),
    "cache_read_input_tokens": pl.Int64(),
    "cache_creation_input_tokens": pl.Int64(),
}
# The two counts every cost figure uses, plus the breakdown.
_USAGE = pl.Struct({"prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, **USAGE_BREAKDOWN})
_CLASS = pl.Struct({"class": pl.String})

# Every field analysis uses; anything else on a line is ignored (extra fields are allowed).
RAW_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "task_id": pl.String(),
    "family": pl.String(),
    "strategy": pl.String(),
    "budget_n": pl.Int64(),
    "arm": pl.String(),
    "replicate": pl.Int64(),
    "role": pl.String(),
    "usage": _USAGE,
    "prompt_tokens": pl.Int64(),
    "completion_tokens": pl.Int64(),
    "usage_missing": pl.Boolean(),
    "error": _CLASS,
    "failure": _CLASS,
    "finish_reason": pl.String(),
    "score": pl.Float64(),
    "correct": pl.Boolean(),
    "winner": pl.String(),
    "arm_a": pl.String(),
    "arm_b": pl.String(),
    "strategy_a": pl.String(),
    "budget_a": pl.Int64(),
    "strategy_b": pl.String(),
    "budget_b": pl.Int64(),
}

_INT_FIELDS = ("budget_n", "replicate", "prompt_tokens", "completion_tokens", "budget_a", "budget_b")

# Labels every row repeats (a 1M-job run is 6M rows over ~50k task ids and a handful of arms): the records
# frame holds them as Categorical, a 4-byte code per row instead of a 16-byte string view (plus the text of
# longer ones). That is most of a large run's frame, and it is what `ept analyze` keeps while it works.
LABEL_COLUMNS = (
    "file", "kind", "task_id", "family", "strategy", "arm", "role", "finish_reason", "error_class", "winner", "arm_a",
    "arm_b",
)  # fmt: skip

# The normalised frame every later stage reads.
RECORD_SCHEMA: dict[str, pl.DataType] = {
    "file": pl.Categorical(),
    "row": pl.Int64(),  # 0-based index among the file's non-blank lines (parquet: row number)
    "kind": pl.Categorical(),
    "task_id": pl.Categorical(),
    "family": pl.Categorical(),
    "strategy": pl.Categorical(),
    "budget_n": pl.Int64(),
    "arm": pl.Categorical(),
    "replicate": pl.Int64(),
    "role": pl.Categorical(),
    "prompt_tokens": pl.Int64(),
    "completion_tokens": pl.Int64(),
    "usage_missing": pl.Boolean(),
    # The usage breakdown as returned (null when the server did not send it); see analysis.tokens.token_split.
    "reasoning_tokens": pl.Int64(),
    "cached_tokens": pl.Int64(),  # OpenAI prompt_tokens_details.cached_tokens or Anthropic cache_read_input_tokens
    "cache_creation_tokens": pl.Int64(),  # Anthropic cache_creation_input_tokens
    "finish_reason": pl.Categorical(),
    # call: the failed call's class; outcome: why it has no score (error) or why it scored 0 (failure)
    "error_class": pl.Categorical(),
    "scored_failure": pl.Boolean(),  # outcome scored as a loss because the strategy failed on the task
    "score": pl.Float64(),
    "winner": pl.Categorical(),
    "arm_a": pl.Categorical(),
    "arm_b": pl.Categorical(),
}


@dataclass(frozen=True)
class BadLine:
    file: str
    line: int
    field: str | None
    message: str

    def __str__(self) -> str:
        return str(InputError(self.message, self.file, self.line, self.field))


@dataclass
class Records:
    """All input records, normalised (RECORD_SCHEMA), plus what was skipped."""

    frame: pl.DataFrame
    files: list[str]
    skipped: list[BadLine] = field(default_factory=list)

    @property
    def calls(self) -> pl.DataFrame:
        return self.frame.filter(pl.col("kind") == "call")

    @property
    def outcomes(self) -> pl.DataFrame:
        return self.frame.filter(pl.col("kind") == "outcome")

    @property
    def judgments(self) -> pl.DataFrame:
        return self.frame.filter(pl.col("kind") == "judgment")


# ---------------------------------------------------------------- input discovery


def storage_options() -> dict[str, str]:
    """polars/object_store options for s3:// from the standard AWS environment variables."""
    opts: dict[str, str] = {}
    env = {
        "AWS_ENDPOINT_URL": "aws_endpoint_url",
        "AWS_ACCESS_KEY_ID": "aws_access_key_id",
        "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
        "AWS_SESSION_TOKEN": "aws_session_token",
        "AWS_REGION": "aws_region",
    }
    for var, key in env.items():
        if os.environ.get(var):
            opts[key] = os.environ[var]
    opts.setdefault("aws_region", os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    if opts.get("aws_endpoint_url", "").startswith("http://"):
        opts["aws_allow_http"] = "true"
    if "aws_access_key_id" not in opts:
        # An anonymous endpoint: don't let object_store wander off to the instance-metadata service.
        opts["aws_skip_signature"] = "true"
    return opts


def _s3_client() -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
        region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


def _is_data_file(name: str) -> bool:
    return name.endswith(DATA_SUFFIXES)


def expand_inputs(paths: Sequence[str]) -> list[str]:
    """Files, directories (recursive), globs and s3://bucket/prefix URLs -> sorted data files."""
    files: list[str] = []
    for p in paths:
        if p.startswith("s3://"):
            files.extend(_list_s3(p))
        elif os.path.isdir(p):
            found = sorted(
                os.path.join(root, f) for root, _, names in os.walk(p) for f in names if _is_data_file(f)
            )
            if not found:
                raise InputError("directory holds no .jsonl, .jsonl.gz or .parquet files", file=p)
            files.extend(_drop_compacted_copies(found))
        elif os.path.isfile(p):
            files.append(p)
        elif glob.has_magic(p):
            found = sorted(f for f in glob.glob(p, recursive=True) if os.path.isfile(f))
            if not found:
                raise InputError("glob matches no files", file=p)
            files.extend(found)
        else:
            raise InputError("no such file or directory", file=p)
    if not files:
        raise InputError("no input files given")
    return list(dict.fromkeys(files))


def _list_s3(url: str) -> list[str]:
    """s3://bucket/prefix (every data object under it) or s3://bucket/pattern with glob characters."""
    import fnmatch
    import re

    bucket, _, prefix = url[len("s3://") :].partition("/")
    if not bucket:
        raise InputError("s3 URL needs a bucket: s3://bucket/prefix", file=url)
    pattern = None
    if glob.has_magic(prefix):
        pattern = prefix
        prefix = re.split(r"[*?\[]", prefix, maxsplit=1)[0]
    client = _s3_client()
    keys: list[str] = []
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            keys.extend(
                o["Key"]
                for o in page.get("Contents", [])
                if _is_data_file(o["Key"]) and (pattern is None or fnmatch.fnmatchcase(o["Key"], pattern))
            )
    except Exception as e:  # botocore errors carry no secrets, but the message is scrubbed by the CLI anyway
        raise InputError(f"cannot list S3 prefix: {e}", file=url) from e
    if not keys:
        raise InputError("S3 prefix holds no .jsonl, .jsonl.gz or .parquet objects", file=url)
    return _drop_compacted_copies([f"s3://{bucket}/{k}" for k in sorted(keys)])


def _drop_compacted_copies(files: list[str]) -> list[str]:
    """A ledger run holds jobs/** and possibly compact/records.parquet, a copy of the same records:
    read a found directory's jobs/ objects and skip its compact/ copy so no record counts twice."""
    runs_with_jobs = {f.split("/jobs/")[0] for f in files if "/jobs/" in f}
    return [f for f in files if not ("/compact/" in f and f.split("/compact/")[0] in runs_with_jobs)]


# ---------------------------------------------------------------- ledger runs (segments + uncompacted objects)

# …/runs/<id> (a run: its segments plus the objects no segment holds) or …/runs/<id>/jobs (its objects only).
_RUN_URL = re.compile(r"^(?P<ledger>.*?)/?runs/(?P<run>[^/]+?)(?P<jobs>/jobs)?/*$")
RUN_CHUNK_JOBS = 20_000  # objects parsed per polars call: ~60 MB of JSONL, bounded whatever the run's size
# Parquet rows normalised per streaming query. One query over a whole 6M-row file peaked at 2.5 GB for a 1.1 GB
# result (the reader decodes ahead of the slower validation); 500k-row slices keep the working set small.
SLICE_ROWS = 500_000


def _collect_sliced(make: Callable[[int, int], pl.LazyFrame], n_rows: int, rows: int | None = None) -> pl.DataFrame:
    """make(offset, length) -> the query over those rows of the input, collected slice by slice (SLICE_ROWS)
    and kept as chunks (no copy of the whole result)."""
    rows = rows or SLICE_ROWS
    parts = [make(o, rows).collect(engine="streaming") for o in range(0, max(n_rows, 1), rows)]
    return pl.concat(parts, how="vertical", rechunk=False)


@dataclass(frozen=True)
class RunSource:
    ledger_url: str  # the ledger root: a folder or s3://bucket/prefix
    run_id: str
    objects_only: bool = False  # the path named the run's jobs/ folder: ignore its segments


def run_source(p: str) -> RunSource | None:
    """A run folder or s3://…/runs/<id> URL (with /jobs: the objects only); None for anything else."""
    m = _RUN_URL.match(p)
    if not m or glob.has_magic(p):
        return None
    if p.startswith("s3://"):
        led = m.group("ledger")
        if not led.startswith("s3://") or led == "s3:/":
            led = "s3://" + p[len("s3://") :].split("/", 1)[0]
        return RunSource(led, m.group("run"), bool(m.group("jobs")))
    if "://" in p or not os.path.isdir(p):
        return None
    run_dir = p.rstrip("/")[: -len("/jobs")] if m.group("jobs") else p.rstrip("/")
    if not any(os.path.exists(os.path.join(run_dir, n)) for n in ("jobs", "compact", "manifest.json")):
        return None
    return RunSource(m.group("ledger") or ".", m.group("run"), bool(m.group("jobs")))


def split_runs(paths: Sequence[str]) -> tuple[list[RunSource], list[str]]:
    runs: list[RunSource] = []
    plain: list[str] = []
    for p in paths:
        src = run_source(p)
        if src is None:
            plain.append(p)
        else:
            runs.append(src)
    return runs, plain


DEFAULT_LEDGER = "./ept-out/ledger"


def resolve_input(arg: str, ledger: str | None = None) -> str:
    """A command-line input as a path or URL. A run id (a bare name that is no file) means that run in
    `ledger` (default ./ept-out/ledger); a plan file means its run in its ledger (or `ledger`). Both are
    checked: a missing run lists the runs the ledger holds, an unreachable ledger says what is wrong."""
    from elo_per_token.contracts.ledger import check_run, open_ledger_for_reading

    if arg.endswith(".toml") and os.path.isfile(arg):
        from elo_per_token.coordinator.plan import load_plan

        plan = load_plan(arg)
        led = open_ledger_for_reading(ledger or plan.ledger)
        check_run(led, plan.run_id)
        return led.run_url(plan.run_id)
    bare = "/" not in arg and "://" not in arg and not glob.has_magic(arg) and not os.path.exists(arg)
    if bare and not arg.endswith(DATA_SUFFIXES):
        led = open_ledger_for_reading(ledger or DEFAULT_LEDGER)
        check_run(led, arg)
        return led.run_url(arg)
    return arg


def open_run(src: RunSource):
    """The run's ledger, checked: an unreachable ledger or a run it does not have is an InputError."""
    from elo_per_token.contracts.ledger import check_run, open_ledger_for_reading

    led = open_ledger_for_reading(src.ledger_url)
    check_run(led, src.run_id)
    return led


def read_run(
    src: RunSource, *, skip_bad: bool = False, threads: int = 32, chunk_jobs: int = RUN_CHUNK_JOBS
) -> tuple[pl.DataFrame, list[BadLine], list[str]]:
    """A run's records (RECORD_SCHEMA, `file` naming each row's job object, Categorical), what was skipped,
    and the names read (segments, then the run's jobs/ folder for the objects no segment holds)."""
    from elo_per_token.analysis.segments import (
        list_keys,
        parsed_chunks,
        read_index,
        seg_name,
        segment_state,
        tail_keys,
    )

    led = open_run(src)
    run = src.run_id
    committed = [] if src.objects_only else segment_state(led, run).committed
    raw = read_index(led, run, committed, dedupe=False)
    first = pl.int_range(pl.len()).over("job_key") == 0  # in segment order: the lowest number holds a key
    index = raw.filter(first)
    dups = raw.filter(~first)
    tail = tail_keys(list_keys(led, run, index=index), index)
    parts: list[pl.DataFrame] = []
    skipped: list[BadLine] = []
    names: list[str] = []
    for n in committed:
        url = led.blob_url(run, seg_name(n))
        names.append(url)
        drop = dups.filter(pl.col("seg") == n)["job_key"] if dups.height else None
        got, bad = _read_segment(led, run, url, raw.filter(pl.col("seg") == n), drop, skip_bad=skip_bad)
        parts += got
        skipped += bad
    for df, unparsable in parsed_chunks(led, run, tail, RAW_SCHEMA, chunk_jobs=chunk_jobs, threads=threads):
        got, bad = _read_objects(led, run, df, unparsable, skip_bad=skip_bad)
        parts += got
        skipped += bad
    names.append(led.run_url(run) + "/jobs/")
    parts = [p.drop("bad_field", "bad_msg").with_columns(pl.col("file").cast(pl.Categorical)) for p in parts]
    frame = pl.concat(parts, how="vertical") if parts else pl.DataFrame(schema=RECORD_SCHEMA)
    if committed and tail:
        # Segments and the tail interleave job keys; one order (the job objects') keeps results identical
        # to reading the objects alone.
        frame = frame.sort(pl.col("file").cast(pl.String), "row")
    return frame, skipped, names


def _read_segment(
    led, run: str, url: str, index: pl.DataFrame, drop: pl.Series | None, *, skip_bad: bool
) -> tuple[list[pl.DataFrame], list[BadLine]]:
    """One segment, its rows named by job object and line (so every error names the object, as the objects
    themselves would). `index`: its (job_key, rows) in row order, so the object of each row comes from the
    index (one string per job, not per row). `drop`: keys an earlier segment holds (two compactions at once)."""
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
            lf = scan.slice(o, n).with_columns(urls.gather(at).alias("file"), (pl.col("line") - 1).cast(pl.Int64).alias("row"))
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
    led, run: str, df: pl.DataFrame, unparsable: list[str], *, skip_bad: bool
) -> tuple[list[pl.DataFrame], list[BadLine]]:
    """A parsed chunk of job objects (analysis.segments.parsed_chunks), validated; objects polars could not
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


# ---------------------------------------------------------------- fast path


def _scan(files: list[str], schema: dict[str, pl.DataType] | None = None) -> pl.LazyFrame:
    """One lazy scan over same-format files, with the file path and per-file row index. `schema`: parse only
    these RAW_SCHEMA fields of JSON lines (the others read as null, so no check on them fires)."""
    opts = storage_options() if any(f.startswith("s3://") for f in files) else None
    if files[0].endswith(".parquet"):
        frames = [_scan_parquet(f, opts) for f in files]
        return pl.concat(frames, how="vertical")
    schema = schema or RAW_SCHEMA
    absent = [pl.lit(None, dt).alias(k) for k, dt in RAW_SCHEMA.items() if k not in schema]
    if len(files) == 1:
        # One file: a plain row index, no per-row path column and no window over it.
        lf = pl.scan_ndjson(files[0], schema=schema, storage_options=opts, row_index_name="row")
        return lf.with_columns(pl.col("row").cast(pl.Int64), pl.lit(files[0]).alias("file"), *absent)
    lf = pl.scan_ndjson(files, schema=schema, include_file_paths="file", storage_options=opts)
    return lf.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("file").alias("row"), *absent)


# What `ept tokens` parses and validates: the call fields, and what classifies a line without `kind`.
TOKENS_FIELDS = (
    "kind", "task_id", "family", "strategy", "budget_n", "arm", "replicate", "role", "usage", "prompt_tokens",
    "completion_tokens", "usage_missing", "error", "score", "correct", "winner",
)  # fmt: skip


_TYPE_WORDS = {pl.Int64(): "an integer", pl.Float64(): "a number", pl.Boolean(): "true or false", pl.String(): "a string"}


def _scan_parquet(
    f: str, opts: dict[str, str] | None, *, strict: bool = True, extra: tuple[str, ...] = ()
) -> pl.LazyFrame:
    """A parquet file as RAW_SCHEMA columns. strict=False turns values that do not convert into nulls and
    adds `_type_bad` / `_type_msg` for the first such field per row (the error path names rows, not files)."""
    # The row number from the scan itself: an int_range over pl.len() made the streaming engine hold the whole
    # file (every raw column, strings included) before normalising it — 2.5 GB for a 1M-job run.
    lf = pl.scan_parquet(f, storage_options=opts, row_index_name="_row_ix")
    have = lf.collect_schema()
    failed: list[tuple[str, str, pl.Expr]] = []

    def conv(src: pl.Expr, src_dtype: pl.DataType, dtype: pl.DataType, label: str) -> pl.Expr:
        if not strict and src_dtype != dtype:
            lost = src.is_not_null() & src.cast(dtype, strict=False).is_null()
            failed.append((label, f"must be {_TYPE_WORDS.get(dtype, str(dtype))}", lost))
        return src.cast(dtype, strict=strict)

    cols = []
    for name, dtype in RAW_SCHEMA.items():
        if name == "usage" and isinstance(have.get("usage"), pl.Struct):
            # Keep the two counts (checked) and the breakdown (converted when present, else null: it is
            # informational); a usage struct may carry more (total_tokens…), which is dropped.
            inner = {fl.name: fl.dtype for fl in have["usage"].fields}
            want = _USAGE.to_schema()

            def field_expr(k: str, inner: dict = inner, want: dict = want) -> pl.Expr:
                if k not in inner:
                    return pl.lit(None, want[k])
                src = pl.col("usage").struct.field(k)
                if k in ("prompt_tokens", "completion_tokens"):
                    return conv(src, inner[k], pl.Int64(), f"usage.{k}")
                return src.cast(want[k], strict=False)

            cols.append(pl.struct(field_expr(k).alias(k) for k in want).alias("usage"))
        elif name in have and dtype == _CLASS and have[name] == pl.String():
            # Segments (analysis.segments) keep object fields as JSON text: take the class out of it.
            cols.append(pl.struct(pl.col(name).str.json_path_match("$.class").alias("class")).alias(name))
        elif name in have:
            cols.append(conv(pl.col(name), have[name], dtype, name).alias(name))
        else:
            cols.append(pl.lit(None, dtype).alias(name))
    cols += [pl.col(c) for c in extra]
    if not strict:
        first = [(pl.when(lost).then(pl.lit(i, pl.Int32))) for i, (_, _, lost) in enumerate(failed)]
        idx = pl.min_horizontal(first) if first else pl.lit(None, pl.Int32)
        labels = {i: label for i, (label, _, _) in enumerate(failed)}
        msgs = {i: msg for i, (_, msg, _) in enumerate(failed)}
        cols.append(idx.replace_strict(labels, default=None, return_dtype=pl.String).alias("_type_bad"))
        cols.append(idx.replace_strict(msgs, default=None, return_dtype=pl.String).alias("_type_msg"))
    return lf.select(*cols, pl.col("_row_ix").cast(pl.Int64).alias("row")).with_columns(
        pl.lit(f, pl.Categorical).alias("file")
    )


# polars reads any JSON value into a String column as its text, so `"task_id": 5` and `"task_id": "5"` look the
# same on the fast path. Ids that could be a bare JSON number, literal, object or array send their file to the
# line-by-line path (which sees the JSON types); ids that are genuine strings are then accepted there.
_SUSPECT_ID = r"^(-?[0-9][0-9.eE+-]*|true|false|null|\{.*|\[.*)$"
_SUSPECT_MSG = "must be a string"
_ID_FIELDS = ("task_id", "family", "strategy", "arm")


def _normalise(lf: pl.LazyFrame, *, suspect_ids: bool = True, categorical: bool = True) -> pl.LazyFrame:
    """Raw schema -> RECORD_SCHEMA plus a `bad_field`/`bad_msg` pair describing the first problem.
    suspect_ids=False on the line-by-line path, where the JSON types were already checked. categorical=False
    keeps LABEL_COLUMNS as strings (a query that only aggregates them has no frame to keep small)."""
    kind_guess = (
        pl.when(pl.col("winner").is_not_null())
        .then(pl.lit("judgment"))
        .when(pl.col("score").is_not_null() | pl.col("correct").is_not_null())
        .then(pl.lit("outcome"))
        .otherwise(pl.lit("call"))
    )
    prompt = pl.coalesce(pl.col("usage").struct.field("prompt_tokens"), pl.col("prompt_tokens"))
    completion = pl.coalesce(pl.col("usage").struct.field("completion_tokens"), pl.col("completion_tokens"))
    arm_from = pl.col("strategy") + pl.lit("@") + pl.col("budget_n").cast(pl.String)
    winner = pl.col("winner").str.to_lowercase().replace_strict(WINNERS, default=None, return_dtype=pl.String)
    lf = lf.with_columns(
        pl.coalesce(pl.col("kind"), kind_guess).alias("kind_r"),
        prompt.alias("p"),
        completion.alias("c"),
    )
    kind = pl.col("kind_r")
    call_or_outcome = kind.is_in(["call", "outcome"])
    checks: list[tuple[str, str, pl.Expr]] = [
        ("kind", "must be one of call, outcome, judgment", ~kind.is_in(KINDS)),
        ("task_id", "is required", pl.col("task_id").is_null()),
        *(
            (name, "must not be empty or hold NUL/control characters",
             (pl.col(name).str.strip_chars() == "") | pl.col(name).str.contains(r"[\x00-\x1f\x7f]"))
            for name in _ID_FIELDS
        ),
        *(((name, _SUSPECT_MSG, pl.col(name).str.contains(_SUSPECT_ID)) for name in _ID_FIELDS) if suspect_ids else ()),
        ("strategy", "is required", call_or_outcome & pl.col("strategy").is_null()),
        ("budget_n", "is required", call_or_outcome & pl.col("budget_n").is_null()),
        ("budget_n", "must be >= 0", pl.col("budget_n") < 0),
        ("replicate", "must be >= 0", pl.col("replicate") < 0),
        ("usage.prompt_tokens", "must be >= 0", pl.col("p") < 0),
        ("usage.completion_tokens", "must be >= 0", pl.col("c") < 0),
        (
            "usage.prompt_tokens",
            "is missing while usage.completion_tokens is present",
            (kind == "call") & pl.col("p").is_null() & pl.col("c").is_not_null(),
        ),
        (
            "usage.completion_tokens",
            "is missing while usage.prompt_tokens is present",
            (kind == "call") & pl.col("c").is_null() & pl.col("p").is_not_null(),
        ),
        ("score", "must be between 0 and 1", (pl.col("score") < 0) | (pl.col("score") > 1)),
        ("score", "must be a number", pl.col("score").is_nan()),
        ("winner", "is required for a judgment", (kind == "judgment") & pl.col("winner").is_null()),
        ("winner", "must be A, B or tie", pl.col("winner").is_not_null() & winner.is_null()),
        (
            "arm_a",
            "is required for a judgment (or strategy_a and budget_a)",
            (kind == "judgment")
            & pl.col("arm_a").is_null()
            & (pl.col("strategy_a").is_null() | pl.col("budget_a").is_null()),
        ),
        (
            "arm_b",
            "is required for a judgment (or strategy_b and budget_b)",
            (kind == "judgment")
            & pl.col("arm_b").is_null()
            & (pl.col("strategy_b").is_null() | pl.col("budget_b").is_null()),
        ),
    ]
    # One integer per row (index of the first failing check) is far cheaper than two long when-chains.
    first_bad = pl.min_horizontal(
        [pl.when(cond.fill_null(False)).then(pl.lit(i, pl.Int32)) for i, (_, _, cond) in enumerate(checks)]
    )
    bad_field = first_bad.replace_strict(
        {i: f for i, (f, _, _) in enumerate(checks)}, default=None, return_dtype=pl.String
    )
    bad_msg = first_bad.replace_strict(
        {i: m for i, (_, m, _) in enumerate(checks)}, default=None, return_dtype=pl.String
    )
    arm_a = pl.coalesce(pl.col("arm_a"), pl.col("strategy_a") + pl.lit("@") + pl.col("budget_a").cast(pl.String))
    arm_b = pl.coalesce(pl.col("arm_b"), pl.col("strategy_b") + pl.lit("@") + pl.col("budget_b").cast(pl.String))
    out = lf.select(
        pl.col("file"),
        pl.col("row"),
        kind.alias("kind"),
        pl.col("task_id"),
        pl.col("family"),
        pl.col("strategy"),
        pl.col("budget_n"),
        pl.coalesce(pl.col("arm"), arm_from).alias("arm"),
        pl.col("replicate").fill_null(0),
        pl.col("role"),
        pl.col("p").alias("prompt_tokens"),
        pl.col("c").alias("completion_tokens"),
        # A failed call without usage was not billed: not a missing usage. The explicit flag always counts
        # (e.g. a billed response whose usage was invalid, stored as null).
        (
            (kind == "call")
            & (
                pl.col("usage_missing").fill_null(False)
                | (pl.col("p").is_null() & pl.col("error").struct.field("class").is_null())
            )
        ).alias("usage_missing"),
        pl.col("usage").struct.field("completion_tokens_details").struct.field("reasoning_tokens").alias(
            "reasoning_tokens"
        ),
        pl.coalesce(
            pl.col("usage").struct.field("prompt_tokens_details").struct.field("cached_tokens"),
            pl.col("usage").struct.field("cache_read_input_tokens"),
        ).alias("cached_tokens"),
        pl.col("usage").struct.field("cache_creation_input_tokens").alias("cache_creation_tokens"),
        pl.col("finish_reason"),
        pl.coalesce(pl.col("failure").struct.field("class"), pl.col("error").struct.field("class")).alias(
            "error_class"
        ),
        ((kind == "outcome") & pl.col("failure").struct.field("class").is_not_null()).alias("scored_failure"),
        pl.coalesce(pl.col("score"), pl.col("correct").cast(pl.Float64)).alias("score"),
        winner.alias("winner"),
        arm_a.alias("arm_a"),
        arm_b.alias("arm_b"),
        bad_field.alias("bad_field"),
        bad_msg.alias("bad_msg"),
    )
    if not categorical:
        return out
    # In the same (streaming) query: the string columns are never materialised whole.
    return out.with_columns(pl.col(*LABEL_COLUMNS, "bad_field", "bad_msg").cast(pl.Categorical))


# ---------------------------------------------------------------- error path (line by line)


def _open_text(f: str) -> list[str]:
    try:
        return _read_lines(f)
    except Exception as e:  # the error path must end in a named error, not a traceback
        raise InputError(f"cannot read: {e}", file=f) from e


def _read_lines(f: str) -> list[str]:
    if f.startswith("s3://"):
        bucket, _, key = f[len("s3://") :].partition("/")
        data = _s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()
        if f.endswith(".gz"):
            data = gzip.decompress(data)
        return _split_lines(data.decode("utf-8", errors="replace"))
    if f.endswith(".gz"):
        with gzip.open(f, "rt", encoding="utf-8", errors="replace", newline="") as fh:
            return _split_lines(fh.read())
    with open(f, encoding="utf-8", errors="replace", newline="") as fh:
        return _split_lines(fh.read())


def _split_lines(text: str) -> list[str]:
    # JSONL lines end at "\n" only: str.splitlines() would also split at \x85, \u2028, \r… inside a line and
    # shift every reported line number after it.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


class _NotJson(ValueError):
    """NaN / Infinity / -Infinity: Python's json accepts them, JSON (and polars) do not."""


def _refuse_constant(name: str) -> Any:
    raise _NotJson(name)


def _constant_field(text: str, constant: str) -> str | None:
    import re

    m = re.search(r'"([^"\\]{1,64})"\s*:\s*' + re.escape(constant), text)
    return m.group(1) if m else None


def _type_problem(obj: dict[str, Any]) -> tuple[str, str] | None:
    """Same type rules polars applies with RAW_SCHEMA: integer fields take JSON integers only (not 4.0,
    not "4"), number and boolean fields their own JSON type. String fields, like polars, take any JSON
    value and keep its text, so both paths accept exactly the same lines."""
    usage = obj.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return "usage", f"must be an object, got {type(usage).__name__}"
    for name in _ID_FIELDS:
        v = obj.get(name)
        if v is not None and not isinstance(v, str):
            return name, f"{_SUSPECT_MSG}, got {json.dumps(v)[:40]}"
    for name in _INT_FIELDS:
        src = usage if name in ("prompt_tokens", "completion_tokens") and usage and name in usage else obj
        v = src.get(name)
        label = f"usage.{name}" if src is usage else name
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            return label, f"must be an integer, got {json.dumps(v)}"
    s = obj.get("score")
    if s is not None and (isinstance(s, bool) or not isinstance(s, int | float)):
        return "score", f"must be a number between 0 and 1, got {json.dumps(s)}"
    c = obj.get("correct")
    if c is not None and not isinstance(c, bool):
        return "correct", f"must be true or false, got {json.dumps(c)}"
    for name in ("usage_missing",):
        v = obj.get(name)
        if v is not None and not isinstance(v, bool):
            return name, f"must be true or false, got {json.dumps(v)}"
    return None


def _slow_read(f: str, *, skip_bad: bool) -> tuple[pl.DataFrame, list[BadLine]]:
    """Line-by-line pass over one file: precise (line, field) for every bad line.

    Type problems are found per line in Python (rules mirroring polars'); the lines that pass are then
    parsed by polars itself with the same schema, so accepted lines read exactly as on the fast path,
    and checked with the same expressions.
    """
    if f.endswith(".parquet"):
        return _slow_read_parquet(f, skip_bad=skip_bad)
    bad: list[BadLine] = []
    texts: list[str] = []
    rows: list[int] = []
    lines: list[int] = []
    row = -1
    for i, text in enumerate(_open_text(f), start=1):
        if not text.strip():
            continue
        row += 1
        try:
            obj = json.loads(text, parse_constant=_refuse_constant)
        except json.JSONDecodeError as e:
            bad.append(BadLine(f, i, None, f"malformed JSON: {e.msg} at column {e.colno}"))
        except _NotJson as e:
            bad.append(BadLine(f, i, _constant_field(text, str(e)), f"{e} is not a JSON value (numbers must be finite)"))
        except RecursionError:
            bad.append(BadLine(f, i, None, "malformed JSON: nested too deeply (no record nests more than a few levels)"))
        else:
            problem = _type_problem(obj) if isinstance(obj, dict) else (None, "a line must be a JSON object")
            if problem:
                bad.append(BadLine(f, i, problem[0], problem[1]))
            else:
                texts.append(text)
                rows.append(row)
                lines.append(i)
        if bad and not skip_bad:
            break  # earlier lines are still checked below: the first bad line overall is reported
    raw = _parse_lines(f, texts, rows, lines, bad).with_columns(
        pl.lit(f).alias("file"), pl.Series("row", rows, dtype=pl.Int64)
    )
    norm = _normalise(raw.lazy(), suspect_ids=False).collect().with_columns(pl.Series("_line", lines, dtype=pl.Int64))
    flagged = norm.filter(pl.col("bad_field").is_not_null())
    bad.extend(
        BadLine(f, ln, fld, msg)
        for ln, fld, msg in zip(flagged["_line"], flagged["bad_field"], flagged["bad_msg"], strict=True)
    )
    bad.sort(key=lambda b: b.line)
    if bad and not skip_bad:
        raise InputError(bad[0].message, bad[0].file, bad[0].line, bad[0].field)
    return norm.filter(pl.col("bad_field").is_null()).drop("_line"), bad


def _parse_lines(
    f: str, texts: list[str], rows: list[int], lines: list[int], bad: list[BadLine]
) -> pl.DataFrame:
    """polars parse of lines that passed the Python type rules; a line polars still refuses is named
    and removed (texts/rows/lines are edited in place)."""
    def parse(chunk: list[str]) -> pl.DataFrame:
        return pl.read_ndjson(io.BytesIO(("\n".join(chunk) + "\n").encode()), schema=RAW_SCHEMA)

    if not texts:
        return pl.DataFrame(schema=RAW_SCHEMA)
    try:
        return parse(texts)
    except pl.exceptions.PolarsError:
        keep = []
        for k, t in enumerate(texts):
            try:
                parse([t])
                keep.append(k)
            except pl.exceptions.PolarsError as e:
                bad.append(BadLine(f, lines[k], None, f"unreadable line: {str(e).splitlines()[0]}"))
        texts[:] = [texts[k] for k in keep]
        rows[:] = [rows[k] for k in keep]
        lines[:] = [lines[k] for k in keep]
        return parse(texts) if texts else pl.DataFrame(schema=RAW_SCHEMA)


def _slow_read_parquet(f: str, *, skip_bad: bool) -> tuple[pl.DataFrame, list[BadLine]]:
    """Rows are named by 1-based row number. A column of the wrong type is checked value by value: a row
    whose value does not convert (say budget_n "x" in a string column) is the bad row, not the whole file."""
    opts = storage_options() if f.startswith("s3://") else None
    try:
        raw = _scan_parquet(f, opts, strict=False).collect()
    except (pl.exceptions.PolarsError, OSError) as e:
        # Unreadable, or a column no value of which can become its field's type (a struct for budget_n).
        raise InputError(f"cannot read parquet: {e}", file=f) from e
    # A value that did not convert is the row's first problem (its null would otherwise read as "missing").
    norm = _normalise(raw.lazy(), suspect_ids=False).collect().with_columns(
        pl.coalesce(raw["_type_bad"], pl.col("bad_field")).alias("bad_field"),
        pl.coalesce(raw["_type_msg"], pl.col("bad_msg")).alias("bad_msg"),
    )
    flagged = norm.filter(pl.col("bad_field").is_not_null())
    bad = [
        BadLine(f, r + 1, fld, msg)
        for r, fld, msg in zip(flagged["row"], flagged["bad_field"], flagged["bad_msg"], strict=True)
    ]
    if bad and not skip_bad:
        raise InputError(bad[0].message + " (parquet row)", bad[0].file, bad[0].line, bad[0].field)
    return norm.filter(pl.col("bad_field").is_null()), bad


def line_of(file: str, row: int) -> int:
    """1-based line number of the file's `row`-th non-blank line (error path only)."""
    if file.endswith(".parquet"):
        return row + 1
    seen = -1
    for i, text in enumerate(_open_text(file), start=1):
        if text.strip():
            seen += 1
            if seen == row:
                return i
    return row + 1


# ---------------------------------------------------------------- entry point


def _fast(files: list[str]) -> pl.DataFrame | None:
    try:
        if files[0].endswith(".parquet"):
            opts = storage_options() if any(f.startswith("s3://") for f in files) else None
            parts = []
            for f in files:
                n = pl.scan_parquet(f, storage_options=opts).select(pl.len()).collect().item()
                scan = _scan([f])
                parts.append(_collect_sliced(lambda o, k, scan=scan: _normalise(scan.slice(o, k)), n))
            return pl.concat(parts, how="vertical", rechunk=False)
        return _normalise(_scan(files)).collect(engine="streaming")
    except (pl.exceptions.PolarsError, OSError, ValueError):
        return None


def _read_group(group: list[str], *, skip_bad: bool) -> tuple[list[pl.DataFrame], list[BadLine]]:
    """Fast path for the whole group; if polars refuses it, file by file; line by line only where needed."""
    frame = _fast(group)
    if frame is None and len(group) > 1:
        parts: list[pl.DataFrame] = []
        skipped: list[BadLine] = []
        for f in group:
            got, bad = _read_group([f], skip_bad=skip_bad)
            parts += got
            skipped += bad
        return parts, skipped
    if frame is None:
        return _as_list(_slow_read(group[0], skip_bad=skip_bad))
    return _settle_flagged(frame, skip_bad=skip_bad)


def _settle_flagged(frame: pl.DataFrame, *, skip_bad: bool) -> tuple[list[pl.DataFrame], list[BadLine]]:
    """Rows flagged by the validation expressions: their files are re-read line by line, which names the
    line (or, with skip_bad, keeps the good lines of those files)."""
    flagged = frame.filter(pl.col("bad_field").is_not_null())
    if flagged.height == 0:
        return [frame], []
    bad_files = sorted(flagged["file"].cast(pl.String).unique().to_list())
    parts = [frame.filter(~pl.col("file").cast(pl.String).is_in(bad_files))]
    skipped = []
    for f in bad_files:
        good, bad = _slow_read(f, skip_bad=skip_bad)
        if not bad and set(flagged.filter(pl.col("file") == f)["bad_msg"].to_list()) == {_SUSPECT_MSG}:
            parts.append(good)  # number-like ids that the JSON shows are strings: fine
            continue
        if not bad:
            # polars flagged a row the line-by-line rules accept: report the row rather than guess.
            row = flagged.filter(pl.col("file") == f).row(0, named=True)
            raise InputError(row["bad_msg"], f, line_of(f, row["row"]), row["bad_field"])
        parts.append(good)
        skipped += bad
    return parts, skipped


def _as_list(res: tuple[pl.DataFrame, list[BadLine]]) -> tuple[list[pl.DataFrame], list[BadLine]]:
    return [res[0]], res[1]


def read_records(
    paths: Sequence[str],
    *,
    skip_bad: bool = False,
    tasks_file: str | None = None,
    resolve_families: bool = True,
) -> Records:
    """Read every input into one validated frame (RECORD_SCHEMA) with a resolved `family` per task.

    resolve_families=False leaves `family` as written on each line (token counting needs no families).
    """
    runs, plain = split_runs(paths)
    files = expand_inputs(plain) if plain else []
    groups = {
        "parquet": [f for f in files if f.endswith(".parquet")],
        "json": [f for f in files if not f.endswith(".parquet")],
    }
    parts: list[pl.DataFrame] = []
    skipped: list[BadLine] = []
    for group in groups.values():
        if group:
            got, bad = _read_group(group, skip_bad=skip_bad)
            parts += [p.drop("bad_field", "bad_msg") for p in got]
            skipped += bad
    for run in runs:
        got_run, bad, names = read_run(run, skip_bad=skip_bad)
        parts.append(got_run)
        skipped += bad
        files += names
    if any(p.schema["file"] == pl.Categorical for p in parts):
        # A run's rows name their job object in a Categorical column (4 bytes a row, not the path).
        parts = [p.with_columns(pl.col("file").cast(pl.Categorical)) for p in parts]
    frame = pl.concat(parts, how="vertical")
    if frame.height == 0:
        raise InputError("no records in the input", file=", ".join(files[:3]) + (" …" if len(files) > 3 else ""))
    if resolve_families:
        frame = _resolve_families(frame, tasks_file)
    return Records(frame=frame.select(list(RECORD_SCHEMA)), files=files, skipped=skipped)


@dataclass
class Summary:
    """The result of read_summary: a small frame computed from every record, plus the inputs and skips."""

    frame: pl.DataFrame
    files: list[str]
    skipped: list[BadLine] = field(default_factory=list)


def read_summary(
    paths: Sequence[str],
    summarise: Callable[[pl.LazyFrame], pl.LazyFrame],
    *,
    skip_bad: bool = False,
    fields: Sequence[str] | None = None,
) -> Summary:
    """`summarise` (a lazy query over the normalised records, RECORD_SCHEMA without families) computed in
    ONE pass over the files, fused with the validation check, so a million-line log is never held as a
    frame. Same validation as read_records: if any line is bad, or polars refuses a file, or the input is
    empty, the answer comes from read_records instead, which names the line (or skips it with skip_bad).
    `fields`: parse (and so validate) only these fields of JSON lines — the JSON parse is most of the cost.
    """
    runs, _ = split_runs(paths)
    files = [] if runs else expand_inputs(paths)
    if files and (all(f.endswith(".parquet") for f in files) or not any(f.endswith(".parquet") for f in files)):
        try:
            schema = {k: RAW_SCHEMA[k] for k in fields} if fields else None
            records = _normalise(_scan(files, schema), categorical=False)
            check = records.select(pl.col("bad_field").is_not_null().any().alias("bad"), pl.len().alias("n"))
            out, seen = pl.collect_all([summarise(records.drop("bad_field", "bad_msg")), check])
            if not seen["bad"].item() and seen["n"].item() > 0:
                return Summary(out, files)
        except (pl.exceptions.PolarsError, OSError, ValueError):
            pass
    rec = read_records(paths, skip_bad=skip_bad, resolve_families=False)
    return Summary(summarise(rec.frame.lazy()).collect(), rec.files, rec.skipped)


def read_tasks_file(path: str) -> pl.DataFrame:
    """A tasks file: JSONL with task_id and family (other fields ignored)."""
    try:
        df = pl.read_ndjson(path, schema={"task_id": pl.String, "family": pl.String})
    except (pl.exceptions.PolarsError, OSError) as e:
        raise InputError(f"cannot read tasks file: {e}", file=path) from e
    missing = df.with_row_index("row").filter(pl.col("task_id").is_null() | pl.col("family").is_null())
    if missing.height:
        r = missing.row(0, named=True)
        fld = "task_id" if r["task_id"] is None else "family"
        raise InputError("is required in a tasks file", path, line_of(path, r["row"]), fld)
    return df.unique("task_id", keep="first")


def _resolve_families(frame: pl.DataFrame, tasks_file: str | None) -> pl.DataFrame:
    """family field > tasks file > task_id prefix before the last '-' > 'default'.

    An explicit tasks file wins over the prefix heuristic because it is the user's own statement.
    One task has one family: conflicting `family` fields for the same task_id are an input error.
    """
    given = frame.select("file", "row", "task_id", "family").filter(pl.col("family").is_not_null())
    first = given.group_by("task_id", maintain_order=True).agg(pl.col("family").first().alias("fam_given"))
    conflict = given.join(first, on="task_id", maintain_order="left").filter(pl.col("family") != pl.col("fam_given"))
    if conflict.height:
        r = conflict.row(0, named=True)
        raise InputError(
            f"task {r['task_id']!r} already has family {r['fam_given']!r}; got {r['family']!r}",
            r["file"],
            line_of(r["file"], r["row"]),
            "family",
        )
    # Resolve once per distinct task, then one join back (a regex over every line would be slow).
    tasks = frame.select("task_id").unique().join(first, on="task_id", how="left")
    tasks = tasks.with_columns(pl.col("task_id", "fam_given").cast(pl.String))
    if tasks_file:
        tasks = tasks.join(read_tasks_file(tasks_file).rename({"family": "fam_file"}), on="task_id", how="left")
    else:
        tasks = tasks.with_columns(pl.lit(None, pl.String).alias("fam_file"))
    prefix = (
        pl.when(pl.col("task_id").str.contains("-"))
        .then(pl.col("task_id").str.replace(r"-[^-]*$", ""))
        .otherwise(pl.lit("default"))
    )
    tasks = tasks.select("task_id", pl.coalesce(pl.col("fam_given"), pl.col("fam_file"), prefix).alias("family"))
    # Join the task ids only and add the one column: joining the whole frame would copy every column.
    tasks = tasks.with_columns(pl.col("task_id", "family").cast(pl.Categorical))
    fam = frame.select("task_id").join(tasks, on="task_id", how="left", maintain_order="left")["family"]
    return frame.with_columns(fam)
