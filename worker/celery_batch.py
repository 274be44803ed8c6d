"""Several jobs in one Celery message: the task `ept.run_jobs` (the plan's `jobs_per_message`).

Celery and kombu cost ~2 ms of a worker's CPU per message before any job code runs (receive, reserve, ack,
result; measured in benchmarks/bench_sweep.py as the "floor"). Against a fast endpoint that is a third of a job's
CPU; k jobs per message divide it by k. Each job of a batch is delivered exactly as a message of its own would
be (worker.celery_job._deliver: its allow-lists, claim, journal, budget and cancel checks, ran marker), one after
another on the message's thread.

A batch never holds jobs back for long nor outlives its lease because of its size: a job starts only while the
batch is younger than its time window (1 s, at most a fifth of the lease: worker.celery_app); the jobs not
started are handed back ("deferred") and the coordinator sends each again as a message of its own. So batches
of fast jobs run whole, and a batch of slow jobs runs its first job and turns the others into single messages.
"""

from __future__ import annotations

import time
from typing import Any, TypedDict

from elo_per_token.contracts.jobs import (
    MAX_JOBS_PER_MESSAGE,
    CeleryJobContext,
    CeleryJobContextDict,
    Job,
    JobSummary,
)
from elo_per_token.contracts.secrets import scrub
from elo_per_token.worker.celery_job import JobSettings, _deliver
from elo_per_token.worker.lifecycle import _summary


class BatchSummary(TypedDict):
    """The result of an `ept.run_jobs` message: the summaries of its first jobs, in the message's order, and
    how many jobs after them were not started (the coordinator sends those again, one message each)."""

    summaries: list[JobSummary]
    deferred: int


def celery_run_jobs(
    task_self: Any,
    job_dicts: Any,
    ctx_dict: CeleryJobContextDict,
    worker: tuple[str | None, JobSettings],
    budget_s: float,
) -> BatchSummary:
    """Body of the Celery task `ept.run_jobs`: each job of the message as its own delivery, one after another,
    starting jobs while the batch is younger than `budget_s`. worker: (this worker's profiles file, its
    JobSettings). A message that is not a list of at most MAX_JOBS_PER_MESSAGE jobs is refused whole (ValueError: the task
    fails and the coordinator reports each of its jobs failed)."""
    if not isinstance(job_dicts, list) or not 0 < len(job_dicts) <= MAX_JOBS_PER_MESSAGE:
        raise ValueError(f"an ept.run_jobs message carries a list of 1..{MAX_JOBS_PER_MESSAGE} jobs")
    ctx = CeleryJobContext.from_dict(ctx_dict)
    task_id = getattr(getattr(task_self, "request", None), "id", None)
    started, summaries = time.monotonic(), list[JobSummary]()
    for place, job_dict in enumerate(job_dicts):
        if summaries and time.monotonic() - started > budget_s:
            break
        # The job's own ran marker: a redelivered batch returns the summaries of the jobs it finished before.
        delivery = f"{task_id}#{place}" if task_id else None
        summaries.append(_one(task_self, job_dict, ctx, worker, delivery))
    return {"summaries": summaries, "deferred": len(job_dicts) - len(summaries)}


def _one(
    task_self: Any,
    job_dict: Any,
    ctx: CeleryJobContext,
    worker: tuple[str | None, JobSettings],
    delivery: str | None,
) -> JobSummary:
    """One job of a batch: its summary; what would fail a message of its own fails only this job, reported as
    the coordinator reports a failed message ("worker error: ...", transient: `ept retry` runs it again)."""
    try:
        job = Job.from_dict(job_dict)
    except Exception as e:
        key = job_dict.get("key") if isinstance(job_dict, dict) else None
        return _worker_error(str(key)[:200] if key is not None else "?", e)
    try:
        return _deliver(task_self, job, ctx, worker, delivery)[0]
    except Exception as e:
        return _worker_error(job.key, e, job)


def _worker_error(key: str, e: Exception, job: Job | None = None) -> JobSummary:
    msg = scrub(f"worker error: {type(e).__name__}: {e}")[:2000]
    if job is not None:
        return _summary(job, "failed", **{"class": "transient", "message": msg})
    return {"key": key, "status": "failed", "calls": 0, "tokens": 0, "class": "transient", "message": msg}
