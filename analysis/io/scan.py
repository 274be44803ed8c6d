"""The fast path: one lazy polars scan over same-format files with an explicit schema."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import polars as pl

from elo_per_token.analysis.io.schema import _CLASS, _USAGE, RAW_SCHEMA, _normalise
from elo_per_token.analysis.io.sources import storage_options
from elo_per_token.contracts.settings import read_int

if TYPE_CHECKING:
    from polars._typing import PolarsDataType


def _scan(files: list[str], schema: dict[str, pl.DataType] | None = None) -> pl.LazyFrame:
    """One lazy scan over same-format files, with the file path and per-file row index. `schema`: parse only
    these RAW_SCHEMA fields of JSON lines (the others read as null, so no check on them fires)."""
    opts = storage_options() if any(f.startswith("s3://") for f in files) else None
    if files[0].endswith(".parquet"):
        frames = [_scan_parquet(f, opts) for f in files]
        return pl.concat(frames, how="vertical")
    schema = schema or RAW_SCHEMA
    absent = [pl.lit(None, dt).alias(k) for k, dt in RAW_SCHEMA.items() if k not in schema]
    if "usage" in schema and schema["usage"] != _USAGE:
        # Only some usage members parsed (fields_schema): the others are null, in the struct every step reads.
        parsed = {f.name for f in schema["usage"].fields}  # type: ignore[attr-defined]
        members = [
            pl.col("usage").struct.field(k) if k in parsed else pl.lit(None, dt).alias(k)
            for k, dt in _USAGE.to_schema().items()
        ]
        absent.append(pl.struct(members).alias("usage"))
    if len(files) == 1:
        # One file: a plain row index, no per-row path column and no window over it.
        lf = pl.scan_ndjson(files[0], schema=schema, storage_options=opts, row_index_name="row")
        return lf.with_columns(pl.col("row").cast(pl.Int64), pl.lit(files[0]).alias("file"), *absent)
    lf = pl.scan_ndjson(files, schema=schema, include_file_paths="file", storage_options=opts)
    return lf.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("file").alias("row"), *absent)


# Parquet rows normalised per streaming query. One query over a whole 6M-row file peaked at 2.5 GB for a 1.1 GB
# result (the reader decodes ahead of the slower validation); 500k-row slices keep the working set small.
SLICE_ROWS = 500_000


def _normalised_slices(scan: pl.LazyFrame) -> Callable[[int, int], pl.LazyFrame]:
    """make(offset, length) for _collect_sliced: the normalised rows [offset, offset + length) of `scan`."""
    return lambda o, k: _normalise(scan.slice(o, k))


def _collect_sliced(
    make: Callable[[int, int], pl.LazyFrame], n_rows: int, rows: int | None = None
) -> pl.DataFrame:
    """make(offset, length) -> the query over those rows of the input, collected slice by slice (SLICE_ROWS)
    and kept as chunks (no copy of the whole result)."""
    rows = rows or SLICE_ROWS
    parts = [make(o, rows).collect(engine="streaming") for o in range(0, max(n_rows, 1), rows)]
    return pl.concat(parts, how="vertical", rechunk=False)


_TYPE_WORDS = {
    pl.Int64(): "an integer",
    pl.Float64(): "a number",
    pl.Boolean(): "true or false",
    pl.String(): "a string",
}


# A Parquet's row count comes from its footer: checked before anything is materialised. A row of records is
# ~100-200 bytes once in memory, so 20M rows is already several GB; a file of far fewer bytes than rows is a
# constant column run-length encoded (a 205 KB file of 60M rows took `ept analyze` to 6.2 GiB).
_MIN_BYTES_PER_ROW = (
    0.25  # real records carry distinct job keys and task ids: several bytes per row, compressed
)


def check_parquet_rows(f: str, rows: int) -> None:
    """Refuse (InputError naming the file) a local Parquet whose footer declares more rows than can be read
    (EPT_MAX_PARQUET_ROWS, default 20M) or implausibly many for its size.

    Args:
        f: The Parquet file.
        rows: The row count its footer declares.
    """
    import os

    from elo_per_token.contracts.errors import InputError

    cap = read_int("EPT_MAX_PARQUET_ROWS")
    size = os.path.getsize(f)
    if rows > cap:
        raise InputError(
            f"{rows:,} rows, more than EPT_MAX_PARQUET_ROWS={cap:,} (raise it if this is real data; "
            f"reading would need ~{rows * 150 // 2**30} GiB)",
            file=f,
        )
    if rows > 1_000_000 and size < rows * _MIN_BYTES_PER_ROW:
        raise InputError(
            f"{rows:,} rows in {size:,} bytes: not ept records (a constant column repeated; "
            "refused before reading)",
            file=f,
        )


def _scan_parquet(
    f: str, opts: dict[str, str] | None, *, strict: bool = True, extra: tuple[str, ...] = ()
) -> pl.LazyFrame:
    """A parquet file as RAW_SCHEMA columns. strict=False turns values that do not convert into nulls and
    adds `_type_bad` / `_type_msg` for the first such field per row (the error path names rows, not files)."""
    # The row number from the scan itself: an int_range over pl.len() cannot be computed slice by slice.
    lf = pl.scan_parquet(f, storage_options=opts, row_index_name="_row_ix")
    if opts is None:
        check_parquet_rows(f, pl.scan_parquet(f).select(pl.len()).collect().item())
    have = lf.collect_schema()
    failed: list[tuple[str, str, pl.Expr]] = []

    def conv(src: pl.Expr, src_dtype: PolarsDataType, dtype: pl.DataType, label: str) -> pl.Expr:
        if not strict and src_dtype != dtype:
            lost = src.is_not_null() & src.cast(dtype, strict=False).is_null()
            failed.append((label, f"must be {_TYPE_WORDS.get(dtype, str(dtype))}", lost))
        return src.cast(dtype, strict=strict)

    cols = []
    for name, dtype in RAW_SCHEMA.items():
        usage = have.get("usage")
        if name == "usage" and isinstance(usage, pl.Struct):
            # Keep the two counts (checked) and the breakdown (converted when present, else null: it is
            # informational); a usage struct may carry more (total_tokens…), which is dropped.
            inner = {fl.name: fl.dtype for fl in usage.fields}
            want = _USAGE.to_schema()

            def field_expr(
                k: str, inner: Mapping[str, PolarsDataType] = inner, want: Mapping[str, PolarsDataType] = want
            ) -> pl.Expr:
                if k not in inner:
                    return pl.lit(None, want[k])
                src = pl.col("usage").struct.field(k)
                if k in ("prompt_tokens", "completion_tokens"):
                    return conv(src, inner[k], pl.Int64(), f"usage.{k}")
                return src.cast(want[k], strict=False)

            cols.append(pl.struct(field_expr(k).alias(k) for k in want).alias("usage"))
        elif name in have and dtype == _CLASS and have[name] == pl.String():
            # Segments (ledger.segments) keep object fields as JSON text: take the class out of it.
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


def _fast(files: list[str]) -> pl.DataFrame | None:
    try:
        if files[0].endswith(".parquet"):
            opts = storage_options() if any(f.startswith("s3://") for f in files) else None
            parts = []
            for f in files:
                n = pl.scan_parquet(f, storage_options=opts).select(pl.len()).collect().item()
                parts.append(_collect_sliced(_normalised_slices(_scan([f])), n))
            return pl.concat(parts, how="vertical", rechunk=False)
        return _normalise(_scan(files)).collect(engine="streaming")
    except (pl.exceptions.PolarsError, OSError, ValueError):
        return None
