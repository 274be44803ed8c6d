"""The error path: a file polars refused, or whose rows a check flagged, re-read line by line to name the
exact line and field (or, with skip_bad, to keep its good lines)."""

from __future__ import annotations

import io
import json
from typing import Any

import polars as pl

from elo_per_token.analysis.io.scan import _scan_parquet
from elo_per_token.analysis.io.schema import _SUSPECT_MSG, RAW_SCHEMA, BadLine, _normalise, _type_problem
from elo_per_token.analysis.io.sources import _open_text, storage_options
from elo_per_token.contracts.errors import InputError


class _NotJson(ValueError):
    """NaN / Infinity / -Infinity: Python's json accepts them, JSON (and polars) do not."""


def _refuse_constant(name: str) -> Any:
    raise _NotJson(name)


def _constant_field(text: str, constant: str) -> str | None:
    import re

    m = re.search(r'"([^"\\]{1,64})"\s*:\s*' + re.escape(constant), text)
    return m.group(1) if m else None


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
            bad.append(
                BadLine(
                    f, i, _constant_field(text, str(e)), f"{e} is not a JSON value (numbers must be finite)"
                )
            )
        except RecursionError:
            bad.append(
                BadLine(
                    f, i, None, "malformed JSON: nested too deeply (no record nests more than a few levels)"
                )
            )
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
    norm = (
        _normalise(raw.lazy(), suspect_ids=False)
        .collect()
        .with_columns(pl.Series("_line", lines, dtype=pl.Int64))
    )
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
    norm = (
        _normalise(raw.lazy(), suspect_ids=False)
        .collect()
        .with_columns(
            pl.coalesce(raw["_type_bad"], pl.col("bad_field")).alias("bad_field"),
            pl.coalesce(raw["_type_msg"], pl.col("bad_msg")).alias("bad_msg"),
        )
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
    """1-based line number of the file's `row`-th non-blank line (error path only).

    Args:
        file: The JSONL file.
        row: The row's index among the non-blank lines (0-based).
    """
    if file.endswith(".parquet"):
        return row + 1
    seen = -1
    for i, text in enumerate(_open_text(file), start=1):
        if text.strip():
            seen += 1
            if seen == row:
                return i
    return row + 1


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
