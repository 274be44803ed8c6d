"""What a worker grades comes from the run, not from the message.

A job message carries the whole task (prompt, reference, grader). Anyone who can publish to the broker (the
grader holds its password, as does Flower) could send the victim's job with its `reference` changed and have
a worker store that grade under the victim's run. The coordinator records every task's digest in the run's
identity before it enqueues a job (contracts.taskdigest: identity/tasks-<digest>.json, named by the
manifest); a worker grades a job only when its task's digest is the one the run recorded for that task, and
the job's outcome line carries the digest (analysis checks it again).

Digests are cached per (ledger, run) in the process; a task not in the cache, or with another digest, makes
the worker read the run's record again (a run that grew in another session), so a forged message costs two
ledger reads and is refused.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from elo_per_token.contracts.errors import InputError

if TYPE_CHECKING:
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.ledger import Ledger


class ForgedTask(Exception):
    """The job's task is not the one its run recorded: the job is refused, nothing is run or written."""


class RunTasks:
    """The task digests of the runs this process works for, read from their ledgers on first need."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], dict[str, str]] = {}
        self._lock = threading.Lock()

    def verify(self, ledger: Ledger, job: Job) -> str:
        """The job's task digest if it is the one the run recorded for the job's task; ForgedTask otherwise
        (a run without a record of its tasks, an unreadable record, an unknown task, another digest)."""
        from elo_per_token.contracts.taskdigest import key_task_part, run_task_digests, task_digest

        digest = task_digest(job.task)
        part = key_task_part(job.key)
        cache_key = (ledger.url, job.run_id)
        with self._lock:
            known = self._known.get(cache_key)
        if known is None or known.get(part) != digest:
            try:
                fresh = run_task_digests(ledger, job.run_id)
            except InputError as e:
                raise ForgedTask(
                    f"run {job.run_id!r}: its record of tasks is unreadable ({e}); refused"
                ) from None
            except Exception as e:  # a manifest that is not JSON: the run's record cannot vouch for the task
                raise ForgedTask(
                    f"run {job.run_id!r}: its manifest is unreadable ({type(e).__name__}); refused"
                ) from None
            if fresh is None:
                raise ForgedTask(
                    f"run {job.run_id!r} records no task digests (the coordinator records them before it enqueues "
                    "a job): this job's task cannot be checked; refused"
                )
            known = fresh
            with self._lock:
                self._known[cache_key] = known
        if part not in known:
            raise ForgedTask(f"task {part!r} is not one of run {job.run_id!r}'s tasks; refused")
        if known[part] != digest:
            raise ForgedTask(
                f"task {part!r} in this message differs from the one run {job.run_id!r} recorded (digest {digest}, "
                f"recorded {known[part]}: prompt, reference or grader changed); refused, nothing graded or written"
            )
        return digest
