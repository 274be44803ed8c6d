"""Commands of the coordinator: sweep, status, retry, compact, demo."""

from __future__ import annotations

import typer

_LEDGER_HELP = "Ledger URL (folder, file://… or s3://bucket/prefix); default: the plan's, else ./ept-out/ledger."


def _ledger_and_run(run: str, ledger: str | None):
    """RUN is a run id (with --ledger) or a plan file (its name and ledger)."""
    from contracts.ledger import open_ledger

    if run.endswith(".toml"):
        from coordinator.plan import load_plan

        plan = load_plan(run)
        return open_ledger(ledger or plan.ledger), plan.run_id
    return open_ledger(ledger or "./ept-out/ledger"), run


def _finish(out, console_out) -> None:
    from coordinator.sweep import print_summary

    print_summary(out, console_out)
    from contracts.errors import EXIT_EGRESS

    if out.tally.egress_broken():  # stopped by the egress guard: the key, the endpoint or the server is the problem
        raise typer.Exit(EXIT_EGRESS)
    if not out.completed:
        raise typer.Exit(130)
    if out.tally.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    @app.command()
    def sweep(
        plan_file: str = typer.Argument(..., metavar="PLAN", help="Plan TOML (see examples/plans/)."),
        profile_url_override: str = typer.Option(
            None, "--profile-url-override", help="Send the profile's requests to this base URL instead."
        ),
        executor: str = typer.Option(None, "--executor", help="local | celery (overrides the plan)."),
        ledger: str = typer.Option(None, "--ledger", help=_LEDGER_HELP),
        concurrency: int = typer.Option(None, "--concurrency", help="Local executor threads (overrides the plan)."),
        profiles: str = typer.Option(None, "--profiles", help="profiles.toml (default: $EPT_PROFILES, ./profiles.toml)."),
        no_analysis: bool = typer.Option(False, "--no-analysis", help="Skip the Elo table at the end."),
    ) -> None:
        """Run a plan: expand to jobs, skip those already in the ledger, run the rest, print the Elo table."""
        from rich.console import Console

        from contracts.errors import InputError
        from coordinator.plan import EXECUTORS, load_plan
        from coordinator.sweep import execute, plan_jobs, resolve_profile

        plan = load_plan(plan_file)
        if executor and executor not in EXECUTORS:
            raise InputError(f"must be one of {', '.join(EXECUTORS)}", field="--executor")
        plan = plan.with_overrides(executor=executor, ledger=ledger, concurrency=concurrency)
        prof = resolve_profile(plan, profile_url_override, profiles)
        jobs = plan_jobs(plan)
        out = execute(plan, jobs, profile=prof, base_url=profile_url_override, analyze=not no_analysis)
        _finish(out, Console())

    @app.command()
    def status(
        run: str = typer.Argument(..., metavar="RUN", help="Run id (the plan's name) or the plan file."),
        ledger: str = typer.Option(None, "--ledger", help=_LEDGER_HELP),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ) -> None:
        """Progress of a running or finished run, read from the ledger."""
        import json

        from rich.console import Console
        from rich.table import Table

        from coordinator.status import run_status

        led, run_id = _ledger_and_run(run, ledger)
        st = run_status(led, run_id)
        if as_json:
            typer.echo(json.dumps({"run_id": st.run_id, "run_url": st.run_url, "n_jobs": st.n_jobs, "done": st.done,
                                   "failed": st.failed, "pending": st.pending, "retrying": st.retrying},
                                  sort_keys=True))  # fmt: skip
            return
        c = Console()
        m = st.manifest or {}
        c.print(f"[bold]run {st.run_id}[/] in {st.run_url}", highlight=False)
        c.print(f"started {m.get('started_at', '?')} · sessions {len(m.get('sessions', []))} · "
                f"profile {m.get('profile', {}).get('name', '?')} ({m.get('profile', {}).get('base_url', '?')})",
                highlight=False)  # fmt: skip
        c.print(f"jobs {st.n_jobs if st.n_jobs is not None else '?'}: done {st.done} · failed "
                f"{sum(st.failed.values())} · pending {st.pending if st.pending is not None else '?'}"
                + (f" (retrying {st.retrying} that failed before this session)" if st.retrying else ""))  # fmt: skip
        if st.failed_jobs:
            t = Table(title="failed jobs by error class")
            for col in ("class", "jobs", "example", "message"):
                t.add_column(col)
            for cls, n in sorted(st.failed.items()):
                ex = next(f for f in st.failed_jobs if str(f.get("class")) == cls)
                t.add_row(cls, str(n), ex["key"], str(ex.get("message", ""))[:160])
            c.print(t)

    @app.command()
    def retry(
        run: str = typer.Argument(..., metavar="RUN", help="Run id (the plan's name) or the plan file."),
        ledger: str = typer.Option(None, "--ledger", help=_LEDGER_HELP),
        executor: str = typer.Option(None, "--executor", help="local | celery (default: the run's)."),
        profile_url_override: str = typer.Option(None, "--profile-url-override"),
        profiles: str = typer.Option(None, "--profiles"),
    ) -> None:
        """Re-run the failed jobs of a run only (finished jobs are never re-run)."""
        from rich.console import Console

        from contracts.errors import InputError
        from coordinator.plan import plan_from_raw
        from coordinator.status import failed_jobs, run_status
        from coordinator.sweep import execute, resolve_profile

        led, run_id = _ledger_and_run(run, ledger)
        st = run_status(led, run_id)
        if not st.manifest or not isinstance(st.manifest.get("plan"), dict):
            raise InputError(f"run {run_id!r} has no manifest with its plan in {led.url}", field="RUN")
        jobs = failed_jobs(st)
        if not jobs:
            typer.echo(f"run {run_id}: no failed jobs to retry ({st.done} done, {st.pending} pending)")
            return
        plan = plan_from_raw(st.manifest["plan"], st.manifest.get("plan_source") or "<manifest>")
        plan = plan.with_overrides(executor=executor, ledger=led.url)
        prof = resolve_profile(plan, profile_url_override, profiles)
        out = execute(plan, jobs, profile=prof, base_url=profile_url_override, manifest_jobs=st.n_jobs)
        _finish(out, Console())

    @app.command()
    def compact(
        run: str = typer.Argument(..., metavar="RUN", help="Run id (the plan's name) or the plan file."),
        ledger: str = typer.Option(None, "--ledger", help=_LEDGER_HELP),
    ) -> None:
        """Write the run's records as one Parquet file (for runs too large for JSONL scans)."""
        from coordinator.status import compact as do_compact

        led, run_id = _ledger_and_run(run, ledger)
        where, rows = do_compact(led, run_id)
        typer.echo(f"{rows} records -> {where}")

    @app.command()
    def demo(
        out: str = typer.Option("./ept-out", "--out", help="Output folder (ledger in <out>/ledger)."),
        tasks_per_family: int = typer.Option(None, "--tasks-per-family", help="Override the demo's task count."),
    ) -> None:
        """Start the simulator in-process, run the example plan locally and print the Elo-per-token report."""
        from rich.console import Console

        from coordinator.demo import run_demo

        res = run_demo(out, tasks_per_family=tasks_per_family)
        _finish(res, Console())
