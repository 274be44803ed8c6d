"""The local executor: jobs run in this process on a thread pool (they wait on HTTP, not on the CPU).

Stopping (Ctrl-C or SIGTERM):
1. The first signal stops submitting, cancels the jobs queued but not started, and tells the provider client
   and the job loop to stop retrying: each in-flight job ends after its current request and reaches the ledger
   (a result, or a failure record with the calls it made), so nothing is paid for twice on resume.
2. In-flight jobs get a grace period of EPT_STOP_GRACE_S seconds (default 30). Jobs still running after it are
   abandoned: their calls so far are not recorded, and the process exits (the CLI exits 130).
3. A second signal exits at once (exit 130), abandoning whatever is in flight.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from elo_per_token.contracts import settings
from elo_per_token.contracts.errors import EXIT_INTERRUPTED
from elo_per_token.contracts.jobs import Job, JobSummary
from elo_per_token.contracts.records import JobResult
from elo_per_token.ledger import Ledger


def stop_grace_s() -> float:
    """EPT_STOP_GRACE_S, read when a run starts (a bad value is an InputError then, not at Ctrl-C)."""
    return max(0.0, settings.read_float("EPT_STOP_GRACE_S"))


def hard_exit(message: str, code: int = EXIT_INTERRUPTED) -> None:
    """Exit now, without joining worker threads (a thread blocked in an HTTP read would hold the exit)."""
    sys.stdout.flush()
    print(message, file=sys.stderr, flush=True)
    os._exit(code)


def sigterm_as_interrupt(_sig: int, _frm: Any) -> None:
    """SIGTERM stops a local sweep as Ctrl-C does."""
    raise KeyboardInterrupt


def _route_grading() -> Callable[..., JobSummary]:
    """Set where this process grades code: on the grader queue (EPT_GRADE_QUEUE), through the Celery app (built
    on first use), else in its own sandbox. Returns the worker's perform_job, which runs the jobs."""
    from elo_per_token.worker.graders.remote import grade_queue
    from elo_per_token.worker.lifecycle import perform_job

    if grade_queue():
        from elo_per_token.worker.celery_app import app, route_grading

        route_grading(app)
    else:
        from elo_per_token.worker.graders.code import use_test_runner

        use_test_runner(None)
    return perform_job


def _report(done: Iterable[Future[JobSummary]], on_result: Callable[[JobSummary], None]) -> None:
    """Hand the finished jobs' summaries to on_result (a job cancelled before it started has none)."""
    for f in done:
        if not f.cancelled():
            on_result(f.result())


def _job_arguments(
    provider: Any,
    stop: threading.Event,
    on_retry: Callable[[Job, int, str], None] | None,
    run: Callable[[Job, Any], JobResult] | None,
    tasks: Any,
    check_existing: bool,
    transcripts: bool,
) -> dict[str, Any]:
    """perform_job's keyword arguments, the same for every job of the run (api_key: the provider's, to scrub it
    from failure messages)."""
    return {
        "on_retry": on_retry,
        "run": run,
        "api_key": getattr(provider, "_key", None),
        "tasks": tasks,
        "check_existing": check_existing,
        "stop": stop,
        "transcripts": transcripts,
    }


def _catch_sigterm() -> Any:
    """SIGTERM stops the run as Ctrl-C does; returns the handler it replaced (None off the main thread, where
    signal handlers cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, sigterm_as_interrupt)


def _until(deadline: float) -> float:
    """How long to wait for a job to finish: half a second at most (on_tick's period), never past `deadline`."""
    return min(0.5, max(0.0, deadline - time.monotonic()))


def _submitter(
    pool: ThreadPoolExecutor,
    perform_job: Callable[..., JobSummary],
    store: tuple[Ledger, Any],
    clear_failures: Collection[str],
    call: dict[str, Any],
) -> Callable[[Job], Future[JobSummary]]:
    """Submit one job to the pool: perform_job(job, ledger, provider, **call); clear_failure when the job failed
    in an earlier session."""
    ledger, provider = store

    def submit(job: Job) -> Future[JobSummary]:
        return pool.submit(
            perform_job, job, ledger, provider, clear_failure=job.key in clear_failures, **call
        )

    return submit


def _fill(
    in_flight: set[Future[JobSummary]],
    todo: Iterator[Job],
    room: int,
    should_stop: Callable[[], bool],
    submit: Callable[[Job], Future[JobSummary]],
) -> bool:
    """Submit jobs until `room` are in flight; True once none is left to submit (all submitted, or stopped).
    Adds to `in_flight` in place, so a Ctrl-C in the middle still leaves every submitted job in it."""
    while len(in_flight) < room:
        job = next(todo, None)
        if job is None or should_stop():
            return True
        in_flight.add(submit(job))
    return False


def _interrupt(
    in_flight: set[Future[JobSummary]], interrupted: threading.Event, stop: threading.Event, grace: float
) -> tuple[set[Future[JobSummary]], float]:
    """A Ctrl-C: the second exits now; the first stops retries, cancels the queued jobs and gives the jobs in
    flight `grace` seconds. Returns (the jobs still in flight, the deadline)."""
    if interrupted.is_set():
        hard_exit(f"second interrupt: exiting now; {len(in_flight)} job(s) in flight are not recorded")
    interrupted.set()
    stop.set()
    # Queued jobs that have not started never start.
    in_flight = {f for f in in_flight if not f.cancel()}
    deadline = time.monotonic() + grace
    print(
        f"stopping: {len(in_flight)} job(s) in flight get up to {grace:g}s to finish and reach the "
        "ledger; press Ctrl-C again to exit now",
        file=sys.stderr,
        flush=True,
    )
    return in_flight, deadline


def run_local(
    jobs: Iterable[Job],
    ledger: Ledger,
    provider: Any,
    *,
    concurrency: int,
    on_result: Callable[[JobSummary], None],
    on_retry: Callable[[Job, int, str], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    run: Callable[[Job, Any], JobResult] | None = None,
    clear_failures: Collection[str] = (),
    check_existing: bool = True,
    grace_s: float | None = None,
    on_abandon: Callable[[int], None] | None = None,
    transcripts: bool = False,
    cancel_queued: Callable[[], bool] = lambda: False,
    queue_factor: int = 2,
    tasks: Any = None,
    on_tick: Callable[[], None] = lambda: None,
) -> bool:
    """Run jobs; returns True when every job was attempted, False when interrupted or stopped early.
    on_abandon(n): n jobs were still running after the grace period. cancel_queued() (a budget cap) stops at
    most the `concurrency` running jobs over the cap with queue_factor=1 (no job waits in the pool for a freed
    thread to start it). tasks: worker.taskcheck.RunTasks; on_tick(): twice a second (an outage is shown)."""
    perform_job = _route_grading()  # before any job: code grading may go to the grader queue
    stop = getattr(provider, "stopping", None) or threading.Event()
    call = _job_arguments(provider, stop, on_retry, run, tasks, check_existing, transcripts)
    grace = stop_grace_s() if grace_s is None else grace_s
    todo = iter(jobs)
    in_flight: set[Future[JobSummary]] = set()
    draining, interrupted, deadline = False, threading.Event(), float("inf")
    prev = _catch_sigterm()
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ept-job")
    submit = _submitter(pool, perform_job, (ledger, provider), clear_failures, call)
    abandoned = 0
    try:
        while True:
            try:
                if not draining:  # keep a short queue so an interrupt leaves few jobs to finish
                    draining = _fill(in_flight, todo, concurrency * queue_factor, should_stop, submit)
                if not in_flight:
                    break
                if time.monotonic() >= deadline:
                    abandoned = len(in_flight)
                    break
                done, in_flight = wait(in_flight, timeout=_until(deadline), return_when=FIRST_COMPLETED)
                _report(done, on_result)
                on_tick()
                if cancel_queued():  # a cap reached: jobs submitted but not started never start
                    draining, in_flight = True, {f for f in in_flight if not f.cancel()}
            except KeyboardInterrupt:
                draining = True
                in_flight, deadline = _interrupt(in_flight, interrupted, stop, grace)
    finally:
        if prev is not None:
            signal.signal(signal.SIGTERM, prev)
        pool.shutdown(wait=not abandoned, cancel_futures=True)
    if abandoned and on_abandon is not None:
        on_abandon(abandoned)
    return not interrupted.is_set() and not should_stop()
