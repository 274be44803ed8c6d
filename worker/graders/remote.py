"""The `grade` Celery queue as a code-test runner: code grading can run on a grader worker instead of here.

With EPT_GRADE_QUEUE=grade the caller sends (code, tests, entry point, limits) to a grader worker started
with no provider keys and no S3 credentials (`ept worker --queues grade`, see docker-compose.yml and
deploy/k8s/grader.yaml), and waits for the verdict: a sandbox escape there finds nothing to steal.

This module is transport only: it imports neither the code grader nor the Celery app. The app that owns the
broker connection hands itself in (worker/celery_app.py `route_grading`), and the code grader receives the
runner built here (worker/graders/code.py `use_test_runner`), so no import runs against the flow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from elo_per_token.contracts import settings

GRADE_TASK = "ept.grade_code"


def grade_queue(env: Mapping[str, str] | None = None) -> str | None:
    """The grader queue code grading goes to (EPT_GRADE_QUEUE in `env`, default the process environment), or
    None: grade in this process."""
    return settings.read_str("EPT_GRADE_QUEUE", env)


def queue_runner(app: Any, queue: str, wait_s: float) -> Callable[..., dict[str, Any]]:
    """A test runner with run_tests' signature (code, tests, entry_point, limits) that sends the work to
    `queue` through the Celery `app` and waits up to `wait_s` for the verdict."""

    def run_on_queue(code: str, tests: list[str], entry_point: str, limits: Any) -> dict[str, Any]:
        res = app.send_task(GRADE_TASK, args=[code, list(tests), entry_point, asdict(limits)], queue=queue)
        return _verdict(res, queue, wait_s)

    return run_on_queue


def _verdict(res: Any, queue: str, wait: float) -> dict[str, Any]:
    # Waiting on a task from inside a task is normally refused by Celery; here it is the point (the grader
    # queue is served by other workers, so this cannot deadlock on our own pool).
    from celery.exceptions import TimeoutError as CeleryTimeout

    from elo_per_token.worker.graders.registry import GradingUnavailable

    try:
        out = res.get(timeout=wait, disable_sync_subtasks=False)
    except CeleryTimeout:  # no grader answered: infrastructure, not the candidate (the job stays unscored)
        raise GradingUnavailable(f"grader queue {queue!r} gave no verdict within {wait:g}s") from None
    if not isinstance(out, dict) or "passed" not in out:
        raise GradingUnavailable(f"grader queue {queue!r} returned a malformed verdict")
    return out
