"""Where code grading runs: in this process's sandbox (default), or on the `grade` Celery queue.

With EPT_GRADE_QUEUE=grade the caller sends (code, tests, entry point, limits) to a grader worker started
with no provider keys and no S3 credentials (`ept worker --queues grade`, see docker-compose.yml and
deploy/k8s/grader.yaml), and waits for the verdict: a sandbox escape there finds nothing to steal.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

GRADE_TASK = "ept.grade_code"


def grade_queue() -> str | None:
    return os.environ.get("EPT_GRADE_QUEUE") or None


def run_tests_routed(code: str, tests: list[str], entry_point: str, limits: Any) -> dict[str, Any]:
    from elo_per_token.worker.graders.code import run_tests

    queue = grade_queue()
    if queue is None:
        return run_tests(code, tests, entry_point, limits)
    from elo_per_token.worker.celery_app import app, grade_timeout_s

    wait = grade_timeout_s()
    res = app.send_task(GRADE_TASK, args=[code, list(tests), entry_point, asdict(limits)], queue=queue)
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


def grade_task_body(code: str, tests: list[str], entry_point: str, limits: dict[str, Any]) -> dict[str, Any]:
    """Body of the Celery task `ept.grade_code` (runs on a grader worker)."""
    from elo_per_token.worker.graders.code import Limits, run_tests

    return run_tests(code, tests, entry_point, Limits(**limits))
