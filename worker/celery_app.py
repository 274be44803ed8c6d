"""The Celery app: Redis broker, JSON only, late acks, one message per worker thread at a time.

Delivery guarantees and why:
- `task_acks_late` + `task_reject_on_worker_lost`: a job is acknowledged only after its result is stored, so a
  killed worker's jobs are delivered again.
- Redis has no broker-side leases: an unacked message comes back when it is older than `visibility_timeout`
  AND kombu's restore sweep runs (every `unacked_restore_interval` x `unacked_restore_throttle`). Defaults
  (VT 50 s, sweep every 5 s) bring a dead worker's jobs back in under a minute. The timeout must stay above the
  longest job (raise EPT_VISIBILITY_TIMEOUT for slow providers): a job still running past it is delivered a
  second time, which the Redis claim and the ledger's conditional create turn into a no-op.
- `worker_prefetch_multiplier = 1`: a worker holds only the messages it is running, so scaling out spreads load.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from celery import Celery

if TYPE_CHECKING:
    from elo_per_token.contracts.jobs import CeleryJobContextDict, JobSummary

    app: Celery  # built on first use by __getattr__ below

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
DEFAULT_QUEUE = "ept"


def broker_url() -> str:
    return os.environ.get("EPT_BROKER_URL") or DEFAULT_BROKER


def make_app(url: str | None = None) -> Celery:
    url = url or broker_url()
    vt = int(os.environ.get("EPT_VISIBILITY_TIMEOUT", "50"))
    app = Celery("ept", broker=url, backend=os.environ.get("EPT_RESULT_BACKEND") or url)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_pool="threads",
        task_default_queue=DEFAULT_QUEUE,
        broker_transport_options={
            "visibility_timeout": vt,
            "unacked_restore_interval": 5,
            "unacked_restore_throttle": 1,
            # The restore sweep holds a Redis mutex; if a worker dies holding it, nobody restores anything
            # until it expires (kombu default: 5 minutes). A sweep takes milliseconds.
            "unacked_mutex_expire": 30,
        },
        result_backend_transport_options={"visibility_timeout": vt},
        result_expires=7 * 24 * 3600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_track_started=False,
        # Task events cost a Redis publish per state change; Flower switches them on when it starts.
        worker_send_task_events=False,
        task_send_sent_event=False,
    )

    # celery ships no type information: its decorator hides these signatures from mypy.
    @app.task(name="ept.run_job", bind=True, shared=False)  # type: ignore[untyped-decorator]
    def run_job_task(self: Any, job: dict[str, Any], ctx: CeleryJobContextDict) -> JobSummary:
        from elo_per_token.worker.tasks import celery_run_job

        return celery_run_job(self, job, ctx)

    @app.task(name="ept.grade_code", shared=False, acks_late=True)  # type: ignore[untyped-decorator]
    def grade_code_task(code: str, tests: list[str], entry_point: str, limits: dict[str, Any]) -> dict[str, Any]:
        # Served by grader workers (`ept worker --queue grade`) that hold no provider keys or S3 credentials.
        from elo_per_token.worker.graders.remote import grade_task_body

        return grade_task_body(code, tests, entry_point, limits)

    return app


def __getattr__(name: str) -> Celery:
    # `celery -A worker.celery_app worker` (and Flower) look up `app`; build it on first use, not on import.
    if name in ("app", "celery"):
        globals()[name] = make_app()
        return globals()[name]
    raise AttributeError(name)
