"""`ept sweep`: plan -> jobs -> manifest -> (skip what exists) -> run -> summary -> Elo-per-token table."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from elo_per_token.contracts.errors import EGRESS_CLASSES, InputError
from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.manifest import profile_prices, weights_option
from elo_per_token.contracts.tasks import Task
from elo_per_token.contracts.usage import USAGE_MISSING_HINT
from elo_per_token.coordinator.local_exec import run_sweep_local
from elo_per_token.coordinator.plan import Plan
from elo_per_token.coordinator.sweep_live import LiveTally, existing_keys, progress_bar
from elo_per_token.coordinator.sweep_tally import (
    DETERMINISTIC,
    EGRESS_ABORT_AFTER,
    SweepOutcome,
    Tally,
    budget_cap,
    failed_families,
)
from elo_per_token.coordinator.weather import weather_line
from elo_per_token.ledger import Ledger, open_ledger

if TYPE_CHECKING:  # annotations only: these are imported where a sweep needs them
    from rich.console import Console

    from elo_per_token.analysis.pipeline import AnalysisOptions, AnalysisResult
    from elo_per_token.contracts.records import JobResult
    from elo_per_token.egress.profiles import Profile


def resolve_profile(plan: Plan, base_url: str | None, profiles_path: str | None = None) -> Profile:
    from elo_per_token.egress.profiles import get_profile

    prof = get_profile(plan.profile, profiles_path)
    return prof.with_base_url(base_url) if base_url else prof


def plan_jobs(plan: Plan) -> list[Job]:
    from elo_per_token.coordinator.expand import expand, load_tasks

    return expand(plan, load_tasks(plan))


def plan_source(plan: Plan) -> tuple[Callable[[], Iterator[Job]], int]:
    """(a fresh stream of the plan's jobs, how many) — expansion without holding the jobs."""
    stream, n, _ = _plan_source(plan)
    return stream, n


def _plan_source(plan: Plan) -> tuple[Callable[[], Iterator[Job]], int, list[Task]]:
    from elo_per_token.coordinator.expand import check_unique_keys, count_jobs, iter_jobs, load_tasks
    from elo_per_token.coordinator.plan import check_job_count

    tasks = load_tasks(plan)
    check_job_count(plan, len(tasks))  # from counts, before a single job is built
    check_unique_keys(plan, tasks)
    return (lambda: iter_jobs(plan, tasks)), count_jobs(plan, tasks), tasks


def _job_stream(
    plan: Plan, jobs: Iterable[Job] | None
) -> tuple[Callable[[], Iterator[Job]], int, list[Task]]:
    """(a fresh stream of the jobs to consider, how many, their tasks): the plan's, streamed, or the given list."""
    if jobs is None:
        return _plan_source(plan)
    listed = list(jobs)
    tasks = list({(j.family, j.task_id): j.task for j in listed}.values())
    return (lambda: iter(listed)), len(listed), tasks


@dataclass(frozen=True)
class _Session:
    """How this session runs the run's jobs: execute()'s arguments, resolved (`executor`: the plan's when not
    given; `check_ledger`: each job is looked up in the ledger before its first API call, see _open_session)."""

    plan: Plan
    ledger: Ledger
    profile: Profile
    executor: str
    base_url: str | None
    run: Callable[[Job, Any], JobResult] | None
    broker_url: str | None
    check_ledger: bool = True


def _run_jobs(session: _Session, todo: Iterator[Job], live: LiveTally, had_failure: set[str]) -> bool:
    """Run `todo` on the session's executor; False when interrupted or stopped early."""
    s = session
    plan, ledger, profile = s.plan, s.ledger, s.profile
    tally = live.tally
    try:
        if s.executor == "local":
            return run_sweep_local(
                plan, todo, ledger, profile, live, s.run, had_failure, check_existing=s.check_ledger
            )
        from elo_per_token.contracts.jobs import CeleryJobContext
        from elo_per_token.coordinator.celery_exec import run_celery

        lim = plan.limits_for(plan.profile)
        cap = tally.cap
        ctx = CeleryJobContext(
            ledger=ledger.url,
            base_url=s.base_url,
            rpm=lim.rpm,
            tpm=lim.tpm,
            check_ledger=s.check_ledger,
            budget_tokens=cap.token_cap() if cap else None,
            transcripts=plan.transcripts,
        )
        return run_celery(
            todo,
            ctx,
            queue=plan.queue,
            batch_size=plan.batch_size,
            on_result=live.on_result,
            on_retry=live.on_retry,
            broker_url=s.broker_url,
            should_stop=tally.should_stop,
            cancel_when=tally.over_budget,
            notice=lambda msg: live.prog.console.print(f"[yellow]{msg}[/]", highlight=False),
            clear_failures=had_failure,
            budget=(plan.run_id, cap.prior_tokens) if cap else None,
            weather=(profile.name, lambda w: setattr(tally, "weather", w)),
            on_outage=live.show_note,
            per_message=plan.jobs_per_message,
        )
    except KeyboardInterrupt:
        return False


def execute(
    plan: Plan,
    jobs: Iterable[Job] | None,
    *,
    profile: Profile,
    base_url: str | None = None,
    executor: str | None = None,
    console: Console | None = None,
    analyze: bool = True,
    run: Callable[[Job, Any], JobResult] | None = None,
    broker_url: str | None = None,
    manifest_jobs: int | None = None,
    compact: bool = True,
    allow_endpoint_change: bool = False,
    rerun_hint: str | None = None,
) -> SweepOutcome:
    """Write/extend the manifest, run the jobs that have no result yet, then compact, summarise and analyse.

    jobs=None streams the plan's jobs (a million-job plan in bounded memory); a list is run as given. A run
    that exists is extended (coordinator.identity): new keys run, done ones are skipped, a change in what an
    existing key computes is refused naming the field. The plan's budget cap (plan.max_total_tokens /
    plan.max_cost) stops the session once the run has spent it.
    """
    from elo_per_token.coordinator.runlease import RunLease

    ledger = open_ledger(plan.ledger)
    source = _job_stream(plan, jobs)  # a bad plan is refused before the ledger is touched
    # One session at a time runs the run's jobs (coordinator.runlease): a second one is refused naming the
    # holder, before it writes anything, instead of paying for the same jobs again.
    with RunLease(ledger, plan.run_id) as lease:
        return _execute_held(
            plan,
            jobs,
            source,
            ledger,
            lease,
            profile=profile,
            base_url=base_url,
            executor=executor,
            console=console,
            analyze=analyze,
            run=run,
            broker_url=broker_url,
            manifest_jobs=manifest_jobs,
            compact=compact,
            allow_endpoint_change=allow_endpoint_change,
            rerun_hint=rerun_hint,
        )


def _execute_held(
    plan: Plan,
    jobs: Iterable[Job] | None,
    source: tuple[Callable[[], Iterator[Job]], int, list[Task]],
    ledger: Ledger,
    lease: Any,
    *,
    profile: Profile,
    base_url: str | None,
    executor: str | None,
    console: Console | None,
    analyze: bool,
    run: Callable[[Job, Any], JobResult] | None,
    broker_url: str | None,
    manifest_jobs: int | None,
    compact: bool,
    allow_endpoint_change: bool,
    rerun_hint: str | None,
) -> SweepOutcome:
    """execute() with the run's lease held (`lease`: coordinator.runlease.RunLease); `source`: _job_stream's."""

    from elo_per_token.analysis.report import make_console

    console = console or make_console(stderr=True)  # progress on stderr; full width in logs too
    executor = executor or plan.executor
    stream, n_jobs, tasks = source
    listed = None if jobs is None else stream
    manifest, check_ledger = _open_session(
        ledger, plan, profile, executor, source, manifest_jobs, allow_endpoint_change, listed
    )
    tally = Tally(total=n_jobs, cap=budget_cap(plan, manifest, profile.public_dict()), lease_lost=lease.lost)
    session = _Session(plan, ledger, profile, executor, base_url, run, broker_url, check_ledger)
    t0 = time.monotonic()
    completed, have, n_have, counted = _run_session(session, console, source, listed, tally, manifest, lease)
    out = SweepOutcome(
        run_id=plan.run_id,
        ledger_url=ledger.url,
        run_url=ledger.run_url(plan.run_id),
        n_jobs=n_jobs,
        already_done=n_jobs - counted if completed else n_have,
        tally=tally,
        elapsed_s=time.monotonic() - t0,
        completed=completed,
        profile_name=getattr(profile, "name", None),
        rerun_hint=rerun_hint,
    )
    record_session(ledger, plan.run_id, out)
    # Also when this session ran nothing but results exist: an earlier session stopped before compacting.
    if compact and (completed or out.stopped_for_budget) and (tally.done or have):
        out.compact_note = compact_note(ledger, plan.run_id)
    if analyze and (completed or out.stopped_for_budget):
        out.analysis, out.analysis_error = analyze_run(plan, ledger)
        _mark_missing(out, {str(t["family"]) for t in tasks})
    return out


def _open_session(
    ledger: Ledger,
    plan: Plan,
    profile: Profile,
    executor: str,
    source: tuple[Callable[[], Iterator[Job]], int, list[Task]],
    manifest_jobs: int | None,
    allow_endpoint_change: bool,
    listed: Callable[[], Iterator[Job]] | None,
) -> tuple[dict[str, Any], bool]:
    """Write the manifest (this session added) and declare the jobs; (the manifest, check_ledger).
    `listed`: the stream of a given list of jobs (None: the plan's jobs, streamed)."""
    from elo_per_token.coordinator.manifest import write_manifest

    _, n_jobs, tasks = source
    manifest = write_manifest(
        ledger,
        plan,
        profile.public_dict(),
        manifest_jobs or n_jobs,
        executor,
        tasks=tasks,
        allow_endpoint_change=allow_endpoint_change,
    )
    # A run's first session lists the run before it enqueues anything and no earlier session can have left
    # jobs queued or running, so none of its jobs can be in the ledger when a worker starts it (short of a
    # redelivery, which the worker sees): workers skip the check before the first API call and a successful
    # job costs the ledger one request, the conditional create. A resumed run keeps the check.
    declare_jobs(ledger, plan, None if listed is None else list(listed()))
    return manifest, len(manifest.get("sessions") or []) > 1


def _run_session(
    session: _Session,
    console: Console,
    source: tuple[Callable[[], Iterator[Job]], int, list[Task]],
    listed: Callable[[], Iterator[Job]] | None,
    tally: Tally,
    manifest: dict[str, Any],
    lease: Any,
) -> tuple[bool, set[str], int, int]:
    """List the results the run has, announce the session and run the rest under a progress bar.
    Returns (completed, the keys already in the ledger, how many of this session's jobs those are, the jobs
    counted as done)."""
    plan, ledger = session.plan, session.ledger
    stream, n_jobs, _ = source
    with progress_bar(console, n_jobs) as prog:
        # The bar is live from the start: listing a million results takes a while on S3.
        bar = prog.add_task("listing results", total=n_jobs, detail="")
        have, had_failure = existing_keys(ledger, plan.run_id, prog, bar)
        # A given list (`ept retry`, an adaptive round) is part of the run: count its own finished jobs.
        n_have = len(have) if listed is None else sum(1 for j in stream() if j.key in have)
        todo_est = max(0, n_jobs - n_have)
        tally.total = todo_est
        prog.update(bar, description="jobs", total=todo_est, detail="")
        where = ledger.run_url(plan.run_id)
        what = f"{n_jobs} jobs, {n_have} already in {where}, {todo_est} to run ({session.executor})"
        _announce(prog.console, plan, tally, manifest, what)
        live = LiveTally(tally, prog, bar, on_note=lease.set_note)  # `ept status` shows the note too
        todo = live.todo(stream, have)
        completed = tally.over_budget() is False and _run_jobs(session, todo, live, had_failure)
        if completed and live.counted != tally.total:
            tally.total = live.counted  # results outside the plan (or a partial plan) made the estimate off
            prog.update(bar, total=live.counted)
        live.refresh()
    return completed, have, n_have, live.counted


def _mark_missing(out: SweepOutcome, planned: set[str]) -> None:
    """Name on the analysis every planned family it has no outcome for, with why (analysis.incomplete)."""
    if out.analysis is None:
        return
    from elo_per_token.analysis.incomplete import mark_missing_families

    why = "not run: the sweep stopped at its budget" if out.stopped_for_budget else "no finished job"
    mark_missing_families(out.analysis, {**dict.fromkeys(planned, why), **failed_families(out.tally)})


def _announce(console: Console, plan: Plan, tally: Tally, manifest: dict[str, Any], what: str) -> None:
    """The sweep's first line (jobs, endpoint, model, cap) and, with a cap, how calls without usage count."""
    from rich.markup import escape

    console.print(
        f"run [bold]{plan.run_id}[/]: {what} at {escape(str(manifest['identity']['endpoint']))} (model "
        f"{escape(str(manifest['identity']['model']))})"
        + (f", cap {tally.cap.describe()}" if tally.cap else ""),
        highlight=False,
    )
    if tally.cap is not None and not plan.generation.get("max_tokens"):
        # Said before the first job: a provider that sends no usage is capped at each call's upper bound,
        # which without max_tokens is only as tight as the context length (or 16,384 tokens per choice).
        console.print(
            "[yellow]note[/]: calls without usage count toward the cap at their upper bound "
            "(prompt + max_tokens x n); this plan sets no max_tokens, so that bound is the "
            "profile's context_length or 16,384 per choice: set generation.max_tokens for a "
            "tight cap",
            highlight=False,
        )


def record_session(ledger: Ledger, run_id: str, out: SweepOutcome) -> None:
    """Write what this session spent, why it stopped and the provider's weather into its manifest entry (`ept
    status` shows them; the next session's budget counts the spend)."""
    m = ledger.get_manifest(run_id)
    if not m or not m.get("sessions"):
        return
    t = out.tally
    stopped = (
        "egress"
        if out.stopped_for_egress
        else "budget"
        if out.stopped_for_budget
        else None
        if out.completed
        else "interrupted"
    )
    entry = {
        **m["sessions"][-1],
        "tokens": t.tokens,
        "est_tokens": t.est_tokens,
        "calls": t.calls,
        "jobs_done": t.done + t.duplicate,
        "stopped": stopped,
    }
    if t.weather:  # 429s, pauses, outages and retries: `ept status` shows them with weather_line
        entry["weather"] = {k: round(v, 1) if isinstance(v, float) else v for k, v in t.weather.items()}
    if t.cap is not None:
        entry["cap"] = {
            "max_tokens": t.cap.max_tokens,
            "max_cost": t.cap.max_cost,
            "prior_tokens": t.cap.prior_tokens,
        }
    ledger.put_manifest(run_id, {**m, "sessions": [*m["sessions"][:-1], entry]})


def declare_jobs(ledger: Ledger, plan: Plan, jobs: list[Job] | None) -> None:
    """Before any job runs: declare every key this session may write — the plan's (streamed sweep) or the
    jobs handed in (`ept retry`, a given list) — so a reader of the compacted run can skip listing it
    (ledger/keyspace.py). The session's manifest entry says it declares (coordinator/manifest.py)."""
    import polars as pl

    from elo_per_token.coordinator.expand import load_tasks, plan_keys
    from elo_per_token.ledger.keyspace import declare_keys

    if jobs is None:
        keys = plan_keys(plan, load_tasks(plan))
    else:
        keys = pl.Series("job_key", [j.key for j in jobs], dtype=pl.String)
    declare_keys(ledger, plan.run_id, keys)


def compact_note(ledger: Ledger, run_id: str) -> str | None:
    """Fold this sweep's results into a new segment; a failure here loses nothing (the objects stay)."""
    from elo_per_token.ledger.segments import compact_run

    try:
        res = compact_run(ledger, run_id)
    except Exception as e:  # compaction is an optimisation: report it, keep the sweep's result
        return f"compaction skipped ({type(e).__name__}: {e}); run `ept compact {run_id}` later"
    if not res.jobs:
        return None
    return f"compacted {res.jobs} job objects into {', '.join(res.segments) or 'no new segment'}"


def plan_analysis_options(plan: Plan) -> AnalysisOptions:
    """The analysis settings of a run's table (its plan's weights, anchor, bootstrap rounds and seed). `ept report
    RUN` starts from the same settings, so the HTML page and the terminal table show the same intervals."""
    from elo_per_token.analysis.pipeline import AnalysisOptions

    return AnalysisOptions(
        weights=weights_option(plan.weights), anchor=plan.anchor, rounds=plan.bootstrap_rounds, seed=plan.seed
    )


def analyze_run(
    plan: Plan, ledger: Ledger, *, missing: str | None = None
) -> tuple[AnalysisResult | None, str | None]:
    """The Elo-per-token analysis of the run's job objects; (None, reason) when it cannot be computed.
    missing: the estimand for missing outcomes when not the default (an adaptive run: "drop", every pair on
    the tasks both arms ran)."""
    import dataclasses

    from elo_per_token.analysis.pipeline import analyze

    # The profile's prices (from the run's manifest): cost per task and ΔElo per $1 beside the token figures.
    prices = profile_prices((ledger.get_manifest(plan.run_id) or {}).get("profile") or {})
    opts = dataclasses.replace(plan_analysis_options(plan), prices=prices)
    if missing is not None:
        opts = dataclasses.replace(opts, missing=missing)
    try:
        return analyze([ledger.run_url(plan.run_id)], opts), None
    except InputError as e:
        return None, str(e)


def print_summary(out: SweepOutcome, console: Console) -> None:
    """The session's summary: what ran and what it spent, why it stopped, the failures, then the Elo table (or
    why there is none).

    Args:
        out: the session's outcome (execute()).
        console: where to print.
    """
    from rich.markup import escape  # keys and messages carry task/family names: text, not markup

    t = out.tally
    _print_totals(out, console)
    if out.compact_note:
        console.print(out.compact_note, highlight=False)
    _print_stop(out, console)
    if t.lost:
        shown = ", ".join(f"{cls} {n}" for cls, n in sorted(t.lost.items()))
        console.print(
            f"{sum(t.lost.values())} job(s) failed for a reason of the strategy on the task ({shown}): scored as "
            "losses with their tokens, not retried",
            highlight=False,
        )
    if t.abandoned:
        console.print(
            f"[yellow]{t.abandoned} job(s) were still running when the stop's grace period ended[/]: "
            "their calls are not recorded; a rerun runs them again"
        )
    if t.failures:
        _print_failures(out, console)
    if out.analysis is not None:
        from elo_per_token.analysis.report import print_report

        print_report(out.analysis, console)
    elif out.analysis_error:
        console.print(f"[yellow]no Elo table:[/] {escape(out.analysis_error)}", highlight=False)


def _print_totals(out: SweepOutcome, console: Console) -> None:
    """The session's totals (jobs, calls, tokens, time), the provider's weather, the spend on failed attempts,
    the ledger, and the token counts that are estimates or missing."""
    t = out.tally
    console.print(
        f"\n[bold]run {out.run_id}[/] · {out.n_jobs} jobs: {out.already_done} already done, "
        f"{t.done + t.duplicate} run now ({t.duplicate} duplicates discarded), {t.skipped} skipped, "
        f"{t.failed} failed · {t.calls} calls · {t.tokens:,} tokens · {out.elapsed_s:.1f}s",
        highlight=False,
    )
    if (line := weather_line(t.weather)) is not None:
        console.print(line, highlight=False)
    if t.spent_calls:
        console.print(
            f"of which {t.spent_calls} calls · {t.spent_tokens:,} tokens on failed attempts (recorded in "
            "the run's spent/ objects; `ept analyze` lists them per arm)",
            highlight=False,
        )
    console.print(f"ledger: {out.run_url}", highlight=False)
    if t.est_tokens:
        console.print(
            f"[yellow]estimated spend[/]: {t.est_tokens:,} of this session's {t.spend:,} tokens are upper bounds "
            f"(prompt estimate + max_tokens x n) for calls of {t.est_calls} job(s) whose usage was missing or "
            "invalid; the budget cap counts them so",
            highlight=False,
        )
    if t.calls and not t.tokens:
        # Every call came back without usage (a zero-token call does not happen): say so, and how to get it.
        console.print(
            f"[yellow]usage missing[/]: {t.calls} calls and 0 tokens — {USAGE_MISSING_HINT}", highlight=False
        )


def _print_stop(out: SweepOutcome, console: Console) -> None:
    """Why the session stopped before its last job (failing credentials, the budget, an interrupt) and how to
    go on; nothing when it finished."""
    t = out.tally
    if out.stopped_for_egress:
        console.print(
            f"[red]stopped[/]: {EGRESS_ABORT_AFTER} credential/endpoint failures in a row — fix the profile "
            f"(`ept doctor --profile {out.profile_name or 'NAME'}`), then `ept retry {out.run_id} --ledger {out.ledger_url}`",
            highlight=False,
        )
    elif out.stopped_for_budget and t.cap is not None:
        console.print(
            f"[yellow]stopped at its budget[/] ({t.cap.describe()}): {t.cap.prior_tokens + t.spend:,} tokens spent "
            f"by the run{f' ({t.est_tokens:,} of them estimated)' if t.est_tokens else ''}; {t.cancelled} queued job(s) did not start. The run is analysable as it stands; raise "
            "--max-tokens/--max-cost and rerun the same command to continue (finished jobs are skipped)",
            highlight=False,
        )
    elif not out.completed:
        console.print(
            "[yellow]interrupted or stopped early[/]: rerun the same command to resume (finished jobs are skipped)"
        )


def _print_failures(out: SweepOutcome, console: Console) -> None:
    """The failed jobs by error class, and what to rerun (print_summary's part for a session with failures)."""
    from rich.markup import escape
    from rich.table import Table

    t = out.tally
    ft = Table(title="failed jobs by error class")
    for col in ("class", "jobs", "example job", "first message"):
        ft.add_column(col)
    for cls in sorted(t.failures):
        keys = t.failures[cls]
        ft.add_row(cls, str(len(keys)), escape(keys[0]), escape((t.messages.get(cls) or "")[:160]))
    console.print(ft)
    if t.egress_broken():
        console.print(
            f"[bold red]stopped:[/] {t.egress_streak} jobs in a row failed on the key or the endpoint "
            f"({', '.join(sorted(set(t.failures) & EGRESS_CLASSES))}); fix the profile (`ept doctor`), then rerun",
            highlight=False,
        )
    retryable = sorted(set(t.failures) - DETERMINISTIC)
    if retryable and out.rerun_hint:
        console.print(
            f"once the cause is fixed, finish the run with: {out.rerun_hint} (it resumes: finished jobs are "
            f"skipped, the {sum(len(t.failures[c]) for c in retryable)} failed ones run again)",
            highlight=False,
        )
    elif retryable:
        console.print(
            f"re-run only the failed jobs with: ept retry {out.run_id} --ledger {out.ledger_url} "
            f"({', '.join(retryable)})",
            highlight=False,
        )
    if set(t.failures) & DETERMINISTIC:
        console.print(
            "permanent failures repeat the same request and the same refusal: `ept retry` is not suggested "
            "for them (change the plan or the profile)",
            highlight=False,
        )
