"""Where records come from: files, directories, globs, s3:// prefixes and ledger runs, and reading a
file's text (local, gzip or S3) for the line-by-line path."""

from __future__ import annotations

import glob
import gzip
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger import DEFAULT_LEDGER as DEFAULT_LEDGER
from elo_per_token.ledger.runref import RunSource as RunSource
from elo_per_token.ledger.runref import run_of_file as run_of_file
from elo_per_token.ledger.runref import run_source as run_source
from elo_per_token.ledger.runref import runs_of_files as runs_of_files
from elo_per_token.ledger.s3config import s3_settings
from elo_per_token.ledger.s3config import storage_options as storage_options

if TYPE_CHECKING:  # ledger is imported where a ledger is opened
    from elo_per_token.ledger import Ledger

DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json.gz", ".parquet")


def _s3_client() -> Any:
    import boto3
    from botocore.config import Config

    settings = s3_settings()  # the ledger's own endpoint resolution: reader and writer reach one server
    return boto3.client(
        "s3",
        endpoint_url=settings.endpoint,
        region_name=settings.region,
        config=Config(s3={"addressing_style": "path"}),
    )


def _is_data_file(name: str) -> bool:
    return name.endswith(DATA_SUFFIXES)


def expand_inputs(paths: Sequence[str]) -> list[str]:
    """Files, directories (recursive), globs and s3://bucket/prefix URLs -> sorted data files.

    Args:
        paths: Runs (ledger run folders or URLs), files, folders and globs.
    """
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
    # planned/keys-*.parquet are job-key declarations (ledger/keyspace.py), not records.
    return [
        f
        for f in files
        if not ("/compact/" in f and f.split("/compact/")[0] in runs_with_jobs) and "/planned/keys-" not in f
    ]


# ---------------------------------------------------------------- ledger runs (where they are)

# Run URLs (…/runs/<id>, …/runs/<id>/jobs) and the names of files read from a run are parsed by
# ledger/runref.py (RunSource, run_source, run_of_file): one parser for analyze, compare and the report.


def split_runs(paths: Sequence[str]) -> tuple[list[RunSource], list[str]]:
    """(runs, plain files): the inputs that name a ledger run, and the rest, in order.

    Args:
        paths: Runs (ledger run folders or URLs), files, folders and globs.
    """
    runs: list[RunSource] = []
    plain: list[str] = []
    for p in paths:
        src = run_source(p)
        if src is None:
            plain.append(p)
        else:
            runs.append(src)
    return runs, plain


def plan_run(path: str) -> tuple[str, str]:
    """(run id, ledger) of a sweep plan file: its `name` and `ledger` fields, read as TOML here (the analysis
    does not import the coordinator's plan parser; a run it names is checked against the ledger anyway).

    Args:
        path: A sweep plan TOML file.
    """
    import tomllib

    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise InputError(f"cannot read the plan ({e.strerror})", file=path) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"not a valid plan: {e}", file=path) from None
    name, led = raw.get("name"), raw.get("ledger", DEFAULT_LEDGER)
    if not isinstance(name, str) or not name:
        raise InputError("missing required field (the run's name)", file=path, field="name")
    if not isinstance(led, str):
        raise InputError("must be a string (a folder, file://… or s3://…)", file=path, field="ledger")
    return name, led


def resolve_input(arg: str, ledger: str | None = None) -> str:
    """A command-line input as a path or URL. A run id (a bare name that is no file) means that run in
    `ledger` (default ./ept-out/ledger); a plan file means its run in its ledger (or `ledger`). Both are
    checked: a missing run lists the runs the ledger holds, an unreachable ledger says what is wrong.

    Args:
        arg: A path, URL, run id or plan file from the command line.
        ledger: The ledger a bare run id is looked up in (None: ./ept-out/ledger).
    """
    from elo_per_token.ledger import check_run, open_ledger_for_reading

    if arg.endswith(".toml") and os.path.isfile(arg):
        run_id, plan_ledger = plan_run(arg)
        led = open_ledger_for_reading(ledger or plan_ledger)
        check_run(led, run_id)
        return led.run_url(run_id)
    if arg.lower().endswith((".csv", ".tsv", ".xlsx")):
        raise InputError(
            "a table is not a call log: `ept import batch` turns OpenAI Batch output plus a CSV of scores into "
            "records `ept analyze` reads (docs/imports.md); suites of tasks in CSV go through `ept suites import`",
            file=arg,
        )
    bare = "/" not in arg and "://" not in arg and not glob.has_magic(arg) and not os.path.exists(arg)
    if bare and not arg.endswith(DATA_SUFFIXES):
        led = open_ledger_for_reading(ledger or DEFAULT_LEDGER)
        try:
            check_run(led, arg)
        except InputError as e:  # a bare name is a run id or a path: say neither exists
            raise InputError(
                f"no such file or folder {arg!r} (in {os.getcwd()}), and {e.message}", field=e.field
            ) from None
        return led.run_url(arg)
    return arg


def read_manifest(src: RunSource) -> dict[str, Any] | None:
    """The run's manifest, None when it has none (reading never creates a bucket).

    Args:
        src: The run (its ledger and id).
    """
    from elo_per_token.ledger import open_ledger_for_reading

    return open_ledger_for_reading(src.ledger_url).get_manifest(src.run_id)


def read_failures(src: RunSource) -> dict[str, dict[str, Any]]:
    """Jobs that failed and never wrote a result (the ledger's failures/ objects), by job key.

    Args:
        src: The run (its ledger and id).
    """
    from elo_per_token.ledger import open_ledger_for_reading

    return open_ledger_for_reading(src.ledger_url).list_failures(src.run_id)


def open_run(src: RunSource) -> Ledger:
    """The run's ledger, checked: an unreachable ledger or a run it does not have is an InputError.

    Args:
        src: The run (its ledger and id).
    """
    from elo_per_token.ledger import check_run, open_ledger_for_reading

    led = open_ledger_for_reading(src.ledger_url)
    check_run(led, src.run_id)
    return led


# ---------------------------------------------------------------- a file's lines (error path)


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
