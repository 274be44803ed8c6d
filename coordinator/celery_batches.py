"""Jobs packed into Celery messages (the plan's `jobs_per_message`) and a batch message's result read back.

A message of one job is `ept.run_job`, as always; a message of several is `ept.run_jobs` (worker.celery_batch),
whose result is the summaries of the jobs it ran, in order, and how many after them it did not start (those are
sent again, one message each). The coordinator trusts a batch result only as far as it matches what it sent.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

from elo_per_token.contracts.jobs import Job, JobSummary

BATCH_TASK = "ept.run_jobs"


def pack(jobs: Sequence[Job], per_message: int, clears: Callable[[Job], bool]) -> Iterator[tuple[Job, ...]]:
    """`jobs` in messages of at most `per_message`, in order; a message's jobs share one context, so jobs whose
    earlier failure object is to be cleared (`clears`) travel apart from those whose is not."""
    if per_message <= 1:
        yield from ((j,) for j in jobs)
        return
    for _, group in itertools.groupby(jobs, key=clears):
        run = list(group)
        for i in range(0, len(run), per_message):
            yield tuple(run[i : i + per_message])


def read_batch(
    payload: Any, jobs: Sequence[Job], failed: Callable[[str, str], JobSummary]
) -> tuple[list[JobSummary], list[Job]]:
    """A batch message's result as (a summary for each job it ran, the jobs it did not start). A summary that is
    not the job's (another key, not a mapping) or a result that is not a batch result reports the job failed
    (`failed(key, message)`): results are read from a broker anyone with its password can write to."""
    got = payload.get("summaries") if isinstance(payload, dict) else None
    if not isinstance(got, list):
        return [failed(j.key, "worker error: not a batch result") for j in jobs], []
    summaries = [
        cast(JobSummary, s)
        if isinstance(s, dict) and s.get("key") == job.key
        else failed(job.key, "worker error: a result for another job")
        for job, s in zip(jobs, got[: len(jobs)], strict=False)
    ]
    return summaries, list(jobs[len(summaries) :])
