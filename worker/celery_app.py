"""The Celery app: Redis broker, JSON only, late acks, one message per worker thread at a time.

Delivery guarantees and why:
- `task_acks_late` + `task_reject_on_worker_lost`: a job is acknowledged only after its result is stored, so a
  killed worker's jobs are delivered again.
- Redis has no broker-side leases: an unacked message comes back when it is older than `visibility_timeout`
  AND kombu's restore sweep runs (every `unacked_restore_interval` x `unacked_restore_throttle`). Defaults
  (VT 50 s, sweep every 5 s) bring a dead worker's jobs back in under a minute. The lease must outlive the
  longest wait of a job: with a grade queue (EPT_GRADE_QUEUE) a job waits up to EPT_GRADE_TIMEOUT for its
  verdict, so the lease defaults to that plus LEASE_MARGIN_S, and an explicit EPT_VISIBILITY_TIMEOUT below it
  is refused (`lease_seconds`): a lease shorter than the grading wait redelivers every code job that waits
  (a 300 s wait under a 50 s lease: again and again), each copy paying for its provider calls. A job still running past its lease anyway (many
  slow calls) is delivered a second time, which the Redis claim, the worker's ran marker (a finished or
  failed delivery is never run again) and the ledger's conditional create turn into a no-op.
- `worker_prefetch_multiplier = 1`: a worker holds only the messages it is running, so scaling out spreads load.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from celery import Celery

from elo_per_token.contracts import settings
from elo_per_token.contracts.errors import InputError

if TYPE_CHECKING:
    from elo_per_token.contracts.jobs import CeleryJobContextDict, JobSummary
    from elo_per_token.worker.celery_batch import BatchSummary
    from elo_per_token.worker.celery_job import JobSettings

    app: Celery  # built on first use by __getattr__ below

DEFAULT_BROKER = str(settings.read("EPT_BROKER_URL", {}))  # the declared default
DEFAULT_QUEUE = "ept"
DEFAULT_LEASE_S = 50
# The lease exceeds the grading wait by this much: the provider calls before it and the ledger write after it.
LEASE_MARGIN_S = 60
# A batch of jobs (worker.celery_batch) starts its jobs within this window: batches of fast jobs run whole,
# a batch of slow jobs runs its first job and hands the rest back. Never more than a fifth of the lease.
BATCH_WINDOW_S = 1.0
BATCH_LEASE_SHARE = 5


def grade_timeout_s(env: Mapping[str, str] | None = None) -> float:
    """How long a job waits for a verdict from the grade queue (EPT_GRADE_TIMEOUT, seconds)."""
    value = settings.read_float("EPT_GRADE_TIMEOUT", env)
    if not 0 < value < 86400:
        raise InputError(f"must be between 0 and 86400 seconds, got {value:g}", field="EPT_GRADE_TIMEOUT")
    return value


def lease_seconds(env: Mapping[str, str] | None = None) -> int:
    """The broker lease (visibility timeout) of a job message, checked against the longest wait inside a job.

    Unset EPT_VISIBILITY_TIMEOUT: 50 s, or EPT_GRADE_TIMEOUT + LEASE_MARGIN_S when jobs wait on a grade queue.
    Set: used as given, but a lease that a grading wait can outlast is refused (InputError naming both
    settings): the job would be delivered again while it waits, and every copy would pay for its calls."""
    need = (
        math.ceil(grade_timeout_s(env)) + LEASE_MARGIN_S if settings.read_str("EPT_GRADE_QUEUE", env) else 0
    )
    vt = settings.read("EPT_VISIBILITY_TIMEOUT", env)
    if vt is None:
        return max(DEFAULT_LEASE_S, need)
    assert isinstance(vt, int)  # declared an int: read parsed it or raised
    if vt < 1:
        raise InputError(f"must be at least 1 second, got {vt}", field="EPT_VISIBILITY_TIMEOUT")
    if vt < need:
        raise InputError(
            f"{vt} s is shorter than a job's longest wait: EPT_GRADE_TIMEOUT ({grade_timeout_s(env):g} s) + "
            f"{LEASE_MARGIN_S} s. Raise EPT_VISIBILITY_TIMEOUT to at least {need}, or lower EPT_GRADE_TIMEOUT: "
            "a job still waiting for its grade when its lease ends is delivered again and pays for its calls again",
            field="EPT_VISIBILITY_TIMEOUT",
        )
    return vt


def broker_url() -> str:
    """EPT_BROKER_URL (default: local Redis)."""
    return settings.read_str("EPT_BROKER_URL") or DEFAULT_BROKER


def make_app(url: str | None = None, profiles: str | None = None) -> Celery:
    """The Celery app on broker `url` (default: EPT_BROKER_URL). profiles: the profiles file this worker's
    tasks resolve profile names with (None: EPT_PROFILES, else ./profiles.toml, as egress.profiles looks)."""
    url = url or broker_url()
    vt = lease_seconds()
    # Where code is graded: read once here, installed before each job (not re-read from the environment per job).
    route = grading_route()
    limits = _job_settings()  # the rate-limit store and the allow-lists, read once likewise
    backend = settings.read_str("EPT_RESULT_BACKEND") or url
    # A job stores its own result entry in its claim's release round trip (celery_job.TaskResult) when its
    # claims live where the results do; Celery then does not store it again (ignore_result; errors it still does).
    own_results = results_with_claims(url, backend, limits)
    app = Celery("ept", broker=url, backend=backend)
    app.conf.update(_settings(vt))

    # celery ships no type information: its decorator hides these signatures from mypy.
    @app.task(
        name="ept.run_job",
        bind=True,
        shared=False,
        ignore_result=own_results,
        store_errors_even_if_ignored=True,
    )  # type: ignore[untyped-decorator]
    def run_job_task(self: Any, job: dict[str, Any], ctx: CeleryJobContextDict) -> JobSummary:
        from elo_per_token.worker.celery_job import celery_run_job

        route_grading(app, route)  # where code is graded, as this worker's environment said at start
        return celery_run_job(self, job, ctx, profiles=profiles, limits=limits, results=own_results)

    batch_window_s = min(BATCH_WINDOW_S, vt / BATCH_LEASE_SHARE)  # a batch ends well before its lease does

    @app.task(name="ept.run_jobs", bind=True, shared=False)  # type: ignore[untyped-decorator]
    def run_jobs_task(self: Any, jobs: list[dict[str, Any]], ctx: CeleryJobContextDict) -> BatchSummary:
        from elo_per_token.worker.celery_batch import celery_run_jobs

        route_grading(app, route)
        return celery_run_jobs(self, jobs, ctx, (profiles, limits), batch_window_s)

    @app.task(name="ept.grade_code", shared=False, acks_late=True)  # type: ignore[untyped-decorator]
    def grade_code_task(
        code: str, tests: list[str], entry_point: str, limits: dict[str, Any]
    ) -> dict[str, Any]:
        # Served by grader workers (`ept worker --queue grade`) that hold no provider keys or S3 credentials.
        from elo_per_token.worker.graders.code import Limits, run_tests

        return run_tests(code, tests, entry_point, Limits(**limits))

    return app


def _settings(vt: int) -> dict[str, Any]:
    """The Celery settings of every ept app (module docstring: why each); vt: the broker lease in seconds."""
    return dict(
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


def results_with_claims(broker: str, backend: str, limits: JobSettings) -> bool:
    """Whether a job's claims (worker.celery_job._redis_url: EPT_RATELIMIT_URL, else a Redis broker, else
    EPT_BROKER_URL) live on the Redis of the result backend, so the job can store its result entry in its
    claim's release round trip. Compared as written: two spellings of one server fall back to Celery's store."""
    redis_schemes = ("redis://", "rediss://", "unix://")
    claims = limits.ratelimit_url or (broker if broker.startswith(redis_schemes) else "") or limits.env_broker
    return bool(claims) and claims == backend and backend.startswith(redis_schemes)


def grading_route(env: Mapping[str, str] | None = None) -> tuple[str | None, float]:
    """Where this process grades code: the grader queue (EPT_GRADE_QUEUE; None: its own sandbox) and how long a
    job waits for a verdict there (EPT_GRADE_TIMEOUT). Read once at the worker's edge (`make_app`)."""
    from elo_per_token.worker.graders.remote import grade_queue

    queue = grade_queue(env)
    return queue, grade_timeout_s(env) if queue else 0.0


def route_grading(app: Celery, route: tuple[str | None, float] | None = None) -> None:
    """With a grader queue (`route`, default `grading_route()`), this process grades code on that queue through
    `app` (a grader worker with no keys runs the tests); without it, in its own sandbox. Called before a job
    runs (a Celery job here, or a local sweep's jobs)."""
    from elo_per_token.worker.graders.code import use_test_runner
    from elo_per_token.worker.graders.remote import queue_runner

    queue, wait_s = route or grading_route()
    use_test_runner(queue_runner(app, queue, wait_s) if queue else None)


def configure_process(env: Mapping[str, str] | None = None) -> None:
    """Read the code sandbox's and the math grader's settings once, where a worker process starts (`ept worker`;
    Celery's worker_init for `celery -A ... worker`), and install them: no job reads the environment again.
    Not on building the app: a local sweep builds one too, and keeps reading the environment when asked."""
    from elo_per_token.worker.graders import mathproc
    from elo_per_token.worker.sandbox import settings as sandbox

    sandbox.configure(sandbox.SandboxSettings.from_env(env))
    mathproc.configure(mathproc.MathSettings.from_env(env))


def _configure_on_worker_start(**_: Any) -> None:
    configure_process()


def _job_settings() -> JobSettings:
    """This app's jobs' settings, read now; and a Celery worker starting in this process (`celery -A ... worker`
    too) will install the sandbox's and the math grader's (configure_process): its start is their edge."""
    from celery.signals import worker_init

    from elo_per_token.worker.celery_job import JobSettings

    worker_init.connect(_configure_on_worker_start, weak=False, dispatch_uid="ept-configure-process")
    return JobSettings.from_env()


def __getattr__(name: str) -> Celery:
    # `celery -A elo_per_token.worker.celery_app worker` (and Flower) look up `app`; build it on first use, not on import.
    if name in ("app", "celery"):
        globals()[name] = make_app()
        return globals()[name]
    raise AttributeError(name)
