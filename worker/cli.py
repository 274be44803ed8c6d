"""`ept worker`: a Celery worker with sensible defaults for I/O-bound jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from elo_per_token.egress.doctor import Check


def register(app: typer.Typer) -> None:
    @app.command("worker")
    def worker(
        concurrency: Annotated[
            int, typer.Option("--concurrency", "-c", help="Jobs in flight (threads) in this process.")
        ] = 16,
        queue: Annotated[str, typer.Option("--queue", "-Q", help="Queue to consume.")] = "ept",
        broker: Annotated[
            str | None, typer.Option("--broker", help="Broker URL (default: $EPT_BROKER_URL or local Redis).")
        ] = None,
        hostname: Annotated[str | None, typer.Option("--hostname", "-n", help="Worker node name.")] = None,
        loglevel: Annotated[str, typer.Option("--loglevel", "-l")] = "INFO",
        profiles: Annotated[
            str | None,
            typer.Option("--profiles", help="profiles.toml to resolve profile names (else $EPT_PROFILES)."),
        ] = None,
    ) -> None:
        """Run a Celery worker for sweep jobs (threads pool: jobs wait on the API, not the CPU)."""
        from elo_per_token.worker.celery_app import broker_url, configure_process, make_app

        # Read once here and passed down: the tasks find both on their Celery app (worker.lifecycle).
        url = broker or broker_url()
        configure_process()  # the sandbox's and the math grader's settings, before the sandbox check uses them
        _check_sandbox(queue, url)
        _check_allow_lists(queue, url)
        capp = make_app(url, profiles=profiles or None)
        argv = [
            "worker",
            "-P",
            "threads",
            "-c",
            str(concurrency),
            "-Q",
            queue,
            "-l",
            loglevel,
            "--without-gossip",
            "--without-mingle",
        ]
        if _is_grader(queue):  # `grade` or the queue EPT_GRADE_QUEUE names: both take the grader settings
            capp.conf.update(grader_broker_settings(capp.conf.broker_transport_options))
            argv.append("--without-heartbeat")
        if hostname:
            argv += ["-n", hostname]
        beat = _heartbeat(capp, queue, hostname)
        try:
            capp.worker_main(argv)
        finally:
            beat.stop()


def _heartbeat(capp: Any, queue: str, hostname: str | None) -> Any:
    """Start this process's liveness key on the broker (worker.heartbeat): how the coordinator knows a grader,
    which takes no remote-control broadcasts, is there. Returns it, to stop when the worker does."""
    import os
    import socket

    import redis

    from elo_per_token.worker.heartbeat import start_heartbeat

    r = redis.Redis.from_url(str(capp.conf.broker_url), socket_timeout=5, socket_connect_timeout=5)
    return start_heartbeat(r, queue, f"{hostname or socket.gethostname()}:{os.getpid()}")


GRADE_QUEUE = "grade"


def grader_broker_settings(transport_options: dict[str, Any]) -> dict[str, Any]:
    """Celery settings for a grader worker, which may hold a Redis user restricted to `grade*` keys and
    `celery-task-meta-*` (deploy/README.md, "Broker users"): its unacked bookkeeping lives under `grade.*`
    instead of the job workers' shared `unacked` hash (so it cannot plant a message there for a job worker to
    restore onto the `ept` queue), and it takes no remote-control broadcasts (no pidbox keys or channels)."""
    opts = dict(transport_options)
    opts.update(
        unacked_key=f"{GRADE_QUEUE}.unacked",
        unacked_index_key=f"{GRADE_QUEUE}.unacked_index",
        unacked_mutex_key=f"{GRADE_QUEUE}.unacked_mutex",
    )
    return {"broker_transport_options": opts, "worker_enable_remote_control": False}


def _check_allow_lists(queue: str, broker: str) -> None:
    """A job worker with no ledger allow-list could only refuse every job: it exits 2 at once, saying what to set."""
    from elo_per_token.worker.trust import LEDGERS_ENV, ledgers_configured

    if not _is_grader(queue) and not ledgers_configured():
        message = (
            f"set {LEDGERS_ENV} to the ledger(s) this worker may write to (the plan's `ledger`, e.g. "
            f"s3://ept-ledger/sweeps; comma-separated, a trailing * allows a prefix): a worker never takes the "
            "ledger from a message alone (EPT_WORKER_BASE_URLS likewise lists the endpoints a plan may override)"
        )
        typer.echo(f"error: {message}", err=True)
        _report_start_failure(queue, message, broker)
        raise typer.Exit(2)


def _is_grader(queue: str) -> bool:
    """Whether `queue` is a grading queue: `grade`, or the one EPT_GRADE_QUEUE names."""
    from elo_per_token.worker.graders.remote import grade_queue

    return queue == GRADE_QUEUE or grade_queue() == queue


def _report_start_failure(queue: str, message: str, broker: str) -> None:
    """Leave the reason on the broker for a coordinator waiting on this queue (best effort, never raises)."""
    import contextlib

    from elo_per_token.contracts.jobs import worker_error_key
    from elo_per_token.contracts.secrets import scrub

    with contextlib.suppress(Exception):
        import redis

        r = redis.Redis.from_url(broker, socket_timeout=3, socket_connect_timeout=3)
        r.set(worker_error_key(queue), scrub(message)[:2000], ex=3600)


def sandbox_check() -> Check:
    """`ept doctor`'s line for the code grader's sandbox: which bwrap runs (and why that one) and whether it
    starts here. A warning, not a failure: a sweep without code tasks does not need it."""
    from elo_per_token.egress.doctor import PASS, WARN, Check
    from elo_per_token.worker.sandbox import bwrap

    choice = bwrap.choose_bwrap()
    where = (
        f"{choice.path} ({choice.source}{'; ' + choice.note if choice.note else ''})"
        if choice.path
        else f"none ({choice.note or 'not found'})"
    )
    why = bwrap.probe()
    if why is None:
        return Check("code sandbox (bwrap)", PASS, f"{where}: starts")
    return Check("code sandbox (bwrap)", WARN, f"{where}: {why.split(': ')[0]}; code tasks will fail", why)


def _check_sandbox(queue: str, broker: str) -> None:
    """A grader worker without a working sandbox exits 2 at once (it could only fail every candidate); a job
    worker that would grade code itself says so at start, before code jobs fail one by one."""
    from elo_per_token.worker.graders.remote import grade_queue
    from elo_per_token.worker.sandbox import bwrap

    why = bwrap.probe()
    if why is None:
        return
    if _is_grader(queue):
        message = f"this grader cannot run its sandbox: {why}"
        typer.echo(f"error: {message}", err=True)
        _report_start_failure(queue, message, broker)
        raise typer.Exit(2)
    if not grade_queue():
        typer.echo(f"warning: this worker cannot grade code tasks (they will fail): {why}", err=True)
