"""Running one job against the ledger: the code path shared by the Celery task and the local executor.

Idempotence, in order:
1. If the ledger already holds the job's object, return at once — no API call, no tokens spent (one HEAD; the
   only other request of a successful job is the conditional create; a failure object from an earlier attempt
   is deleted only when the coordinator says there is one).
2. (Celery) take a claim on the job in Redis, so a duplicate delivery of a job that is still running waits
   for it instead of calling the API again; the claim expires if its holder dies.
3. Write the records as ONE object with a conditional create: if two copies ever both ran, only one lands.

Failures are classified (credential / endpoint / rate_limit / transient / permanent / task). Transient and
rate-limit failures are retried here with backoff; the last failure is written to failures/<key>.json
(overwritable) so `ept retry` can re-run exactly the failed jobs.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from elo_per_token.common.backoff import backoff
from elo_per_token.contracts.errors import RETRYABLE
from elo_per_token.contracts.jobs import Job, JobStatus, JobSummary
from elo_per_token.contracts.records import JobResult
from elo_per_token.contracts.secrets import scrub
from elo_per_token.ledger import Ledger, open_ledger
from elo_per_token.worker.taskcheck import ForgedTask, RunTasks
from elo_per_token.worker.transcript import Recorder
from elo_per_token.worker.transcript import store as store_transcript

if TYPE_CHECKING:  # the provider client (openai SDK) and redis are imported when a worker first needs them
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.worker.journal import CallJournal

T = TypeVar("T")
TASK_NAME = "ept.run_job"


def _summary(job: Job, status: JobStatus, **kw: Any) -> JobSummary:
    # kw: the other JobSummary fields (calls, tokens, class, message, attempts, timing, lost)
    return cast(
        JobSummary,
        {"key": job.key, "status": status, "calls": 0, "tokens": 0, "class": None, "message": None, **kw},
    )


def _refused(job: Job, why: str) -> JobSummary:
    return _summary(job, "failed", **{"class": "permanent", "message": scrub(why)})


def _classify(exc: BaseException) -> tuple[str, str]:
    cls = getattr(exc, "error_class", None)
    msg = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    if cls is None:
        # Anything that is not a provider error comes from the evaluation side (strategy, grader, task data).
        cls = "task"
        msg = f"{msg} | {traceback.format_exc(limit=3).splitlines()[-1]}"
    return cls, scrub(msg)


def perform_job(
    job: Job,
    ledger: Ledger,
    provider: Any,
    *,
    run: Callable[[Job, Any], JobResult] | None = None,
    max_attempts: int = 3,
    backoff_s: float = 1.0,
    on_retry: Callable[[Job, int, str], None] | None = None,
    api_key: str | None = None,
    check_existing: bool = True,
    clear_failure: bool = False,
    stop: threading.Event | None = None,
    transcripts: bool = False,
    journal: CallJournal | None = None,
    tasks: RunTasks | None = None,
) -> JobSummary:
    """Run `job` unless its result exists, store the result, and return a small JSON summary.

    check_existing=False: the caller has just checked (the Celery task does, before taking its claim).
    clear_failure: the job has a failure object from an earlier attempt, deleted once it succeeds. Otherwise
    a success costs exactly one request to the ledger, the conditional create.
    stop: when set (the executor is stopping), a failed attempt is not retried: it is recorded as it is.
    transcripts: also store the job's transcript beside its result (worker.transcript; run_job only).
    journal: (Celery) each call is also journaled on the broker until its attempt is in the ledger, so the
    calls of a worker killed mid-job are recovered by the job's next delivery (worker.journal).
    tasks: the job's task must be the one its run recorded (worker.taskcheck); if not, the job is refused
    before anything is read, run or written.
    """
    started_at = time.time()
    if (not_run := _not_to_run(job, ledger, tasks, check_existing)) is not None:
        return not_run
    run, recorders = _runner(run, transcripts)
    secrets = [api_key] if api_key else None
    spent = _Spent(job, ledger, journal)
    retry = _Retry(max_attempts, backoff_s, on_retry, stop)
    result, cls, msg, attempt = _attempts(job, provider, run, spent, retry, secrets)
    if result is not None and result.ok:
        recorder = recorders[-1] if recorders else None
        return _store(
            job,
            ledger,
            result,
            spent,
            recorder,
            secrets,
            clear_failure,
            attempt=attempt,
            started_at=started_at,
        )
    return _record_failure(
        job, ledger, result, spent, cls=cls, msg=msg, attempt=attempt, started_at=started_at
    )


class _Retry(NamedTuple):
    """perform_job's retry settings: attempts at most, the backoff base, the retry hook, the stop event."""

    max_attempts: int
    backoff_s: float
    on_retry: Callable[[Job, int, str], None] | None
    stop: threading.Event | None


def _attempts(
    job: Job,
    provider: Any,
    run: Callable[[Job, Any], JobResult],
    spent: _Spent,
    retry: _Retry,
    secrets: list[str] | None,
) -> tuple[JobResult | None, str, str, int]:
    """Run the job until an attempt succeeds, fails for good, or the attempts or the stop run out: (the last
    result or None when it raised, its failure class and message, the attempt number)."""
    cls, msg, result = "task", "", None
    attempt = 0
    for attempt in range(1, retry.max_attempts + 1):
        t0 = time.time()
        spent.begin()
        try:
            result = run(job, provider)
        except Exception as e:
            cls, msg = _classify(e)
            result = None
            spent.salvage()  # calls made before the exception are only in the journal
        else:
            if result.ok:
                break
            err = result.outcome.error or {}
            cls, msg = str(err.get("class") or "task"), scrub(str(err.get("message") or ""), secrets)
            # Every failed attempt's calls were billed: write them now, before a retry or a crash loses them.
            spent.record(result, reason="failed", error_class=cls, attempt=attempt)
        stop = retry.stop
        if cls not in RETRYABLE or attempt == retry.max_attempts or (stop is not None and stop.is_set()):
            break
        if retry.on_retry is not None:
            retry.on_retry(job, attempt, cls)
        # Full jitter keeps a fleet of workers from retrying in lock step after a provider hiccup.
        delay = backoff(attempt, retry.backoff_s) + max(0.0, 0.05 - (time.time() - t0))
        if stop is not None and stop.wait(delay):
            break
    return result, cls, msg, attempt


def _not_to_run(job: Job, ledger: Ledger, tasks: RunTasks | None, check_existing: bool) -> JobSummary | None:
    """Why the job is not run (its task is not its run's: refused; its result exists: skipped), or None."""
    if tasks is not None:
        try:
            tasks.verify(ledger, job)
        except ForgedTask as e:
            return _refused(job, str(e))
    if check_existing and ledger.has_job(job.run_id, job.key):
        return _summary(job, "skipped")
    return None


def _store(
    job: Job,
    ledger: Ledger,
    result: JobResult,
    spent: _Spent,
    recorder: Recorder | None,
    secrets: list[str] | None,
    clear_failure: bool,
    *,
    attempt: int,
    started_at: float,
) -> JobSummary:
    """Write a successful job's object (once: a conditional create), with its transcript when kept."""
    from elo_per_token.contracts.taskdigest import task_digest

    result.task_digest = task_digest(job.task)  # what was graded, checked again by analysis
    spent.commit()
    created = ledger.put_job(job.run_id, job.key, result.to_jsonl())
    if created and recorder is not None:  # a second, separate object: never read by `ept analyze`
        store_transcript(ledger, job.run_id, job.key, recorder, result.outcome, secrets)
    if not created:  # another copy's object stands; this copy's calls were billed all the same
        spent.record(result, reason="duplicate", error_class=None, attempt=attempt)
    spent.end()
    if clear_failure:
        ledger.delete_failure(job.run_id, job.key)
    return _summary(
        job,
        "done" if created else "duplicate",
        attempts=attempt,
        lost=(result.outcome.failure or {}).get("class"),
        started_at=started_at,
        finished_at=time.time(),
        **spent.totals(result if created else None),
    )


def _record_failure(
    job: Job,
    ledger: Ledger,
    result: JobResult | None,
    spent: _Spent,
    *,
    cls: str,
    msg: str,
    attempt: int,
    started_at: float,
) -> JobSummary:
    """Write the job's failure object (overwritable: the last failure of the job, for `ept retry`)."""
    failure = {
        "job": job.to_dict(),
        "class": cls,
        "message": msg,
        "attempts": attempt,
        "at": time.time(),
        # This attempt's calls (also in its spent object, which is what the totals count).
        "calls": result.sent_calls if result else 0,
        "tokens": result.tokens if result else 0,
        "est_tokens": result.estimated_tokens if result else 0,
        "lines": result.to_lines() if result else [],
        # Every attempt's calls in this run of the job: spent/ objects hold each of them.
        "spent_calls": spent.calls,
        "spent_tokens": spent.tokens,
    }
    ledger.put_failure(job.run_id, job.key, failure)
    return _summary(
        job,
        "failed",
        attempts=attempt,
        started_at=started_at,
        finished_at=time.time(),
        **spent.totals(None),
        **{"class": cls, "message": msg},
    )


class _Spent:
    """The calls of a job's attempts that are not its stored result: each written at once as a write-once spent
    object named after its attempt (contracts.spent), and counted for the job's summary. With a journal, each
    attempt's calls are also on the broker until they are in the ledger (worker.journal)."""

    def __init__(self, job: Job, ledger: Ledger, journal: CallJournal | None) -> None:
        self.job, self.ledger, self.journal = job, ledger, journal
        self.calls = 0
        self.tokens = 0
        self.est_tokens = 0  # calls without usable usage, at their upper bound (JobResult.estimated_tokens)
        self.attempt_id = ""

    def begin(self) -> None:
        import uuid

        self.attempt_id = self.journal.begin(self.job) if self.journal is not None else uuid.uuid4().hex

    def record(self, result: JobResult, *, reason: str, error_class: str | None, attempt: int) -> None:
        if result.calls:
            from elo_per_token.contracts.spent import SPENT_DIR, SPENT_SUFFIX, spent_bytes

            data = spent_bytes(
                result.to_lines(), reason=reason, error_class=error_class, attempt=attempt, at=time.time()
            )
            self.ledger.put_blob(result.job.run_id, f"{SPENT_DIR}{self.attempt_id}{SPENT_SUFFIX}", data)
            self.calls += result.sent_calls
            self.tokens += result.tokens
            self.est_tokens += result.estimated_tokens
        self.end()

    def commit(self) -> None:
        if self.journal is not None:
            self.journal.commit(self.job, self.attempt_id)

    def end(self) -> None:
        if self.journal is not None:
            self.journal.end(self.job, self.attempt_id)

    def salvage(self) -> None:
        """An attempt that raised: whatever it journaled becomes a spent object now."""
        if self.journal is not None:
            with contextlib.suppress(Exception):
                self.journal.recover(self.ledger, self.job)

    def totals(self, stored: JobResult | None) -> dict[str, int]:
        """Summary fields: calls and tokens of every attempt (the stored result's included), and the share
        spent on attempts whose calls are in spent objects."""
        calls = self.calls + (stored.sent_calls if stored else 0)
        tokens = self.tokens + (stored.tokens if stored else 0)
        est = self.est_tokens + (stored.estimated_tokens if stored else 0)
        return {
            "calls": calls,
            "tokens": tokens,
            "spent_calls": self.calls,
            "spent_tokens": self.tokens,
            "est_tokens": est,
        }


def _runner(
    run: Callable[[Job, Any], JobResult] | None, transcripts: bool
) -> tuple[Callable[[Job, Any], JobResult], list[Recorder]]:
    """The job runner (run_job unless given) and, when transcripts are kept (run_job only), the list it adds
    a fresh recorder to per attempt: the last one is the stored attempt's."""
    if run is not None:
        return run, []
    from elo_per_token.worker.job import run_job

    if not transcripts:
        return run_job, []
    recorders: list[Recorder] = []

    def recording(job: Job, provider: Any) -> JobResult:
        recorders.append(Recorder())
        return run_job(job, provider, transcript=recorders[-1])

    return recording, recorders


# ---- Celery side: providers, limiters and ledgers cached per worker process -------------------------------

_cache: dict[tuple[object, ...], Any] = {}
_cache_lock = threading.Lock()


def _cached(key: tuple[object, ...], make: Callable[[], T]) -> T:
    with _cache_lock:
        if key not in _cache:
            _cache[key] = make()
        value: T = _cache[key]
        return value


def provider_for(
    profile_name: str,
    base_url: str | None,
    rpm: int | None,
    tpm: int | None,
    redis_url: str | None,
    profiles: str | None = None,
) -> ProviderClient:
    """One ProviderClient per (profile, endpoint, limits) in this process, so HTTP connections are reused.
    profiles: the profiles file (`ept worker --profiles`); None: egress.profiles' lookup (EPT_PROFILES, ...)."""

    def make() -> ProviderClient:
        from elo_per_token.egress.client import ProviderClient
        from elo_per_token.egress.profiles import get_profile
        from elo_per_token.worker.ratelimit import Limits, make_rate_limiter

        prof = get_profile(profile_name, profiles)
        if base_url:
            prof = prof.with_base_url(base_url)
        limiter = make_rate_limiter(prof.name, Limits(rpm or prof.rpm, tpm or prof.tpm), redis_url)
        shared = None
        if redis_url:  # whether any worker reached the endpoint: an outage is then waited out by all of them
            import redis

            from elo_per_token.egress.outage import SharedReach

            shared = SharedReach(redis.Redis.from_url(redis_url, socket_timeout=5), prof.name, prof.base_url)
        return ProviderClient(prof, rate_limiter=limiter, shared_reach=shared)

    return _cached(("provider", profile_name, base_url, rpm, tpm, redis_url, profiles), make)


def ledger_for(url: str) -> Ledger:
    return _cached(("ledger", url), lambda: open_ledger(url))
