"""Shared pieces of the log importers: bad-line handling, arm fields, reading tables, writing records."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elo_per_token.analysis.io import BadLine
from elo_per_token.common.atomic import write_atomic
from elo_per_token.contracts.errors import InputError

_ARM_RE = re.compile(r"^(?P<strategy>.+)@(?P<n>\d+)$")


@dataclass
class Collector:
    """Records produced so far and the lines skipped; `bad` raises unless skip_bad."""

    skip_bad: bool = False
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[BadLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def bad(self, file: str, line: int | None, fld: str | None, message: str) -> None:
        """A bad line: InputError naming it, or with --skip-bad recorded in `skipped`.

        Args:
            file: The file.
            line: Its line (None: the whole file).
            fld: The field at fault (None: the line).
            message: What is wrong.
        """
        if not self.skip_bad:
            raise InputError(message, file=file, line=line, field=fld)
        self.skipped.append(BadLine(file, line, fld, message))  # type: ignore[arg-type]  # None: a whole file


def arm_fields(arm: str, budget_n: Any = None) -> dict[str, Any]:
    """Our arm identity from a label: 'best_of_n@4' -> strategy best_of_n, budget 4; 'cot-t0.7' -> budget 1.

    Args:
        arm: The arm label.
        budget_n: An explicit budget (None: from the label, else 1).
    """
    m = _ARM_RE.match(arm)
    if m and budget_n is None:
        return {"strategy": m.group("strategy"), "budget_n": int(m.group("n")), "arm": arm}
    return {"strategy": arm, "budget_n": int(budget_n) if budget_n is not None else 1, "arm": arm}


def read_jsonl(path: str, col: Collector) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line, lazily (so the first bad line in file order is the
    one reported, whether it is bad JSON or a bad field); unparsable lines go to col.bad.

    Args:
        path: The JSONL file.
        col: Where bad lines are raised or, with --skip-bad, collected.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError("no such file", file=path)
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                col.bad(path, lineno, None, f"not valid UTF-8 (byte {e.start + 1})")
                continue
            except json.JSONDecodeError as e:
                col.bad(path, lineno, None, f"not valid JSON ({e.msg} at column {e.colno})")
                continue
            if not isinstance(obj, dict):
                col.bad(path, lineno, None, "each line must be a JSON object")
                continue
            yield lineno, obj


def read_rows(path: str, col: Collector) -> list[tuple[int, dict[str, Any]]]:
    """(line, row) of a JSONL or CSV table (CSV: line = the row's line in the file, header = line 1).

    Args:
        path: The JSONL or CSV file.
        col: Where bad lines are raised or, with --skip-bad, collected.
    """
    if path.endswith(".csv"):
        import polars as pl

        if not Path(path).is_file():
            raise InputError("no such file", file=path)
        try:
            rows = pl.read_csv(path, infer_schema_length=0).to_dicts()
        except Exception as e:  # polars raises several types for a malformed CSV
            raise InputError(f"cannot read CSV: {str(e).splitlines()[0][:200]}", file=path) from None
        return [(i + 2, r) for i, r in enumerate(rows)]
    return list(read_jsonl(path, col))


def as_int(v: Any) -> int | None:
    """An integer from an int or an integer string ('4'); None otherwise.

    Args:
        v: Any value.
    """
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"\s*\d+\s*", v):
        return int(v)
    return None


def as_score(row: dict[str, Any]) -> tuple[float | None, str | None]:
    """(score in 0..1, None) from a row's `score` or `correct`; (None, field) when neither is usable.

    Args:
        row: A row of an outcomes table.
    """
    s = row.get("score")
    if s not in (None, ""):
        try:
            v = float(s)
        except (TypeError, ValueError):
            return None, "score"
        return (v, None) if 0.0 <= v <= 1.0 else (None, "score")
    c = row.get("correct")
    if isinstance(c, bool):
        return float(c), None
    if isinstance(c, str) and c.strip().lower() in ("true", "false", "1", "0"):
        return float(c.strip().lower() in ("true", "1")), None
    return None, "score" if "score" in row else "correct"


def write_records(records: list[dict[str, Any]], out: str) -> None:
    """All or nothing: write to a temp file next to `out`, then rename.

    Args:
        records: The records to write.
        out: The JSONL file to write.
    """
    write_atomic(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
