"""Synthetic ledger runs in the documented layout (runs/<run>/jobs/<job key>.jsonl), at any size.

Each job object holds what a worker writes (contracts/records.py): 1-9 call lines and one outcome line,
every line with the job identity. 5 arms, 3 families, `replicates` per (task, arm); quality rises with the
budget so the analysis has something to find. Used by benchmarks/bench_scale.py and the scale tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import polars as pl

ARMS = [("greedy", 1, 1), ("best_of_n", 4, 4), ("majority", 8, 8), ("best_of_n", 8, 8), ("majority", 4, 4)]
FAMILIES = ["math", "code", "tool_use"]


def job_frame(
    run_id: str, n_jobs: int, *, replicates: int = 4, seed: int = 0, offset: int = 0
) -> pl.DataFrame:
    """n_jobs jobs (rows), job index offset..offset+n_jobs, deterministic in (seed, job index)."""
    per_task = len(ARMS) * replicates
    idx = np.arange(offset, offset + n_jobs)
    task_no, rest = np.divmod(idx, per_task)
    arm_no, rep = np.divmod(rest, replicates)
    fam = np.array(FAMILIES)[task_no % len(FAMILIES)]
    rng = np.random.default_rng(seed)
    # Task difficulty and noise from hashed indices, so a job's content does not depend on the batch it is in.
    diff = np.sin(task_no * 12.9898 + seed) * 43758.5453
    diff = (diff - np.floor(diff)) * 3 - 1.5
    noise = np.sin(idx * 78.233 + seed * 7) * 24634.6345
    noise = noise - np.floor(noise)
    strength = np.array([0.0, 0.5, 0.9, 0.8, 0.7])[arm_no]
    p = 1 / (1 + np.exp(-(strength - diff)))
    correct = noise < p
    del rng
    strategy = np.array([a[0] for a in ARMS])[arm_no]
    budget = np.array([a[1] for a in ARMS])[arm_no]
    ncalls = np.array([a[2] for a in ARMS])[arm_no]
    task_id = pl.Series(fam) + "-" + pl.Series(task_no).cast(pl.String).str.zfill(6)
    arm = pl.Series(strategy) + "@" + pl.Series(budget).cast(pl.String)
    arm_key = pl.Series(strategy) + "_n" + pl.Series(budget).cast(pl.String)
    return pl.DataFrame(
        {
            "run_id": run_id,
            "job_key": pl.Series(fam) + "/" + task_id + "/" + arm_key + "/r" + pl.Series(rep).cast(pl.String),
            "task_id": task_id,
            "family": fam,
            "strategy": strategy,
            "budget_n": budget,
            "arm": arm,
            "replicate": rep,
            "ncalls": ncalls,
            "correct": correct,
            "idx": idx,
        }
    )


def job_lines(jobs: pl.DataFrame) -> tuple[list[str], list[bytes]]:
    """(job keys, object bytes) for the jobs of job_frame."""
    ident = [
        "schema",
        "run_id",
        "job_key",
        "task_id",
        "family",
        "strategy",
        "budget_n",
        "arm",
        "replicate",
        "kind",
    ]
    base = jobs.with_columns(pl.lit(1).alias("schema"))
    calls = (
        base.with_columns(pl.int_ranges(0, pl.col("ncalls")).alias("call_index"))
        .explode("call_index")
        .with_columns(
            pl.lit("call").alias("kind"),
            pl.lit("sample").alias("role"),
            pl.lit("sim-small").alias("model"),
            pl.struct(
                (300 + (pl.col("idx") * 7 + pl.col("call_index") * 13) % 200).alias("prompt_tokens"),
                (50 + (pl.col("idx") * 11 + pl.col("call_index") * 5) % 150).alias("completion_tokens"),
            ).alias("usage"),
            (0.05 + ((pl.col("idx") + pl.col("call_index")) % 97) / 1000).alias("latency_s"),
            pl.lit(1).alias("attempts"),
            ((pl.col("idx") * 31 + pl.col("call_index")) % 2_147_483_647).alias("seed"),
            pl.lit(1).alias("n_requested"),
            pl.lit(1).alias("n_returned"),
            pl.lit("stop").alias("finish_reason"),
            pl.lit(None, pl.String).alias("error"),
            pl.lit(False).alias("usage_missing"),
        )
        .with_columns(
            pl.col("usage").struct.with_fields(
                (pl.field("prompt_tokens") + pl.field("completion_tokens")).alias("total_tokens")
            )
        )
    )
    call_cols = [*ident, "call_index", "role", "model", "usage", "latency_s", "attempts", "seed", "n_requested",
                 "n_returned", "finish_reason", "error", "usage_missing"]  # fmt: skip
    outcome = base.with_columns(
        pl.lit("outcome").alias("kind"),
        pl.col("correct").cast(pl.String).alias("answer"),
        pl.col("correct").cast(pl.Float64).alias("score"),
        pl.struct(pl.lit("exact").alias("grader"), pl.lit("match").alias("reason")).alias("grader"),
        pl.lit(None, pl.String).alias("error"),
        (1.7e9 + pl.col("idx").cast(pl.Float64)).alias("started_at"),
        (1.7e9 + pl.col("idx").cast(pl.Float64) + 0.5).alias("finished_at"),
    )
    out_cols = [*ident, "answer", "score", "correct", "grader", "error", "started_at", "finished_at"]
    text = []
    for frame, cols in ((calls, call_cols), (outcome, out_cols)):
        buf = frame.select([*cols, "idx"]).sort("idx", maintain_order=True)
        text.append(buf.select("idx", pl.struct(cols).struct.json_encode().alias("line")))
    lines = pl.concat(text).sort("idx", maintain_order=True)
    lines = lines.group_by("idx", maintain_order=True).agg(pl.col("line").str.join("\n"))
    keys = jobs["job_key"].to_list()
    blobs = [(s + "\n").encode() for s in lines["line"].to_list()]
    return keys, blobs


def generate(
    run_id: str, n_jobs: int, *, batch: int = 50_000, offset: int = 0, replicates: int = 4
) -> Iterator[tuple[list[str], list[bytes]]]:
    for start in range(offset, offset + n_jobs, batch):
        yield job_lines(
            job_frame(run_id, min(batch, offset + n_jobs - start), offset=start, replicates=replicates)
        )


def write_local(root: str | Path, run_id: str, n_jobs: int, *, offset: int = 0,
                progress: Callable[[int], None] | None = None, log: bool = False) -> int:  # fmt: skip
    """Write the job objects under root/runs/<run>/jobs/ (plain files, as FileLedger.put_job leaves them).
    `log`: also append each key to the run's change log (ledger/changelog.py) after its object, as a tool that
    keeps writing a compacted run does so readers find the new objects without a listing."""
    base = Path(root) / "runs" / run_id / "jobs"
    made: set[str] = set()
    n = 0
    for keys, blobs in generate(run_id, n_jobs, offset=offset):
        for k, b in zip(keys, blobs, strict=True):
            d = k.rpartition("/")[0]
            if d not in made:
                os.makedirs(base / d, exist_ok=True)
                made.add(d)
            # Atomic, as FileLedger.put_job: a reader never sees a half-written object.
            tmp = base / (k + ".tmp-part")
            with open(tmp, "wb") as f:
                f.write(b)
            os.replace(tmp, base / (k + ".jsonl"))
        if log:
            (base.parent / "changes").mkdir(exist_ok=True)
            with open(base.parent / "changes" / "fixture.keys", "a") as f:
                f.write("".join(k + "\n" for k in keys))
        n += len(keys)
        if progress:
            progress(n)
    return n


def write_s3(ledger, run_id: str, n_jobs: int, *, offset: int = 0, threads: int = 32,
             progress: Callable[[int], None] | None = None) -> int:  # fmt: skip
    """Write the job objects through an S3Ledger (conditional PUTs, as workers do), `threads` at a time."""
    from concurrent.futures import ThreadPoolExecutor

    n = 0
    with ThreadPoolExecutor(threads) as ex:
        for keys, blobs in generate(run_id, n_jobs, offset=offset):
            list(ex.map(lambda kb: ledger.put_job(run_id, kb[0], kb[1]), zip(keys, blobs, strict=True)))
            n += len(keys)
            if progress:
                progress(n)
    return n


def declare(ledger, run_id: str, n_jobs: int, *, offset: int = 0) -> str:
    """Declare the keys of jobs offset..offset+n_jobs as `ept sweep` does before it runs them
    (ledger/keyspace.py): a generated run then reads like a swept one. `ledger`: a Ledger or a folder."""
    from elo_per_token.ledger import FileLedger
    from elo_per_token.ledger.keyspace import declare_keys

    if isinstance(ledger, str | Path):
        ledger = FileLedger(ledger)
    keys = pl.concat([job_frame(run_id, min(50_000, offset + n_jobs - s), offset=s)["job_key"]
                      for s in range(offset, offset + n_jobs, 50_000)])  # fmt: skip
    return declare_keys(ledger, run_id, keys)


def one_file(path: str | Path, run_id: str, n_jobs: int, fmt: str = "parquet") -> int:
    """The same records as one file (the baseline): Parquet via polars, or one JSONL file."""
    path = Path(path)
    if fmt == "jsonl":
        with open(path, "wb") as f:
            for _, blobs in generate(run_id, n_jobs):
                f.write(b"".join(blobs))
        return n_jobs
    import io

    frames = []
    for _, blobs in generate(run_id, n_jobs):
        from elo_per_token.ledger.segments import SEGMENT_SCHEMA

        frames.append(pl.read_ndjson(io.BytesIO(b"".join(blobs)), schema=SEGMENT_SCHEMA))
    pl.concat(frames).write_parquet(path, compression="zstd")
    return n_jobs
