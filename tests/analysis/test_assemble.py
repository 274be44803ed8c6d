"""analysis.io._assemble: the parts of a read become one frame of single-chunk columns without ever holding
two copies of the frame (the read's peak at 1M jobs was an eager `select` aligning ~130 chunks per column
next to the parts: docs/benchmarks.md, "Memory of analysing a 1M-job run")."""

from __future__ import annotations

import polars as pl

from elo_per_token.analysis.io import RECORD_SCHEMA, _assemble


def _part(n: int, start: int, family: str | None) -> pl.DataFrame:
    rows = {name: pl.Series(name, [None] * n, dtype=dt) for name, dt in RECORD_SCHEMA.items()}
    rows["file"] = pl.Series("file", [f"f{start // 10}"] * n)
    rows["row"] = pl.Series("row", list(range(start, start + n)), dtype=pl.Int64)
    rows["kind"] = pl.Series("kind", ["call"] * n)
    rows["task_id"] = pl.Series("task_id", [f"math-{i % 7}" for i in range(start, start + n)])
    rows["family"] = pl.Series("family", [family] * n, dtype=pl.String)
    rows["prompt_tokens"] = pl.Series("prompt_tokens", list(range(start, start + n)), dtype=pl.Int64)
    return pl.DataFrame(rows).select(list(RECORD_SCHEMA)).cast({c: RECORD_SCHEMA[c] for c in RECORD_SCHEMA})


def test_parts_become_one_chunk_per_column_and_are_released():
    parts = [_part(10, 10 * i, None) for i in range(12)]
    expected = pl.concat(parts).select(list(RECORD_SCHEMA))
    assert pl.concat(parts, rechunk=False).n_chunks() == 12
    frame = _assemble(parts, None, resolve_families=False)
    assert parts == []  # the caller's list no longer holds the parts: their memory goes as columns are copied
    assert frame.columns == list(RECORD_SCHEMA) and frame.schema == expected.schema
    assert all(n == 1 for n in frame.n_chunks("all"))
    assert frame.equals(expected)


def test_families_are_resolved_before_the_columns_are_taken():
    parts = [_part(5, 0, None), _part(5, 5, "algebra")]
    frame = _assemble(parts, None, resolve_families=True)
    fam = dict(zip(frame["task_id"].cast(pl.String), frame["family"].cast(pl.String), strict=True))
    # Rows 5-9 (second part) name tasks math-5, 6, 0, 1, 2 with the family field; math-3 and math-4 have no
    # field anywhere and take their prefix.
    assert fam == {**{f"math-{i}": "algebra" for i in (0, 1, 2, 5, 6)}, "math-3": "math", "math-4": "math"}
    assert all(n == 1 for n in frame.n_chunks("all"))


def test_no_parts_is_an_empty_frame_of_the_record_schema():
    assert _assemble([], None, resolve_families=True).schema == pl.Schema(RECORD_SCHEMA)
