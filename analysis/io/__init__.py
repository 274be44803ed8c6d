"""Reading call logs, outcome records, judgments and ledger objects into one validated frame.

Fast path: polars scans every input with an explicit schema and flags bad rows with expressions.
Only when polars refuses a file, or a validation expression flags a row, is that file re-read
line by line (the error path) to name the exact line and field. With `skip_bad` the offending
lines are dropped, counted and listed instead.

The record schema is documented in docs/schema.md; contracts/records.py defines the ledger lines.

The package: sources (inputs: files, globs, s3:// listings, ledger runs; a file's lines), schema (the
schemas and the rules: polars checks next to their Python mirror), scan (the fast path), recovery (the
line-by-line path), runs (a ledger run's segments and job objects), families (family per task). This
module holds the entry points, read_records and read_summary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import polars as pl

# The submodules' public API (and the helpers read_records below uses); private helpers are imported from
# their own submodule.
from elo_per_token.analysis.io.families import _resolve_families, read_tasks_file
from elo_per_token.analysis.io.recovery import (
    _settle_flagged,
    _slow_read,
    line_of,
)
from elo_per_token.analysis.io.runs import RUN_CHUNK_JOBS, read_run
from elo_per_token.analysis.io.scan import _fast, _scan
from elo_per_token.analysis.io.schema import (
    GROUP_KEYS,
    KINDS,
    LABEL_COLUMNS,
    RAW_SCHEMA,
    RECORD_SCHEMA,
    TOKENS_FIELDS,
    USAGE_BREAKDOWN,
    WINNERS,
    BadLine,
    _group_rule_split,
    _prepare,
    fields_schema,
    ids_pass,
)
from elo_per_token.analysis.io.sources import (
    DATA_SUFFIXES,
    DEFAULT_LEDGER,
    RunSource,
    expand_inputs,
    open_run,
    read_failures,
    read_manifest,
    resolve_input,
    run_of_file,
    run_source,
    runs_of_files,
    split_runs,
    storage_options,
)
from elo_per_token.contracts.errors import InputError

__all__ = [
    "DATA_SUFFIXES",
    "DEFAULT_LEDGER",
    "KINDS",
    "LABEL_COLUMNS",
    "RAW_SCHEMA",
    "RECORD_SCHEMA",
    "RUN_CHUNK_JOBS",
    "TOKENS_FIELDS",
    "USAGE_BREAKDOWN",
    "WINNERS",
    "BadLine",
    "Records",
    "RunSource",
    "Summary",
    "expand_inputs",
    "line_of",
    "open_run",
    "read_failures",
    "read_manifest",
    "read_records",
    "read_run",
    "read_summary",
    "read_tasks_file",
    "resolve_input",
    "run_of_file",
    "run_source",
    "runs_of_files",
    "split_runs",
    "storage_options",
]


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


# ---------------------------------------------------------------- entry point


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

    Args:
        paths: Runs (ledger run folders or URLs), files, folders and globs.
        skip_bad: Skip bad lines (reported) instead of raising InputError.
        tasks_file: JSONL with task_id and family, for logs without families (None: none).
        resolve_families: Resolve one family per task (False: keep each line's own, for token counting).
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
            del got  # the dropped-column copies share its buffers: `parts` must hold the only reference
            skipped += bad
    for run in runs:
        got_run, bad, names = read_run(run, skip_bad=skip_bad)
        parts.append(got_run)
        del got_run  # `parts` holds the only reference: _assemble frees each part's memory as it copies it
        skipped += bad
        files += names
    frame = _assemble(parts, tasks_file, resolve_families)
    if frame.height == 0:
        raise InputError(
            "no records in the input", file=", ".join(files[:3]) + (" …" if len(files) > 3 else "")
        )
    return Records(frame=frame, files=files, skipped=skipped)


def _assemble(parts: list[pl.DataFrame], tasks_file: str | None, resolve_families: bool) -> pl.DataFrame:
    """The parts as one frame (RECORD_SCHEMA), each column in one chunk, holding at most one column twice.

    `parts` is emptied: a frame whose columns come from several reads (slices, segments, objects) would be
    rechunked by the first eager `select` all columns at once, next to the parts: at 1M jobs that was
    0.5 GB over the frame itself, the read's peak."""
    if any(p.schema["file"] == pl.Categorical for p in parts):
        # A run's rows name their job object in a Categorical column (4 bytes a row, not the path).
        parts[:] = [p.with_columns(pl.col("file").cast(pl.Categorical)) for p in parts]
    if not parts:
        return pl.DataFrame(schema=RECORD_SCHEMA)
    frame = pl.concat(parts, how="vertical", rechunk=False)
    parts.clear()
    if resolve_families and frame.height:
        frame = _resolve_families(frame, tasks_file)
    cols = [frame.get_column(name) for name in RECORD_SCHEMA]  # not `select`: it would align chunks (a copy)
    del frame
    for i, col in enumerate(cols):
        cols[i] = col.rechunk()  # the old chunks of this column go as soon as it is replaced
    return pl.DataFrame(cols)


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
    """`summarise` (a lazy group-by over record groups, see below) computed in ONE pass over the files, fused
    with the validation check, so a million-line log is never held as a frame. Same validation as read_records:
    if any line is bad, or polars refuses a file, or the input is empty, the answer comes from read_records
    instead, which names the line (or skips it with skip_bad). `fields`: parse (and so validate) only these
    fields of JSON lines — the JSON parse is most of the cost (names as in schema.fields_schema, e.g.
    TOKENS_FIELDS).

    The contract: `summarise` gets record groups, each row standing for `rows` records that share
    schema.GROUP_KEYS (kind, task_id, family, arm, strategy, budget_n, replicate, role; RECORD_SCHEMA values),
    with prompt_tokens and completion_tokens summed over them and usage_missing counted. On the fast path a
    group is the raw rows of those keys; read line by line, each record is its own group (rows = 1). So
    `summarise` may sum, count `rows` and count distinct keys, nothing per record. It must keep `_bad` (always
    false here) as an aggregated column; the answer has no `_bad` column.

    Args:
        paths: Runs (ledger run folders or URLs), files, folders and globs.
        summarise: The lazy group-by to compute over the record groups.
        skip_bad: Skip bad lines (reported) instead of raising InputError.
        fields: The raw fields `summarise` reads (None: every field).
    """
    runs, _ = split_runs(paths)
    files = [] if runs else expand_inputs(paths)
    if files and (
        all(f.endswith(".parquet") for f in files) or not any(f.endswith(".parquet") for f in files)
    ):
        try:
            groups = record_groups_checked(files, fields_schema(fields) if fields else RAW_SCHEMA)
            if groups is not None:
                out = summarise(groups.lazy()).collect()
                if "_bad" not in out.columns:
                    raise TypeError("read_summary: the summary must aggregate `_bad` (see its docstring)")
                return Summary(out.drop("_bad"), files)
        except (pl.exceptions.PolarsError, OSError, ValueError):
            pass
    rec = read_records(paths, skip_bad=skip_bad, resolve_families=False)
    one_each = [pl.lit(1, pl.UInt32).alias("rows"), pl.lit(False).alias("_bad")]
    frame = rec.frame.lazy().with_columns(*one_each)
    return Summary(summarise(frame).collect().drop("_bad"), rec.files, rec.skipped)


def record_groups_checked(files: list[str], schema: dict[str, pl.DataType]) -> pl.DataFrame | None:
    """The files' records grouped by schema.GROUP_KEYS (read_summary's record groups), or None when a line
    breaks a rule (the caller then reads line by line to name it). One pass: the rules that read only the keys
    are checked on the groups, the ids on their distinct values, the others aggregated per group.

    Args:
        files: Same-format files (JSON lines, or Parquet).
        schema: The raw fields to parse (fields_schema or RAW_SCHEMA).
    """
    keys = [k for k in GROUP_KEYS if k == "kind_r" or k in schema]
    row_bad, keys_bad = _group_rule_split(keys)
    p = pl.col("p")
    missing = pl.col("usage_missing").fill_null(False) | (
        p.is_null() & pl.col("error").struct.field("class").is_null()
    )
    raw = (
        _prepare(_scan(files, schema))
        .group_by(keys)
        .agg(
            pl.len().alias("rows"),
            p.sum().alias("prompt_tokens"),
            pl.col("c").sum().alias("completion_tokens"),
            missing.sum().alias("usage_missing"),
            row_bad.alias("_bad"),
        )
        .collect()
    )
    ids = [f for f in ("task_id", "family", "strategy", "arm") if f in keys]
    if not raw.height or raw["_bad"].any() or raw.select(keys_bad.any()).item() or not ids_pass(raw, ids):
        return None
    kind = pl.col("kind_r")
    absent = [pl.lit(None, RECORD_SCHEMA[k]).alias(k) for k in GROUP_KEYS if k not in keys]
    return (
        raw.with_columns(*absent)
        .with_columns(
            # The values RECORD_SCHEMA holds (schema._record_columns): the arm from strategy@budget when not
            # written, replicate 0 when absent, usage missing only on calls.
            pl.coalesce(pl.col("arm"), pl.col("strategy") + pl.lit("@") + pl.col("budget_n").cast(pl.String)),
            pl.col("replicate").fill_null(0),
            pl.when(kind == "call").then(pl.col("usage_missing")).otherwise(0).alias("usage_missing"),
        )
        .rename({"kind_r": "kind"})
    )
