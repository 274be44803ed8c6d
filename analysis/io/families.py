"""Which task family each record belongs to: the family field, a tasks file, or the task id's prefix."""

from __future__ import annotations

import polars as pl

from elo_per_token.analysis.io.recovery import line_of
from elo_per_token.contracts.errors import InputError


def read_tasks_file(path: str) -> pl.DataFrame:
    """A tasks file: JSONL with task_id and family (other fields ignored).

    Args:
        path: The tasks file.
    """
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
    given = frame.lazy().filter(pl.col("family").is_not_null())
    first = (
        given.group_by("task_id", maintain_order=True)
        .agg(pl.col("family").first().alias("fam_given"), pl.col("family").n_unique().alias("n_families"))
        .collect()
    )
    # Only a task with two families has a conflicting line; look for it among those tasks' lines alone
    # (a join of every line with its file and row held ~0.5 GB more at 1M jobs, for the usual no-conflict case).
    mixed = first.filter(pl.col("n_families") > 1).drop("n_families")
    first = first.drop("n_families")
    if mixed.height:
        conflict = (
            given.select("file", "row", "task_id", "family")
            .join(mixed.lazy(), on="task_id", maintain_order="left")
            .filter(pl.col("family") != pl.col("fam_given"))
            .collect()
        )
        r = conflict.row(0, named=True)  # there is one: the task has a second family
        raise InputError(
            f"task {r['task_id']!r} already has family {r['fam_given']!r}; got {r['family']!r}",
            r["file"],
            line_of(r["file"], r["row"]),
            "family",
        )
    # Resolve once per distinct task, then one join back (a regex over every line would be slow).
    tasks = frame.select("task_id").unique().join(first, on="task_id", how="left")
    tasks = tasks.with_columns(pl.col("task_id", "fam_given").cast(pl.String))  # Categorical in the records
    if tasks_file:
        tasks = tasks.join(
            read_tasks_file(tasks_file).rename({"family": "fam_file"}), on="task_id", how="left"
        )
    else:
        tasks = tasks.with_columns(pl.lit(None, pl.String).alias("fam_file"))
    prefix = (
        pl.when(pl.col("task_id").str.contains("-"))
        .then(pl.col("task_id").str.replace(r"-[^-]*$", ""))
        .otherwise(pl.lit("default"))
    )
    tasks = tasks.select(
        "task_id", pl.coalesce(pl.col("fam_given"), pl.col("fam_file"), prefix).alias("family")
    )
    # Join the task ids only and add the one column: joining the whole frame would copy every column.
    tasks = tasks.with_columns(pl.col("task_id", "family").cast(pl.Categorical))
    fam = frame.select("task_id").join(tasks, on="task_id", how="left", maintain_order="left")["family"]
    return frame.with_columns(fam)
