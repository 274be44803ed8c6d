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
from typing import TYPE_CHECKING, Any, TypeVar, cast

from elo_per_token.common.backoff import backoff
from elo_per_token.contracts.errors import RETRYABLE
from elo_per_token.contracts.jobs import CeleryJobContext, CeleryJobContextDict, Job, JobStatus, JobSummary
from elo_per_token.contracts.records import JobResult
from elo_per_token.contracts.secrets import scrub
from elo_per_token.ledger import Ledger, open_ledger
from elo_per_token.worker.taskcheck import ForgedTask, RunTasks
from elo_per_token.worker.transcript import Recorder
from elo_per_token.worker.transcript import store as store_transcript

if TYPE_CHECKING:  # the provider client (openai SDK) and redis are imported when a worker first needs them
    import redis

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
    cls, msg, result = "task", "", None
    attempt = 0
    spent = _Spent(job, ledger, journal)
    for attempt in range(1, max_attempts + 1):
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
        if cls not in RETRYABLE or attempt == max_attempts or (stop is not None and stop.is_set()):
            break
        if on_retry is not None:
            on_retry(job, attempt, cls)
        # Full jitter keeps a fleet of workers from retrying in lock step after a provider hiccup.
        delay = backoff(attempt, backoff_s) + max(0.0, 0.05 - (time.time() - t0))
        if stop is not None and stop.wait(delay):
            break

    if result is not None and result.ok:
        return _store(job, ledger, result, spent, recorders[-1] if recorders else None, secrets, clear_failure,
                      attempt=attempt, started_at=started_at)  # fmt: skip
    return _record_failure(
        job, ledger, result, spent, cls=cls, msg=msg, attempt=attempt, started_at=started_at
    )


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
    job: Job, ledger: Ledger, result: JobResult, spent: _Spent, recorder: Recorder | None, secrets: list[str] | None,
    clear_failure: bool, *, attempt: int, started_at: float,
) -> JobSummary:  # fmt: skip
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
        job, "done" if created else "duplicate", attempts=attempt, lost=(result.outcome.failure or {}).get("class"),
        started_at=started_at, finished_at=time.time(), **spent.totals(result if created else None),
    )  # fmt: skip


def _record_failure(
    job: Job, ledger: Ledger, result: JobResult | None, spent: _Spent, *, cls: str, msg: str, attempt: int,
    started_at: float,
) -> JobSummary:  # fmt: skip
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
    return _summary(job, "failed", attempts=attempt, started_at=started_at, finished_at=time.time(),
                    **spent.totals(None), **{"class": cls, "message": msg})  # fmt: skip


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
        return {"calls": calls, "tokens": tokens, "spent_calls": self.calls, "spent_tokens": self.tokens,
                "est_tokens": est}  # fmt: skip


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


class Claims:
    """Redis leases on the jobs this process is running, renewed together while they run.

    A lease expires if its holder dies, so a redelivered copy of a dead worker's job can run. One renewer
    thread per process (not one per job): a thread start and its wake-ups per job cost measurable CPU at a
    few hundred jobs per second, and jobs are usually far shorter than the lease.
    """

    _RENEW = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
    _RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"

    def __init__(self, r: redis.Redis, owner: str, ttl_ms: int = 20000) -> None:
        self.r, self.owner, self.ttl = r, owner, ttl_ms
        self._held: dict[str, str] = {}  # key -> token of this acquisition
        self._n = 0
        self._lock = threading.Lock()
        self._renewer: threading.Thread | None = None

    @staticmethod
    def key(job: Job) -> str:
        return f"ept:claim:{job.run_id}:{job.key}"

    def acquire(self, job: Job) -> bool:
        key = self.key(job)
        with self._lock:
            self._n += 1
            # Per acquisition, so a late release can never delete a later holder's lease (even in this process).
            token = f"{self.owner}:{self._n}"
        if not self.r.set(key, token, nx=True, px=self.ttl):
            return False
        with self._lock:
            self._held[key] = token
            if self._renewer is None:
                self._renewer = threading.Thread(target=self._renew, name="ept-claims", daemon=True)
                self._renewer.start()
        return True

    def _renew(self) -> None:
        while True:
            time.sleep(self.ttl / 4000)
            with self._lock:
                held = list(self._held.items())
            if not held:
                continue
            # A lost renewal only risks a duplicate run, which the ledger's conditional create absorbs.
            with contextlib.suppress(Exception):
                pipe = self.r.pipeline(transaction=False)
                for key, token in held:
                    pipe.eval(self._RENEW, 1, key, token, self.ttl)
                pipe.execute()

    def release(self, job: Job) -> None:
        key = self.key(job)
        with self._lock:
            token = self._held.pop(key, None)
        if token is not None:
            with contextlib.suppress(Exception):
                self.r.eval(self._RELEASE, 1, key, token)


BROKER_WAIT_S = 120.0  # a claim waits this long for a broker that is restarting before the job fails


def _claim(claims: Claims, job: Job, wait_s: float = BROKER_WAIT_S) -> bool:
    """claims.acquire, waiting out a broker restart: a message prefetched before the broker went away would
    otherwise fail its job ("worker error: connection refused") while the broker is down for a few seconds,
    though the job can run as soon as the broker is back (its result is reported through it anyway)."""
    import redis

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return claims.acquire(job)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def _report_weather(claims: Claims, profile: str, provider: Any) -> None:
    """This process's cumulative provider weather for the coordinator's summary (contracts.weather)."""
    from elo_per_token.contracts.weather import report

    with contextlib.suppress(Exception):  # a lost report costs a summary line, never the job
        report(claims.r, profile, claims.owner, provider.weather())


def _claims(redis_url: str) -> Claims:
    import os
    import socket
    import uuid

    import redis

    def make() -> Claims:
        r = redis.Redis.from_url(redis_url)
        return Claims(r, f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")

    return _cached(("claims", redis_url), make)


def _redis_broker_url(task_self: Any) -> str:
    """The broker URL of the task's Celery app (`ept worker --broker`, else EPT_BROKER_URL) when it is Redis,
    else ""."""
    url = str(getattr(getattr(task_self, "app", None), "conf", {}).get("broker_url") or "")
    return url if url.startswith(("redis://", "rediss://", "unix://")) else ""


def _cancelled(task_self: Any, job: Job) -> bool:
    """The coordinator was stopped (contracts.jobs.cancel_key on the broker): a queued job does not start."""
    from elo_per_token.contracts.jobs import cancel_key

    url = _redis_broker_url(task_self)
    if not url:
        return False
    try:
        import redis

        r = _cached(("broker", url), lambda: redis.Redis.from_url(url))
        return bool(r.exists(cancel_key(job.run_id)))
    except Exception:  # an unreadable marker must not fail the job: run it
        return False


def _broker(task_self: Any) -> redis.Redis | None:
    """The broker's Redis client (cached), or None when the broker is not Redis."""
    url = _redis_broker_url(task_self)
    if not url:
        return None
    import redis

    return _cached(("broker", url), lambda: redis.Redis.from_url(url))


def _over_budget(task_self: Any, job: Job, cap: int | None) -> bool:
    """The run has spent its token cap (contracts.jobs.budget_key): the job does not start."""
    from elo_per_token.contracts.jobs import budget_key

    if cap is None:
        return False
    try:
        r = _broker(task_self)
        raw = r.get(budget_key(job.run_id)) if r is not None else None
    except Exception:  # an unreachable broker must not fail the job; the coordinator still stops the run
        return False
    try:
        spent = 0 if raw is None else int(raw)  # no counter yet: nothing spent; b"" is not a number
    except ValueError:
        return True  # not a number: forged or corrupt; spending is refused rather than left unbounded
    # Spend only grows from what the coordinator set (>= 0): a negative counter was forged to lift the cap.
    return spent < 0 or spent >= cap


def _spend(task_self: Any, job: Job, tokens: int) -> None:
    from elo_per_token.contracts.jobs import budget_key

    with contextlib.suppress(Exception):
        r = _broker(task_self)
        if r is not None and tokens:
            r.incrby(budget_key(job.run_id), tokens)


def _journal(r: redis.Redis) -> CallJournal:
    from elo_per_token.worker.journal import CallJournal

    return _cached(("journal", id(r)), lambda: CallJournal(r))


def _ran_key(task_id: str) -> str:
    return f"ept:ran:{task_id}"


RAN_TTL_S = 7 * 24 * 3600


def _ran_before(r: redis.Redis, task_id: str | None, job: Job) -> JobSummary | None:
    """The summary of an earlier delivery of this very message (same task id) that ran to the end: a redelivered
    copy returns it instead of running the job again (a failed job is not in the ledger, so without this a copy
    redelivered after a visibility timeout paid for its calls again). Anything on the broker that is not such
    a summary of this job is ignored (the job then runs, as before markers existed)."""
    import json

    if not task_id:
        return None
    try:
        raw = r.get(_ran_key(task_id))
        summary = json.loads(raw) if raw else None
    except (
        Exception
    ):  # unreachable broker or unreadable marker: the ledger and the claim still stop a double write
        return None
    statuses = ("done", "duplicate", "failed")
    if (
        not isinstance(summary, dict)
        or summary.get("key") != job.key
        or summary.get("status") not in statuses
    ):
        return None
    return cast(JobSummary, summary)


def _mark_ran(r: redis.Redis, task_id: str | None, summary: JobSummary) -> None:
    import json

    if task_id:
        with contextlib.suppress(Exception):
            r.set(_ran_key(task_id), json.dumps(summary), ex=RAN_TTL_S)


def _refused(job: Job, why: str) -> JobSummary:
    return _summary(job, "failed", **{"class": "permanent", "message": scrub(why)})


def celery_run_job(
    task_self: Any, job_dict: dict[str, Any], ctx_dict: CeleryJobContextDict, profiles: str | None = None
) -> JobSummary:
    """Body of the Celery task `ept.run_job`. ctx_dict: the message's CeleryJobContext (ledger URL, base_url
    override, rate limits) as plain JSON; profiles: this worker's profiles file (`ept worker --profiles`). The ledger and the endpoint are used only if this worker's own
    allow-lists name them (worker.trust): a message cannot choose where the key goes or where results land."""
    from elo_per_token.contracts import settings
    from elo_per_token.worker.trust import Untrusted, check_base_url, check_ledger

    job = Job.from_dict(job_dict)
    ctx = CeleryJobContext.from_dict(ctx_dict)
    try:
        ledger = ledger_for(check_ledger(ctx.ledger))
        base_url = check_base_url(ctx.base_url)
    except Untrusted as e:
        return _refused(job, str(e))
    try:  # before the claim, the journal or the ledger check: a forged task touches nothing
        _cached(("tasks",), RunTasks).verify(ledger, job)
    except ForgedTask as e:
        return _refused(job, str(e))
    if _cancelled(task_self, job):
        return _summary(job, "cancelled", message="the sweep was stopped before this job started")
    if _over_budget(task_self, job, ctx.budget_tokens):
        return _summary(job, "cancelled", message="the run reached its budget cap before this job started")
    # The shared rate-limit claims: EPT_RATELIMIT_URL, else the broker this worker consumes.
    redis_url = (
        settings.read_str("EPT_RATELIMIT_URL")
        or _redis_broker_url(task_self)
        or settings.read_str("EPT_BROKER_URL")
        or ""
    )
    claims = _claims(redis_url)
    task_id = getattr(getattr(task_self, "request", None), "id", None)
    waited = False
    while not _claim(claims, job):
        # Another delivery of this job is running (e.g. redelivered after a visibility timeout): wait for it.
        waited = True
        time.sleep(0.5)
        if ledger.has_job(job.run_id, job.key):
            return _summary(job, "skipped")
    journal = _journal(claims.r)
    try:
        # Calls of an earlier delivery that died mid-job: recorded before anything else (the claim is ours).
        journal.recover(ledger, job)
        if (earlier := _ran_before(claims.r, task_id, job)) is not None:
            return earlier
        # The check before the first API call, so a job that finished elsewhere never spends tokens twice; made
        # with the claim held, so a copy that finished just before it released the claim is seen. Skipped only
        # when nothing can have finished the job: the first delivery (not a redelivery after a lost worker or
        # a visibility timeout) of a job from a run's first session (coordinator.sweep.execute), uncontended.
        redelivered = bool(
            (getattr(getattr(task_self, "request", None), "delivery_info", None) or {}).get("redelivered")
        )
        if (ctx.check_ledger or redelivered or waited) and ledger.has_job(job.run_id, job.key):
            return _summary(job, "skipped")
        provider = provider_for(job.profile, base_url, ctx.rpm, ctx.tpm, redis_url, profiles)

        def on_retry(j: Job, attempt: int, cls: str) -> None:
            task_self.update_state(state="RETRYING", meta={"key": j.key, "attempt": attempt, "class": cls})

        # At most one HEAD above, one conditional PUT in perform_job (and the transcript's PUT when the plan
        # keeps transcripts): nothing else on the success path.
        summary = perform_job(
            job, ledger, provider, on_retry=on_retry, max_attempts=ctx.max_attempts,
            check_existing=False, clear_failure=ctx.clear_failure, transcripts=ctx.transcripts, journal=journal,
        )  # fmt: skip
        _report_weather(claims, job.profile, provider)
        if ctx.budget_tokens is not None:  # every billed token counts toward the cap, failed attempts' too
            # Calls without usable usage at their upper bound too: the cap holds whatever the provider reports.
            _spend(task_self, job, int(summary.get("tokens") or 0) + int(summary.get("est_tokens") or 0))
        summary = {**summary, "worker": getattr(task_self.request, "hostname", None)}
        # Before the claim is released: a copy waiting on the claim must find it.
        _mark_ran(claims.r, task_id, summary)
        return summary
    finally:
        journal.release(job)
        claims.release(job)
