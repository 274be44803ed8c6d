"""A run's outcomes are of the run's tasks: each outcome line carries the digest of the task its worker graded
(contracts.records, `task_digest`), and the run records the digest of each of its tasks before any job is
enqueued (contracts.taskdigest). An outcome whose digest is not the one recorded for its task was graded
against another task — a forged message, a hand-edited object — and is refused (InputError naming the
object, the line and `task_digest`), or with --skip-bad left out with all of its job's lines and reported.

Outcome lines without a digest (written before digests were carried) and runs without a record of their
tasks (imports, older runs) are read as before.
"""

from __future__ import annotations

import polars as pl

from elo_per_token.analysis.io.schema import BadLine
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.taskdigest import run_task_digests
from elo_per_token.ledger import JOB_SUFFIX, Ledger

DIGEST_FIELD = "task_digest"


def expected_digests(led: Ledger, run: str, *, skip_bad: bool) -> tuple[dict[str, str] | None, list[BadLine]]:
    """The run's recorded task digests (None: it records none). A garbage record is refused naming its file,
    or with skip_bad reported as skipped (and the check is then not made).

    Args:
        led: The run's ledger.
        run: The run's id.
        skip_bad: Skip bad lines (reported) instead of raising InputError.
    """
    try:
        return run_task_digests(led, run), []
    except InputError as e:
        if not skip_bad:
            raise
        return None, [
            BadLine(e.file or led.run_url(run), 1, e.field, f"{e.message} (task digests not checked)")
        ]


def mismatches(rows: pl.DataFrame, expected: dict[str, str]) -> pl.DataFrame:
    """Of `rows` (job_key, line0, kind, task_digest), the outcome lines whose digest is not the one recorded
    for their task (or whose task the run never recorded): job_key, line0, task_digest, expected.

    Args:
        rows: Outcome lines: job_key, line0, kind, task_digest.
        expected: Task part -> its recorded digest.
    """
    if DIGEST_FIELD not in rows.columns or rows.height == 0:
        return pl.DataFrame(
            schema={"job_key": pl.String, "line0": pl.Int64, DIGEST_FIELD: pl.String, "expected": pl.String}
        )
    table = pl.DataFrame(
        {"part": list(expected), "expected": list(expected.values())},
        schema={"part": pl.String, "expected": pl.String},
    )
    part = pl.col("job_key").str.split("/").list.slice(0, 2).list.join("/")
    return (
        rows.lazy()
        .filter((pl.col("kind") == "outcome") & pl.col(DIGEST_FIELD).is_not_null())
        .select(
            "job_key",
            pl.col("line0").cast(pl.Int64),
            pl.col(DIGEST_FIELD).cast(pl.String),
            part.alias("part"),
        )
        .join(table.lazy(), on="part", how="left")
        .filter(pl.col("expected").is_null() | (pl.col("expected") != pl.col(DIGEST_FIELD)))
        .select("job_key", "line0", DIGEST_FIELD, "expected")
        .collect()
    )


def refuse_or_report(led: Ledger, run: str, bad: pl.DataFrame, *, skip_bad: bool) -> list[BadLine]:
    """InputError for the first mismatch; with skip_bad, one BadLine per job left out.

    Args:
        led: The run's ledger.
        run: The run's id.
        bad: The mismatches (mismatches()).
        skip_bad: Skip bad lines (reported) instead of raising InputError.
    """
    out = []
    prefix = led.run_url(run) + "/jobs/"
    for r in bad.iter_rows(named=True) if skip_bad else bad.head(1).iter_rows(named=True):
        part = "/".join(str(r["job_key"]).split("/")[:2])
        why = (
            f"the run never recorded task {part!r}"
            if r["expected"] is None
            else f"the run recorded task {part!r} as {r['expected']}"
        )
        msg = (
            f"graded a task with digest {r[DIGEST_FIELD]!r}, but {why}: this outcome is not of the run's "
            "task (a forged job?); --skip-bad leaves its job out"
        )
        err = BadLine(prefix + str(r["job_key"]) + JOB_SUFFIX, int(r["line0"]) + 1, DIGEST_FIELD, msg)
        if not skip_bad:
            raise InputError(err.message, err.file, err.line, err.field)
        out.append(err)
    return out


def segment_mismatches(url: str, opts: dict[str, str] | None, expected: dict[str, str]) -> pl.DataFrame:
    """mismatches() over a segment's outcome rows (segments written before digests were kept have none).

    Args:
        url: The segment's URL.
        opts: polars storage options for s3:// (None: local).
        expected: Task part -> its recorded digest.
    """
    lf = pl.scan_parquet(url, storage_options=opts)
    if DIGEST_FIELD not in lf.collect_schema().names():
        return mismatches(pl.DataFrame(), expected)
    rows = (
        lf.filter(pl.col("kind") == "outcome")
        .select("job_key", (pl.col("line") - 1).alias("line0"), "kind", DIGEST_FIELD)
        .collect()
    )
    return mismatches(rows, expected)
