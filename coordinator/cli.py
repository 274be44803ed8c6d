"""Commands of the coordinator: sweep, status, retry, compact, demo."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # annotations only: each command imports what it runs
    from elo_per_token.contracts.ledger import FileLedger, S3Ledger
    from elo_per_token.coordinator.sweep import SweepOutcome

_LEDGER_HELP = "Ledger URL (folder, file://… or s3://bucket/prefix); default: the plan's, else ./ept-out/ledger."


def _ledger_and_run(run: str, ledger: str | None) -> tuple[FileLedger | S3Ledger, str]:
    """RUN is a run id (with --ledger) or a plan file (its name and ledger)."""
    from elo_per_token.analysis.io import run_source
    from elo_per_token.contracts.ledger import check_run, open_ledger, open_ledger_for_reading

    if run.endswith(".toml"):
        from elo_per_token.coordinator.plan import load_plan

        plan = load_plan(run)
        led, run_id = open_ledger(ledger or plan.ledger), plan.run_id
    elif (src := run_source(run)) is not None:  # a run folder or s3://…/runs/<id>
        led, run_id = open_ledger(src.ledger_url), src.run_id
    else:
        led, run_id = open_ledger(ledger or "./ept-out/ledger"), run
    # Reachable, and holding the run: otherwise say which (endpoint, credentials, bucket) or list the runs.
    check_run(open_ledger_for_reading(led.url), run_id)
    return led, run_id


def _finish(out: SweepOutcome) -> None:
    from elo_per_token.analysis.report import make_console
    from elo_per_token.coordinator.sweep import print_summary

    # Full width when stdout is a pipe, a CI log or `docker compose` output (the coordinator's only table there).
    print_summary(out, make_console())
    if out.tally.abandoned:
        from elo_per_token.coordinator.local import hard_exit

        # Threads blocked in HTTP reads would hold a normal exit until they return: leave without them.
        hard_exit("exiting without waiting for the abandoned jobs", out.exit_code)
    if out.exit_code:
        raise typer.Exit(out.exit_code)


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
    max_jobs: int = typer.Option(
        None, "--max-jobs", min=1, help="Allow plans of up to N jobs (default: the plan's max_jobs, else 2,000,000)."
    ),
) -> None:
    """Run a plan: expand to jobs, skip those already in the ledger, run the rest, print the Elo table."""
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.plan import EXECUTORS, load_plan
    from elo_per_token.coordinator.sweep import execute, resolve_profile

    plan = load_plan(plan_file)
    if executor and executor not in EXECUTORS:
        raise InputError(f"must be one of {', '.join(EXECUTORS)}", field="--executor")
    plan = plan.with_overrides(executor=executor, ledger=ledger, concurrency=concurrency, max_jobs=max_jobs)
    prof = resolve_profile(plan, profile_url_override, profiles)
    # jobs=None: the plan's jobs are streamed, never all held at once.
    out = execute(plan, None, profile=prof, base_url=profile_url_override, analyze=not no_analysis)
    _finish(out)


def status(
    run: str = typer.Argument(..., metavar="RUN", help="Run id (the plan's name) or the plan file."),
    ledger: str = typer.Option(None, "--ledger", help=_LEDGER_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Progress of a running or finished run, read from the ledger."""
    import json

    from rich.markup import escape
    from rich.table import Table

    from elo_per_token.analysis.report import make_console
    from elo_per_token.contracts.secrets import mask_url
    from elo_per_token.coordinator.status import run_status

    led, run_id = _ledger_and_run(run, ledger)
    st = run_status(led, run_id)
    if as_json:
        typer.echo(json.dumps({"run_id": st.run_id, "run_url": st.run_url, "n_jobs": st.n_jobs, "done": st.done,
                               "failed": st.failed, "pending": st.pending, "retrying": st.retrying,
                               "stopped": st.stopped},
                              sort_keys=True))  # fmt: skip
        return
    c = make_console()
    m = st.manifest or {}
    c.print(f"[bold]run {st.run_id}[/] in {st.run_url}", highlight=False)
    c.print(f"started {m.get('started_at', '?')} · sessions {len(m.get('sessions', []))} · "
            f"profile {m.get('profile', {}).get('name', '?')} ({mask_url(str(m.get('profile', {}).get('base_url', '?')))})",
            highlight=False)  # fmt: skip
    c.print(f"jobs {st.n_jobs if st.n_jobs is not None else '?'}: done {st.done} · failed "
            f"{sum(st.failed.values())} · pending {st.pending if st.pending is not None else '?'}"
            + (f" (retrying {st.retrying} that failed before this session)" if st.retrying else ""))  # fmt: skip
    if st.stopped:
        c.print(f"[red]the coordinator stopped this session:[/] {escape(mask_url(st.stopped))}", highlight=False)
    for line in _broker_lines(m):
        c.print(f"[yellow]{escape(mask_url(line))}[/]", highlight=False)
    if st.failed_jobs:
        t = Table(title="failed jobs by error class")
        for col in ("class", "jobs", "example", "message"):
            t.add_column(col)
        for cls, n in sorted(st.failed.items()):
            ex = next(f for f in st.failed_jobs if str(f.get("class")) == cls)
            t.add_row(cls, str(n), escape(ex["key"]), escape(mask_url(str(ex.get("message", "")))[:160]))
        c.print(t)


def _broker_lines(manifest: dict[str, Any]) -> list[str]:
    """For a Celery run, with EPT_BROKER_URL set: queues that have work and no consumer now."""
    sessions = manifest.get("sessions") or []
    if not sessions or sessions[-1].get("executor") != "celery":
        return []
    from elo_per_token.coordinator.consumers import broker_status

    return broker_status(str((manifest.get("plan") or {}).get("queue") or "ept"))


def retry(
    run: str = typer.Argument(..., metavar="RUN", help="Run id (the plan's name) or the plan file."),
    ledger: str = typer.Option(None, "--ledger", help=_LEDGER_HELP),
    executor: str = typer.Option(None, "--executor", help="local | celery (default: the run's)."),
    profile_url_override: str = typer.Option(None, "--profile-url-override"),
    profiles: str = typer.Option(None, "--profiles"),
) -> None:
    """Re-run the failed jobs of a run only (finished jobs are never re-run)."""
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.plan import plan_from_raw
    from elo_per_token.coordinator.status import failed_jobs, run_status
    from elo_per_token.coordinator.sweep import execute, resolve_profile

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
    _finish(out)


def compact(
    run: str = typer.Argument(..., metavar="RUN", help="Run id, run folder / s3://…/runs/<id> URL, or the plan file."),
    ledger: str = typer.Option(None, "--ledger", help=_LEDGER_HELP),
    rebuild: bool = typer.Option(
        False, "--rebuild", help="Drop every segment and fold all job objects again (e.g. after a corrupt one)."
    ),
) -> None:
    """Fold the job objects written since the last compaction into a new Parquet segment (incremental)."""
    from elo_per_token.coordinator.status import compact_cmd

    led, run_id = _ledger_and_run(run, ledger)
    res = compact_cmd(led, run_id, rebuild=rebuild)
    if res.dropped:
        typer.echo(f"--rebuild: removed {len(res.dropped)} segment files", err=True)
    where = ", ".join(res.segments) or "no new segment"
    typer.echo(f"{res.jobs} job objects ({res.rows} records) -> {where}; {res.already} already compacted")
    if res.unparsable:
        typer.echo(
            f"{len(res.unparsable)} job objects could not be parsed and stay uncompacted (analysis names their "
            f"bad line), e.g. {res.unparsable[0]}",
            err=True,
        )


def demo(
    out: str = typer.Option("./ept-out", "--out", help="Output folder (ledger in <out>/ledger)."),
    tasks_per_family: int = typer.Option(None, "--tasks-per-family", help="Override the demo's task count."),
) -> None:
    """Start the simulator in-process, run the example plan locally and print the Elo-per-token report."""
    from elo_per_token.coordinator.demo import run_demo

    res = run_demo(out, tasks_per_family=tasks_per_family)
    _finish(res)


def register(app: typer.Typer) -> None:
    # One module-level function per command (not closures inside this function), in the order `ept --help`
    # lists them; typer names each command after its function.
    for command in (sweep, status, retry, compact, demo):
        app.command()(command)
