"""`ept worker`: a Celery worker with sensible defaults for I/O-bound jobs."""

from __future__ import annotations

from typing import Any

import typer


def register(app: typer.Typer) -> None:
    @app.command("worker")
    def worker(
        concurrency: int = typer.Option(16, "--concurrency", "-c", help="Jobs in flight (threads) in this process."),
        queue: str = typer.Option("ept", "--queue", "-Q", help="Queue to consume."),
        broker: str = typer.Option(None, "--broker", help="Broker URL (default: $EPT_BROKER_URL or local Redis)."),
        hostname: str = typer.Option(None, "--hostname", "-n", help="Worker node name."),
        loglevel: str = typer.Option("INFO", "--loglevel", "-l"),
        profiles: str = typer.Option(None, "--profiles", help="profiles.toml to resolve profile names (else $EPT_PROFILES)."),
    ) -> None:
        """Run a Celery worker for sweep jobs (threads pool: jobs wait on the API, not the CPU)."""
        import os

        if profiles:
            os.environ["EPT_PROFILES"] = profiles
        if broker:
            os.environ["EPT_BROKER_URL"] = broker
        _check_sandbox(queue)
        from elo_per_token.worker.celery_app import make_app

        capp = make_app(broker)
        argv = ["worker", "-P", "threads", "-c", str(concurrency), "-Q", queue, "-l", loglevel,
                "--without-gossip", "--without-mingle"]  # fmt: skip
        if queue == GRADE_QUEUE:
            capp.conf.update(grader_broker_settings(capp.conf.broker_transport_options))
            argv.append("--without-heartbeat")
        if hostname:
            argv += ["-n", hostname]
        capp.worker_main(argv)


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


def _check_sandbox(queue: str) -> None:
    """A grader worker without a working sandbox exits 2 at once (it could only fail every candidate); a job
    worker that would grade code itself says so at start, before code jobs fail one by one."""
    import os

    from elo_per_token.worker.sandbox import bwrap

    why = bwrap.probe()
    if why is None:
        return
    if queue == GRADE_QUEUE:
        typer.echo(f"error: this grader cannot run its sandbox: {why}", err=True)
        raise typer.Exit(2)
    if not os.environ.get("EPT_GRADE_QUEUE"):
        typer.echo(f"warning: this worker cannot grade code tasks (they will fail): {why}", err=True)
