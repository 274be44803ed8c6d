"""`ept sweep`: plan -> jobs -> manifest -> (skip what exists) -> run -> summary -> Elo-per-token table."""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from elo_per_token.contracts.errors import EGRESS_CLASSES, ErrorClass, InputError
from elo_per_token.contracts.jobs import Job, JobSummary
from elo_per_token.contracts.manifest import profile_prices, weights_option
from elo_per_token.contracts.tasks import Task
from elo_per_token.contracts.usage import USAGE_MISSING_HINT
from elo_per_token.coordinator.plan import Plan
from elo_per_token.coordinator.weather import weather_line
from elo_per_token.ledger import Ledger, open_ledger

if TYPE_CHECKING:  # annotations only: these are imported where a sweep needs them
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from elo_per_token.analysis.pipeline import AnalysisOptions, AnalysisResult
    from elo_per_token.contracts.records import JobResult
    from elo_per_token.egress.profiles import Profile

# With this many egress failures in a row (no success in between), the endpoint or key is wrong — from the start
# or since a key was revoked mid-run — or the server is down (every connect refused): stop spending effort.
EGRESS_ABORT_AFTER = 8
# Failures that a retry repeats exactly (same request, same refusal).
DETERMINISTIC: frozenset[ErrorClass] = frozenset({"permanent", "context_overflow"})


@dataclass
class Tally:
    """Live counters, updated from executor callbacks (any thread)."""

    total: int
    done: int = 0
    skipped: int = 0
    duplicate: int = 0
    failed: int = 0
    calls: int = 0  # every attempt's (contracts.jobs.JobSummary)
    tokens: int = 0
    spent_calls: int = 0  # of those: attempts whose calls are in spent/ objects (failed, duplicate copies)
    spent_tokens: int = 0
    # Calls billed without usable usage, at their upper bound (JobSummary est_tokens): part of the spend the cap
    # counts, beside the measured `tokens`.
    est_tokens: int = 0
    est_calls: int = 0  # jobs with such calls (the summary says how much of the spend is estimated)
    retrying: set[str] = field(default_factory=set)
    failures: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lost: dict[str, int] = field(
        default_factory=lambda: defaultdict(int)
    )  # strategy failures scored as losses
    messages: dict[str, str] = field(default_factory=dict)  # first message per error class
    egress_streak: int = 0  # credential/endpoint failures since the last success that proves egress works
    streak_since: float | None = None  # when the streak's first failure finished
    workers: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # jobs run per Celery worker
    abandoned: int = 0  # jobs still running when a stop's grace period ran out (their calls are not recorded)
    cancelled: int = 0  # queued jobs a stop kept from starting (Celery: skipped by the workers)
    cap: BudgetCap | None = None  # the run's token/cost cap, with what earlier sessions spent
    weather: dict[str, Any] | None = (
        None  # the provider client's 429s, waits and retries (ProviderClient.weather)
    )
    # Set when another session took the run's lease over (ours went stale: coordinator.runlease): stop.
    lease_lost: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, s: JobSummary) -> None:
        with self.lock:
            self.retrying.discard(s["key"])
            st = s["status"]
            if st in ("done", "duplicate"):
                # Only a job that started after the streak began proves the key and endpoint work now; one
                # already in flight when a key was revoked says nothing, and must not reset the count.
                if self.streak_since is None or float(s.get("started_at") or math.inf) >= self.streak_since:
                    self.egress_streak, self.streak_since = 0, None
            elif st == "failed" and s.get("class") in EGRESS_CLASSES:
                if self.egress_streak == 0:
                    self.streak_since = float(s.get("finished_at") or time.time())
                self.egress_streak += 1
            if st == "done":
                self.done += 1
                if lost := s.get("lost"):
                    self.lost[lost] += 1
            elif st == "skipped":
                self.skipped += 1
            elif st == "duplicate":
                self.duplicate += 1
            elif st == "cancelled":
                self.cancelled += 1
            else:
                self.failed += 1
                cls = s.get("class") or "task"
                self.failures[cls].append(s["key"])
                self.messages.setdefault(cls, s.get("message") or "")
            if (worker := s.get("worker")) and st != "skipped":
                self.workers[worker] += 1
            self.calls += int(s.get("calls") or 0)
            self.tokens += int(s.get("tokens") or 0)
            self.spent_calls += int(s.get("spent_calls") or 0)
            self.spent_tokens += int(s.get("spent_tokens") or 0)
            est = int(s.get("est_tokens") or 0)
            self.est_tokens += est
            self.est_calls += 1 if est else 0

    def retry(self, key: str) -> None:
        with self.lock:
            self.retrying.add(key)

    @property
    def finished(self) -> int:
        return self.done + self.skipped + self.duplicate + self.failed + self.cancelled

    def egress_broken(self) -> bool:
        return self.egress_streak >= EGRESS_ABORT_AFTER

    def over_budget(self) -> bool:
        """The run has spent its cap (earlier sessions plus the jobs finished in this one): start no new job."""
        return self.cap is not None and self.cap.reached(self.spend)

    @property
    def spend(self) -> int:
        """This session's spend as the cap counts it: measured tokens plus the upper bounds of calls whose usage
        was missing or invalid (conservative by construction: a provider that reports nothing is still capped)."""
        return self.tokens + self.est_tokens

    def should_stop(self) -> bool:
        lost = self.lease_lost is not None and self.lease_lost.is_set()
        return self.egress_broken() or self.over_budget() or lost


@dataclass(frozen=True)
class BudgetCap:
    """A sweep's cap on the run's total strategy tokens and/or cost. Tokens are counted as jobs finish, so a
    stop overshoots by at most the jobs running when the cap is reached (one job per worker thread). Cost is
    counted at the higher of the profile's input and output prices, and a call without usable usage at its
    upper bound (prompt estimate + max_tokens x n): the count never undercounts."""

    max_tokens: int | None = None
    max_cost: float | None = None
    price_per_token: float | None = None  # USD, the higher of the input and output prices
    prior_tokens: int = 0  # spent by earlier sessions of the run (their manifest entries)

    def token_cap(self) -> int | None:
        """The cap in tokens: max_tokens, or max_cost at the price per token, whichever is lower."""
        caps = [self.max_tokens] if self.max_tokens is not None else []
        if self.max_cost is not None and self.price_per_token:
            caps.append(math.ceil(self.max_cost / self.price_per_token))
        return min(caps) if caps else None

    def reached(self, session_tokens: int) -> bool:
        cap = self.token_cap()
        return cap is not None and self.prior_tokens + session_tokens >= cap

    def describe(self) -> str:
        parts = [f"{self.max_tokens:,} tokens" if self.max_tokens is not None else "",
                 f"${self.max_cost:g}" if self.max_cost is not None else ""]  # fmt: skip
        return " / ".join(p for p in parts if p)


@dataclass
class SweepOutcome:
    run_id: str
    ledger_url: str
    run_url: str
    n_jobs: int
    already_done: int
    tally: Tally
    elapsed_s: float
    completed: bool
    analysis: AnalysisResult | None = None
    analysis_error: str | None = None
    compact_note: str | None = None
    profile_name: str | None = None
    # The command that finishes this run, when it is not `ept retry` (the demo's simulator lives in its own
    # process: `ept demo` again resumes the run; `ept retry` would need a profile the user never set up).
    rerun_hint: str | None = None

    @property
    def ok(self) -> bool:
        return self.completed and self.tally.failed == 0

    @property
    def stopped_for_egress(self) -> bool:
        """Stopped early because credential/endpoint failures came in a row (exit 3), not by the user (130)."""
        return not self.completed and self.tally.egress_broken()

    @property
    def stopped_for_budget(self) -> bool:
        """Stopped at the run's token/cost cap: the run is analysable as it stands; a higher cap continues it."""
        return not self.completed and not self.tally.egress_broken() and self.tally.over_budget()

    @property
    def exit_code(self) -> int:
        from elo_per_token.contracts.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_STOPPED_EGRESS

        if self.stopped_for_egress:
            return EXIT_STOPPED_EGRESS
        if self.stopped_for_budget:  # the cap the user set was reached: not an error
            return EXIT_FAILED if self.tally.failed else 0
        if not self.completed:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.tally.failed else 0


def resolve_profile(plan: Plan, base_url: str | None, profiles_path: str | None = None) -> Profile:
    from elo_per_token.egress.profiles import get_profile

    prof = get_profile(plan.profile, profiles_path)
    return prof.with_base_url(base_url) if base_url else prof


def plan_jobs(plan: Plan) -> list[Job]:
    from elo_per_token.coordinator.expand import expand, load_tasks

    return expand(plan, load_tasks(plan))


def _progress(console: Console, total: int) -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
        refresh_per_second=4,
    )


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


def _existing(ledger: Ledger, run_id: str, prog: Progress, bar: TaskID) -> tuple[set[str], set[str]]:
    """(keys of the run's results, keys of the jobs with a failure object and no result), counting on the bar."""
    have: set[str] = set()
    for k in ledger.iter_job_keys(run_id):
        have.add(k)
        if len(have) % 10_000 == 0:
            prog.update(bar, detail=f"{len(have):,} results found")
    # Only jobs that failed before have a failure object to delete when they succeed (no blind DELETE).
    had_failure = {k for k in ledger.iter_failure_keys(run_id) if k not in have}
    return have, had_failure


class _Live:
    """The executors' callbacks: count results in the tally and show them on the progress bar."""

    def __init__(self, tally: Tally, prog: Progress, bar: TaskID) -> None:
        self.tally, self.prog, self.bar = tally, prog, bar
        self.counted = 0  # jobs handed to the executor (the true number to run, known once the stream ends)
        # The provider's state when it is not answering ("provider unreachable since …, waiting (patience …)").
        self.weather_note: Callable[[], str | None] = lambda: None

    def todo(self, stream: Callable[[], Iterator[Job]], have: set[str]) -> Iterator[Job]:
        for j in stream():
            if j.key not in have:
                self.counted += 1
                yield j

    def refresh(self) -> None:
        from rich.markup import escape

        tally = self.tally
        note = self.weather_note()
        self.prog.update(
            self.bar,
            completed=tally.finished,
            detail=(f"[yellow]{escape(note)}[/] · " if note else "")
            + f"done {tally.done + tally.duplicate} · skipped {tally.skipped} · failed {tally.failed} · "
            f"retrying {len(tally.retrying)} · calls {tally.calls} · tokens {tally.tokens:,}",
        )

    def on_result(self, s: JobSummary) -> None:
        self.tally.add(s)
        self.refresh()

    def on_retry(self, job_or_key: Job | str, attempt: int, cls: str) -> None:
        self.tally.retry(job_or_key if isinstance(job_or_key, str) else job_or_key.key)
        self.refresh()


def _run_jobs(
    plan: Plan,
    executor: str,
    todo: Iterator[Job],
    ledger: Ledger,
    live: _Live,
    had_failure: set[str],
    *,
    profile: Profile,
    base_url: str | None,
    run: Callable[[Job, Any], JobResult] | None,
    broker_url: str | None,
    check_ledger: bool = True,
) -> bool:
    """Run `todo` on the chosen executor; False when interrupted or stopped early. check_ledger: each job is
    looked up in the ledger before its first API call (see execute)."""
    tally = live.tally
    try:
        if executor == "local":
            return _run_local(
                plan, todo, ledger, profile, live, run, had_failure, check_existing=check_ledger
            )
        from elo_per_token.contracts.jobs import CeleryJobContext
        from elo_per_token.coordinator.celery_exec import run_celery

        lim = plan.limits_for(plan.profile)
        cap = tally.cap
        ctx = CeleryJobContext(ledger=ledger.url, base_url=base_url, rpm=lim.rpm, tpm=lim.tpm, check_ledger=check_ledger,
                               budget_tokens=cap.token_cap() if cap else None, transcripts=plan.transcripts)  # fmt: skip
        return run_celery(
            todo, ctx, queue=plan.queue, batch_size=plan.batch_size, on_result=live.on_result,
            on_retry=live.on_retry, broker_url=broker_url, should_stop=tally.should_stop, cancel_when=tally.over_budget,
            notice=lambda msg: live.prog.console.print(f"[yellow]{msg}[/]", highlight=False),
            clear_failures=had_failure, budget=(plan.run_id, cap.prior_tokens) if cap else None,
            weather=(profile.name, lambda w: setattr(tally, "weather", w)),
        )  # fmt: skip
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
            plan, jobs, source, ledger, lease, profile=profile, base_url=base_url, executor=executor, console=console,
            analyze=analyze, run=run, broker_url=broker_url, manifest_jobs=manifest_jobs, compact=compact,
            allow_endpoint_change=allow_endpoint_change, rerun_hint=rerun_hint,
        )  # fmt: skip


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
    from elo_per_token.coordinator.manifest import write_manifest

    console = console or make_console(stderr=True)  # progress on stderr; full width in logs too
    executor = executor or plan.executor
    stream, n_jobs, tasks = source
    manifest = write_manifest(ledger, plan, profile.public_dict(), manifest_jobs or n_jobs, executor, tasks=tasks,
                              allow_endpoint_change=allow_endpoint_change)  # fmt: skip
    # A run's first session lists the run before it enqueues anything and no earlier session can have left
    # jobs queued or running, so none of its jobs can be in the ledger when a worker starts it (short of a
    # redelivery, which the worker sees): workers skip the check before the first API call and a successful
    # job costs the ledger one request, the conditional create. A resumed run keeps the check.
    declare_jobs(ledger, plan, None if jobs is None else list(stream()))
    check_ledger = len(manifest.get("sessions") or []) > 1
    tally = Tally(total=n_jobs, cap=budget_cap(plan, manifest, profile.public_dict()), lease_lost=lease.lost)
    t0 = time.monotonic()
    with _progress(console, n_jobs) as prog:
        # The bar is live from the start: listing a million results takes a while on S3.
        bar = prog.add_task("listing results", total=n_jobs, detail="")
        have, had_failure = _existing(ledger, plan.run_id, prog, bar)
        # A given list (`ept retry`, an adaptive round) is part of the run: count its own finished jobs.
        n_have = len(have) if jobs is None else sum(1 for j in stream() if j.key in have)
        todo_est = max(0, n_jobs - n_have)
        tally.total = todo_est
        prog.update(bar, description="jobs", total=todo_est, detail="")
        _announce(prog.console, plan, tally, manifest, f"{n_jobs} jobs, {n_have} already in "
                  f"{ledger.run_url(plan.run_id)}, {todo_est} to run ({executor})")  # fmt: skip
        live = _Live(tally, prog, bar)
        completed = tally.over_budget() is False and _run_jobs(
            plan, executor, live.todo(stream, have), ledger, live, had_failure, profile=profile, base_url=base_url,
            run=run, broker_url=broker_url, check_ledger=check_ledger)  # fmt: skip
        if completed and live.counted != tally.total:
            tally.total = live.counted  # results outside the plan (or a partial plan) made the estimate off
            prog.update(bar, total=live.counted)
        live.refresh()
    out = SweepOutcome(
        run_id=plan.run_id, ledger_url=ledger.url, run_url=ledger.run_url(plan.run_id), n_jobs=n_jobs,
        already_done=n_jobs - live.counted if completed else n_have, tally=tally,
        elapsed_s=time.monotonic() - t0, completed=completed, profile_name=getattr(profile, "name", None),
        rerun_hint=rerun_hint,
    )  # fmt: skip
    record_session(ledger, plan.run_id, out)
    # Also when this session ran nothing but results exist: an earlier session stopped before compacting.
    if compact and (completed or out.stopped_for_budget) and (tally.done or have):
        out.compact_note = _compact(ledger, plan.run_id)
    if analyze and (completed or out.stopped_for_budget):
        out.analysis, out.analysis_error = analyze_run(plan, ledger)
        _mark_missing(out, {str(t["family"]) for t in tasks})
    return out


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
        console.print("[yellow]note[/]: calls without usage count toward the cap at their upper bound "
                      "(prompt + max_tokens x n); this plan sets no max_tokens, so that bound is the "
                      "profile's context_length or 16,384 per choice: set generation.max_tokens for a "
                      "tight cap", highlight=False)  # fmt: skip


def failed_families(tally: Tally) -> dict[str, str]:
    """Family -> why its jobs failed this session ("360 jobs failed (task: SandboxUnavailable: ...)"), for every
    family with a failed job; the analysis names those it then has no outcomes for (analysis.incomplete)."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for cls, keys in tally.failures.items():
        for key in keys:
            counts[key.split("/", 1)[0]][cls] += 1
    out = {}
    for fam, by_cls in counts.items():
        cls = max(by_cls, key=lambda c: by_cls[c])
        first = (tally.messages.get(cls) or "").split(": install", 1)[0][:120]
        out[fam] = f"{sum(by_cls.values())} jobs failed, {cls}" + (f": {first}" if first else "")
    return out


def budget_cap(plan: Plan, manifest: dict[str, Any], profile_public: dict[str, Any]) -> BudgetCap | None:
    """The plan's cap with what the run's earlier sessions spent (their manifest entries); None without a cap."""
    if plan.max_total_tokens is None and plan.max_cost is None:
        return None
    prices = [profile_public.get(k) for k in ("price_in_per_1m", "price_out_per_1m")]
    known = [float(p) for p in prices if isinstance(p, int | float)]
    if plan.max_cost is not None and not known:
        raise InputError(
            f"--max-cost needs the profile's prices (price_in_per_1m, price_out_per_1m in profiles.toml); "
            f"profile {profile_public.get('name')!r} has none: cap tokens with --max-tokens instead",
            field="max_cost",
        )
    sessions = [x for x in manifest.get("sessions") or [] if isinstance(x, dict)][:-1]  # the last one is this
    prior = sum(int(x.get("tokens") or 0) + int(x.get("est_tokens") or 0) for x in sessions)
    return BudgetCap(plan.max_total_tokens, plan.max_cost, max(known) / 1e6 if known else None, prior)


def record_session(ledger: Ledger, run_id: str, out: SweepOutcome) -> None:
    """Write what this session spent, why it stopped and the provider's weather into its manifest entry (`ept
    status` shows them; the next session's budget counts the spend)."""
    m = ledger.get_manifest(run_id)
    if not m or not m.get("sessions"):
        return
    t = out.tally
    stopped = ("egress" if out.stopped_for_egress else "budget" if out.stopped_for_budget
               else None if out.completed else "interrupted")  # fmt: skip
    entry = {**m["sessions"][-1], "tokens": t.tokens, "est_tokens": t.est_tokens, "calls": t.calls,
             "jobs_done": t.done + t.duplicate, "stopped": stopped}  # fmt: skip
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


def _compact(ledger: Ledger, run_id: str) -> str | None:
    """Fold this sweep's results into a new segment; a failure here loses nothing (the objects stay)."""
    from elo_per_token.ledger.segments import compact_run

    try:
        res = compact_run(ledger, run_id)
    except Exception as e:  # compaction is an optimisation: report it, keep the sweep's result
        return f"compaction skipped ({type(e).__name__}: {e}); run `ept compact {run_id}` later"
    if not res.jobs:
        return None
    return f"compacted {res.jobs} job objects into {', '.join(res.segments) or 'no new segment'}"


def _run_local(
    plan: Plan,
    todo: Iterable[Job],
    ledger: Ledger,
    profile: Profile,
    live: _Live,
    run: Callable[[Job, Any], JobResult] | None,
    had_failure: Collection[str] = frozenset(),
    check_existing: bool = True,
) -> bool:
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.worker.ratelimit import Limits, make_rate_limiter

    if not profile.api_key():
        raise InputError(
            f"environment variable {profile.api_key_env} is not set (profile {profile.name!r} reads the key "
            "from it; `ept doctor` checks the whole setup)",
            field="profile",
        )
    lim = plan.limits_for(profile.name)
    limiter = make_rate_limiter(profile.name, Limits(lim.rpm or profile.rpm, lim.tpm or profile.tpm))
    provider = ProviderClient(profile, rate_limiter=limiter)
    live.weather_note = provider.outage.describe
    try:
        return _run_with(todo, ledger, provider, plan, live, run, had_failure, check_existing)
    finally:
        live.weather_note = lambda: None
        live.tally.weather = provider.weather()


def _run_with(
    todo: Any, ledger: Ledger, provider: Any, plan: Plan, live: _Live, run: Any, had_failure: Collection[str],
    check_existing: bool,
) -> bool:  # fmt: skip
    """run_local with the sweep's settings, over the provider client made for it; each job's task is checked
    against the run's record (worker.taskcheck), as a Celery worker checks it."""
    from elo_per_token.coordinator.local import run_local
    from elo_per_token.worker.taskcheck import RunTasks

    tally = live.tally
    return run_local(
        todo, ledger, provider, concurrency=plan.concurrency, on_result=live.on_result, on_retry=live.on_retry,
        should_stop=tally.should_stop, run=run, clear_failures=had_failure, check_existing=check_existing,
        cancel_queued=tally.over_budget, queue_factor=1 if tally.cap is not None else 2,
        on_abandon=lambda n: setattr(tally, "abandoned", n), transcripts=plan.transcripts, tasks=RunTasks(),
        on_tick=live.refresh,
    )  # fmt: skip


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
    from rich.markup import escape  # keys and messages carry task/family names: text, not markup

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
        console.print(f"of which {t.spent_calls} calls · {t.spent_tokens:,} tokens on failed attempts (recorded in "
                      "the run's spent/ objects; `ept analyze` lists them per arm)", highlight=False)  # fmt: skip
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
    if out.compact_note:
        console.print(out.compact_note, highlight=False)
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
    if t.lost:
        shown = ", ".join(f"{cls} {n}" for cls, n in sorted(t.lost.items()))
        console.print(
            f"{sum(t.lost.values())} job(s) failed for a reason of the strategy on the task ({shown}): scored as "
            "losses with their tokens, not retried",
            highlight=False,
        )
    if t.abandoned:
        console.print(f"[yellow]{t.abandoned} job(s) were still running when the stop's grace period ended[/]: "
                      "their calls are not recorded; a rerun runs them again")  # fmt: skip
    if t.failures:
        _print_failures(out, console)
    if out.analysis is not None:
        from elo_per_token.analysis.report import print_report

        print_report(out.analysis, console)
    elif out.analysis_error:
        console.print(f"[yellow]no Elo table:[/] {escape(out.analysis_error)}", highlight=False)


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
