"""The local executor: jobs run in this process on a thread pool (they wait on HTTP, not on the CPU).

Ctrl-C (or SIGTERM) stops submitting new jobs and lets the ones in flight finish and reach the ledger, so
an interrupted run never leaves a half-run job whose calls would be paid for twice on resume.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from contracts.jobs import Job
from contracts.ledger import Ledger


def run_local(
    jobs: Iterable[Job],
    ledger: Ledger,
    provider: Any,
    *,
    concurrency: int,
    on_result: Callable[[dict[str, Any]], None],
    on_retry: Callable[[Job, int, str], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    run: Callable | None = None,
    clear_failures: Collection[str] = (),
) -> bool:
    """Run jobs; returns True when every job was attempted, False when interrupted or stopped early."""
    from worker.tasks import perform_job

    api_key = getattr(provider, "_key", None)  # to scrub it from failure messages
    todo = iter(jobs)
    in_flight: set[Future] = set()
    draining = False
    interrupted = threading.Event()

    def _term(_sig: int, _frm: Any) -> None:
        raise KeyboardInterrupt

    prev = None
    if threading.current_thread() is threading.main_thread():
        prev = signal.signal(signal.SIGTERM, _term)
    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ept-job") as pool:
            while True:
                try:
                    # Keep a short queue so an interrupt leaves few jobs to finish.
                    while not draining and len(in_flight) < concurrency * 2:
                        job = next(todo, None)
                        if job is None or should_stop():
                            draining = True
                            break
                        in_flight.add(
                            pool.submit(perform_job, job, ledger, provider, on_retry=on_retry, run=run, api_key=api_key,
                                        clear_failure=job.key in clear_failures)
                        )
                    if not in_flight:
                        break
                    done, in_flight = wait(in_flight, timeout=0.5, return_when=FIRST_COMPLETED)
                    for f in done:
                        on_result(f.result())
                except KeyboardInterrupt:
                    if interrupted.is_set():
                        raise  # a second Ctrl-C: give up waiting
                    interrupted.set()
                    draining = True
    finally:
        if prev is not None:
            signal.signal(signal.SIGTERM, prev)
    return not interrupted.is_set() and not should_stop()
