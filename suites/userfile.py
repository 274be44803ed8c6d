"""Users' own suites as Parquet, and table readers for `ept suites import`.

A Parquet suite has one row per task and the JSONL fields as columns (docs/suites.md). Nested fields
(`grader`, `messages`, `tools`, `tool_impl`, `meta`, lists of tests) may be Parquet structs/lists or JSON
text; a null cell is an absent field (Parquet gives every row every column). Rows are validated like
JSONL lines: errors name the file, the 1-based row (as `line`) and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.tasks import Task

# Fields that hold objects or lists: a string cell there is read as JSON.
_JSON_FIELDS = ("grader", "messages", "tools", "tool_impl", "tests", "visible_tests", "distractors", "meta")


def _drop_nulls(v: Any) -> Any:
    # A struct column has every key in every row; keys a row did not set come back as None.
    if isinstance(v, dict):
        return {k: _drop_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_drop_nulls(x) for x in v]
    return v


def read_table(path: Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl / .json (list) / .parquet / .csv file as dicts (InputError on unreadable input)."""
    import polars as pl

    file = str(path)
    if not path.is_file():
        raise InputError("no such file", file=file)
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    try:
        if suffix == ".parquet":
            return pl.read_parquet(path).to_dicts()
        if suffix == ".csv":
            return pl.read_csv(path, infer_schema_length=0).to_dicts()  # all text: answers stay as written
    except Exception as e:  # polars/pyarrow raise many types for a damaged file
        raise InputError(
            f"cannot read {suffix[1:]} file: {str(e).splitlines()[0][:200]}", file=file
        ) from None
    if suffix in (".jsonl", ".jsonl.gz"):
        return _read_jsonl(path, file)
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise InputError(f"not valid JSON: {e}", file=file) from None
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise InputError("a .json table must be a list of objects", file=file)
        return data
    raise InputError("unsupported file type (use .jsonl, .jsonl.gz, .json, .parquet or .csv)", file=file)


def _read_jsonl(path: Path, file: str) -> list[dict[str, Any]]:
    import gzip

    rows = []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise InputError(f"not valid UTF-8 (byte {e.start + 1})", file=file, line=lineno) from None
            except json.JSONDecodeError as e:
                raise InputError(
                    f"not valid JSON ({e.msg} at column {e.colno})", file=file, line=lineno
                ) from None
            if not isinstance(rec, dict):
                raise InputError("each line must be a JSON object", file=file, line=lineno)
            rows.append({"__line__": lineno, **rec})
    return rows


def parquet_row_to_task(row: dict[str, Any], file: str, line: int) -> dict[str, Any]:
    task = {k: _drop_nulls(v) for k, v in row.items() if v is not None}
    for f in _JSON_FIELDS:
        if isinstance(task.get(f), str):
            try:
                task[f] = json.loads(task[f])
            except json.JSONDecodeError as e:
                raise InputError(
                    f"text in this column must be JSON ({e.msg})", file=file, line=line, field=f
                ) from None
    return task


def load_parquet_suite(path: Path) -> list[Task]:
    """Validated tasks of a Parquet suite (the whole file is checked before anything is returned)."""
    from elo_per_token.contracts.tasks import validate_task

    file = str(path)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for i, row in enumerate(read_table(path), start=1):
        task = validate_task(parquet_row_to_task(row, file, i), file, i)
        if task["task_id"] in seen:
            raise InputError(f"duplicate task_id (first on row {seen[task['task_id']]})", file, i, "task_id")
        seen[task["task_id"]] = i
        tasks.append(task)
    if not tasks:
        raise InputError("suite has no tasks", file=file)
    return tasks
