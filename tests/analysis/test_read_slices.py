"""Large Parquet inputs and segments are normalised slice by slice (analysis.io.scan.SLICE_ROWS), which bounds the
reader's memory (docs/benchmarks.md, bench_scale). Slicing must not change what is read: the same frame, rows
numbered across slices, errors named by their row, and labels held as Categorical."""

from __future__ import annotations

from pathlib import Path

import fixtures_ledger as ledger_gen
import polars as pl
import pytest

from elo_per_token.analysis.io import LABEL_COLUMNS, read_records
from elo_per_token.analysis.io import scan as io_scan
from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger import FileLedger
from elo_per_token.ledger.segments import compact_run


def _run(tmp_path: Path, n_jobs: int) -> tuple[Path, Path]:
    """A compacted run of n_jobs and the same records as one Parquet file."""
    root = tmp_path / "ledger"
    ledger_gen.write_local(root, "r", n_jobs)
    compact_run(FileLedger(root), "r")
    one = tmp_path / "one.parquet"
    ledger_gen.one_file(one, "r", n_jobs)
    return root / "runs" / "r", one


def test_sliced_reads_equal_one_slice(tmp_path, monkeypatch):
    run, one = _run(tmp_path, 120)
    whole_run = read_records([str(run)]).frame
    whole_one = read_records([str(one)]).frame
    assert whole_run.height == whole_one.height > 700
    monkeypatch.setattr(io_scan, "SLICE_ROWS", 97)  # ~8 slices, boundaries inside job objects
    sliced_run = read_records([str(run)]).frame
    sliced_one = read_records([str(one)]).frame
    assert sliced_run.equals(whole_run)
    assert sliced_one.equals(whole_one)
    # Rows keep their numbers across slices: the Parquet file's rows are 0..n-1 in order.
    assert sliced_one["row"].to_list() == list(range(whole_one.height))
    for name in LABEL_COLUMNS:
        assert sliced_one.schema[name] == pl.Categorical, name


def test_bad_row_in_a_later_slice_is_named_by_its_row(tmp_path, monkeypatch):
    _, one = _run(tmp_path, 40)
    df = pl.read_parquet(one)
    bad_at = df.height - 3  # in the last slice
    df = df.with_columns(
        pl.when(pl.int_range(pl.len()) == bad_at).then(-1).otherwise(pl.col("budget_n")).alias("budget_n")
    )
    df.write_parquet(one)
    monkeypatch.setattr(io_scan, "SLICE_ROWS", 50)
    with pytest.raises(InputError) as e:
        read_records([str(one)])
    assert e.value.field == "budget_n" and e.value.line == bad_at + 1 and str(one) in str(e.value)
