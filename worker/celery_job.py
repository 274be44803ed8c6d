"""The Celery side of running a job: the claim in Redis that keeps a redelivered job from running twice, the
call journal, the budget counter and cancellation marks, and the task body `ept.run_job`
(`celery_run_job`). What runs the job itself is worker.lifecycle.perform_job, shared with the local executor."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from elo_per_token.contracts.jobs import CeleryJobContext, CeleryJobContextDict, Job, JobSummary
from elo_per_token.ledger import Ledger
from elo_per_token.worker.journal import claim_key, journal_set_key
from elo_per_token.worker.lifecycle import _cached, _refused, _summary, ledger_for, perform_job, provider_for
from elo_per_token.worker.task_result import TaskResult
from elo_per_token.worker.taskcheck import ForgedTask, RunTasks

if TYPE_CHECKING:  # redis is imported when a worker first needs it
    import redis

    from elo_per_token.worker.journal import CallJournal


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
        return claim_key(job.run_id, job.key)

    def acquire(self, job: Job) -> bool:
        """Take the job's lease; False when another delivery holds it."""
        return self.acquire_reading(job)[0]

    def acquire_reading(self, job: Job, reads: Sequence[tuple[str, str]] = ()) -> tuple[bool, list[Any]]:
        """Take the job's lease and, in the same round trip, read `reads` ((command, key): "get", "smembers" or "exists")
        right after it on the server: (taken, their values). Read with the lease held, they see what the
        delivery that held it before left; a read whose lease was not taken is not to be used."""
        key = self.key(job)
        with self._lock:
            self._n += 1
            # Per acquisition, so a late release can never delete a later holder's lease (even in this process).
            token = f"{self.owner}:{self._n}"
        if reads:
            pipe = self.r.pipeline(transaction=False)
            pipe.set(key, token, nx=True, px=self.ttl)
            for cmd, k in reads:
                getattr(pipe, _READS[cmd])(k)
            # Errors come back as values (a key of another type, put there by anything with the broker's
            # password): an unreadable read is then ignored by its reader, never the claim's failure.
            taken, *values = pipe.execute(raise_on_error=False)
            if isinstance(taken, Exception):
                raise taken
        else:
            taken, values = self.r.set(key, token, nx=True, px=self.ttl), []
        if not taken:
            return False, values
        with self._lock:
            self._held[key] = token
            if self._renewer is None:
                self._renewer = threading.Thread(target=self._renew, name="ept-claims", daemon=True)
                self._renewer.start()
        return True, values

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

    def release(
        self,
        job: Job,
        marker: tuple[str, str, int] | None = None,
        drops: list[tuple[str, str, str]] | None = None,
        result: TaskResult | None = None,
    ) -> bool:
        """Give the job's lease up (if this process holds it). marker: (key, value, seconds) SET on the server
        just before the release, in the same round trip (the ran marker a waiting copy must find); drops: the
        job's call journals to drop before it, likewise (CallJournal.take_drops); result: the task's result
        entry, stored in the same round trip (TaskResult). True when `result` was stored (or none was given)."""
        key = self.key(job)
        with self._lock:
            token = self._held.pop(key, None)
        if token is None and marker is None and not drops and result is None:
            return True
        try:
            if marker is None and not drops and result is None and token is not None:
                self.r.eval(self._RELEASE, 1, key, token)
                return True
            pipe = self.r.pipeline(transaction=False)
            if drops:
                from elo_per_token.worker.journal import CallJournal

                CallJournal.drop_into(pipe, drops)
            if marker is not None:
                pipe.set(marker[0], marker[1], ex=marker[2])
            at = len(pipe)  # the result's place among the pipeline's replies
            if result is not None:
                result.queue(pipe)
            if token is not None:
                pipe.eval(self._RELEASE, 1, key, token)
            # Each command's error comes back as a value: a journal key of another type (anything with the
            # broker's password can write one) must not keep the marker or the release from being applied.
            values = pipe.execute(raise_on_error=False)
        except Exception:  # the broker gone: the lease runs out; an unstored result is stored by the caller
            return result is None
        return result is None or not isinstance(values[at], Exception)


_READS = {
    "get": "get",
    "smembers": "smembers",
    "exists": "exists",
}  # what acquire_reading may read with the lease


BROKER_WAIT_S = 120.0  # a claim waits this long for a broker that is restarting before the job fails


def _claim(
    claims: Claims, job: Job, wait_s: float = BROKER_WAIT_S, reads: Sequence[tuple[str, str]] = ()
) -> tuple[bool, list[Any]]:
    """claims.acquire_reading, waiting out a broker restart: a message prefetched before the broker went away
    would otherwise fail its job ("worker error: connection refused") while the broker is down for a few
    seconds, though the job can run as soon as the broker is back (its result is reported through it anyway)."""
    import redis

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return claims.acquire_reading(job, reads)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


WEATHER_REFRESH_S = 60.0  # an unchanged report is written again after this long (it has a TTL on the broker)
_reported: dict[tuple[str, str], tuple[dict[str, Any], float]] = {}  # (owner, profile) -> (last report, when)
_reported_lock = threading.Lock()


def _report_weather(claims: Claims, profile: str, provider: Any) -> None:
    """This process's cumulative provider weather for the coordinator's summary (contracts.weather). Written
    when it changed (or WEATHER_REFRESH_S after the last write), not after every job: the coordinator reads the
    last report, which an unchanged one would only rewrite with the same value (a round trip per job)."""
    from elo_per_token.contracts.weather import report

    doc, now, slot = provider.weather(), time.monotonic(), (claims.owner, profile)
    with _reported_lock:
        last = _reported.get(slot)
        if last is not None and last[0] == doc and now - last[1] < WEATHER_REFRESH_S:
            return
        _reported[slot] = (doc, now)
    try:
        report(claims.r, profile, claims.owner, doc)
    except Exception:  # a lost report costs a summary line, never the job; the next job writes it again
        with _reported_lock:
            _reported.pop(slot, None)


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

    if not task_id:
        return None
    try:
        raw = r.get(_ran_key(task_id))
    except Exception:  # unreachable broker: the ledger and the claim still stop a double write
        return None
    return _ran_summary(raw, job)


def _ran_summary(raw: Any, job: Job) -> JobSummary | None:
    """The ran marker's value (as read, or the error reading it) as a finished summary of `job`, or None."""
    try:
        summary = json.loads(raw) if isinstance(raw, bytes | str) and raw else None
    except Exception:  # an unreadable marker: the ledger and the claim still stop a double write
        return None
    statuses = ("done", "duplicate", "failed")
    if (
        not isinstance(summary, dict)
        or summary.get("key") != job.key
        or summary.get("status") not in statuses
    ):
        return None
    return cast(JobSummary, summary)


def _admit(
    task_self: Any, job: Job, ctx: CeleryJobContext, limits: JobSettings, *, check_cancel: bool = True
) -> tuple[Ledger, str | None] | JobSummary:
    """(the ledger, the endpoint) a message may use — only what this worker's own allow-lists name
    (worker.trust) — or the summary of a job refused, forged, cancelled or over the run's budget. check_cancel:
    read the run's cancel marker here (False: the caller reads it in the claim's round trip)."""
    from elo_per_token.worker.trust import Untrusted, check_base_url, check_ledger

    try:
        trust = limits.trust_env()  # this worker's allow-lists as read at its start, not per job
        ledger = ledger_for(check_ledger(ctx.ledger, trust))
        base_url = check_base_url(ctx.base_url, trust)
    except Untrusted as e:
        return _refused(job, str(e))
    try:  # before the claim, the journal or the ledger check: a forged task touches nothing
        _cached(("tasks",), RunTasks).verify(ledger, job)
    except ForgedTask as e:
        return _refused(job, str(e))
    if check_cancel and _cancelled(task_self, job):
        return _summary(job, "cancelled", message=CANCELLED)
    if _over_budget(task_self, job, ctx.budget_tokens):
        return _summary(job, "cancelled", message="the run reached its budget cap before this job started")
    return ledger, base_url


@dataclass(frozen=True)
class JobSettings:
    """What a worker's jobs read from its environment, as values read once where its app is built (`make_app`),
    not per job: where the shared rate-limit claims live (EPT_RATELIMIT_URL, else the Redis broker the task's
    app consumes, else EPT_BROKER_URL) and the allow-lists a message's ledger and endpoint must be on
    (EPT_WORKER_LEDGERS, EPT_WORKER_BASE_URLS; worker.trust)."""

    ratelimit_url: str | None = None  # EPT_RATELIMIT_URL
    env_broker: str | None = None  # EPT_BROKER_URL, for an app whose own broker is not Redis
    ledgers: str | None = None  # EPT_WORKER_LEDGERS, as written (worker.trust parses it)
    base_urls: str | None = None  # EPT_WORKER_BASE_URLS, likewise

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> JobSettings:
        """The variables from `env` (default: the process environment)."""
        from elo_per_token.contracts import settings
        from elo_per_token.worker.trust import BASE_URLS_ENV, LEDGERS_ENV

        return cls(
            settings.read_str("EPT_RATELIMIT_URL", env),
            settings.read_str("EPT_BROKER_URL", env),
            settings.read_str(LEDGERS_ENV, env),
            settings.read_str(BASE_URLS_ENV, env),
        )

    def trust_env(self) -> dict[str, str]:
        """The allow-lists as the mapping worker.trust's checks take."""
        from elo_per_token.worker.trust import BASE_URLS_ENV, LEDGERS_ENV

        return {LEDGERS_ENV: self.ledgers or "", BASE_URLS_ENV: self.base_urls or ""}


def _redis_url(task_self: Any, limits: JobSettings) -> str:
    """The Redis of the shared rate-limit claims."""
    return limits.ratelimit_url or _redis_broker_url(task_self) or limits.env_broker or ""


def _await_claim(
    claims: Claims, job: Job, ledger: Ledger, reads: Sequence[tuple[str, str]] = (), *, cancel: bool = False
) -> tuple[bool, list[Any]] | None:
    """Take the job's claim, reading `reads` with it (Claims.acquire_reading): whether it had to wait for
    another delivery of the job (e.g. redelivered after a visibility timeout) first, and what was read; None
    when that delivery finished the job meanwhile. cancel: the last read is the run's cancel marker: while it is
    set, what was read comes back at once, the claim taken or not (a cancelled job does not wait for it)."""
    waited = False
    while not (got := _claim(claims, job, reads=reads))[0]:
        if cancel and _is_set(got[1][-1]):
            return waited, got[1]
        waited = True
        time.sleep(0.5)
        if ledger.has_job(job.run_id, job.key):
            return None
    return waited, got[1]


def _redelivered(task_self: Any) -> bool:
    """Whether the broker delivered this message before (a lost worker, a visibility timeout)."""
    info = getattr(getattr(task_self, "request", None), "delivery_info", None) or {}
    return bool(info.get("redelivered"))


def _claim_reads(job: Job, task_id: str | None, *, cancel: bool = False) -> list[tuple[str, str]]:
    """What a delivery reads in its claim's round trip, right after it on the server: the journals an earlier
    delivery left (their set), this message's ran marker, and (cancel) last, the run's cancel marker."""
    from elo_per_token.contracts.jobs import cancel_key

    reads = [("smembers", journal_set_key(job.run_id, job.key))]
    reads += [("get", _ran_key(task_id))] if task_id else []
    return [*reads, ("exists", cancel_key(job.run_id))] if cancel else reads


def celery_run_job(
    task_self: Any,
    job_dict: dict[str, Any],
    ctx_dict: CeleryJobContextDict,
    profiles: str | None = None,
    limits: JobSettings | None = None,
    results: bool = False,
) -> JobSummary:
    """Body of the Celery task `ept.run_job`. ctx_dict: the message's CeleryJobContext as JSON; profiles, limits:
    this worker's profiles file and JobSettings as read at its start (None: the environment now). The ledger and
    endpoint are used only if its own allow-lists name them (worker.trust): a message cannot choose either.
    results: the task ignores its result (`make_app`): its result entry is stored here (TaskResult), in the
    claim's release round trip when the job ran, else through Celery's backend."""
    task_id = getattr(getattr(task_self, "request", None), "id", None)
    limits = JobSettings.from_env() if limits is None else limits
    job, ctx = Job.from_dict(job_dict), CeleryJobContext.from_dict(ctx_dict)
    summary, stored = _deliver(task_self, job, ctx, (profiles, limits), task_id, results=results)
    if results and not stored and task_id:
        TaskResult(task_self.backend, task_id, summary).store_by_celery()
    return summary


def _deliver(
    task_self: Any,
    job: Job,
    ctx: CeleryJobContext,
    worker: tuple[str | None, JobSettings],
    delivery: str | None,
    *,
    results: bool = False,
) -> tuple[JobSummary, bool]:
    """One delivery of `job`: (its summary, whether its result entry was stored with the claim's release).
    worker: (this worker's profiles file, its JobSettings); delivery: what names this delivery of the job (its
    ran marker, its result entry): the message's task id, or task id and place for a job of a batch (None: no
    marker); results: store the message's result entry in the claim's release round trip (TaskResult)."""
    profiles, limits = worker
    redis_url = _redis_url(task_self, limits)
    # The run's cancel marker is read in the claim's round trip when the claims live on the broker (as usual).
    fold_cancel = bool(redis_url) and redis_url == _redis_broker_url(task_self)
    admitted = _admit(task_self, job, ctx, limits, check_cancel=not fold_cancel)
    if isinstance(admitted, dict):
        return admitted, False
    ledger, base_url = admitted
    claims = _claims(redis_url)
    task_id = delivery
    reads = _claim_reads(job, task_id, cancel=fold_cancel)
    claimed = _await_claim(claims, job, ledger, reads, cancel=fold_cancel)
    if claimed is None:
        return _summary(job, "skipped"), False
    waited, values = claimed
    if fold_cancel and _is_set(values.pop()):
        claims.release(job)  # taken or not (a copy holds it): this delivery does nothing
        return _summary(job, "cancelled", message=CANCELLED), False
    journal = _journal(claims.r)
    journal.defer_drops(job)  # dropped in the claim's release below (one round trip)
    try:
        where = (ledger, base_url, redis_url, profiles)
        summary, ran = _run_claimed(task_self, job, ctx, where, claims, journal, (waited, values))
    except BaseException:
        journal.release(job)
        claims.release(job)
        raise
    drops = journal.take_drops(job)
    journal.release(job)
    # The ran marker is set just before the claim is released (one round trip): a copy waiting on it must find it.
    marker = (_ran_key(task_id), json.dumps(summary), RAN_TTL_S) if ran and task_id else None
    result = TaskResult(task_self.backend, task_id, summary) if results and task_id else None
    return summary, claims.release(job, marker, drops, result) and result is not None


CANCELLED = "the sweep was stopped before this job started"


def _is_set(value: Any) -> bool:
    """An EXISTS read in the claim's round trip: whether the key is there (an error read as not)."""
    return isinstance(value, int) and value > 0


def _run_claimed(
    task_self: Any,
    job: Job,
    ctx: CeleryJobContext,
    where: tuple[Ledger, str | None, str, str | None],
    claims: Claims,
    journal: CallJournal,
    claimed: tuple[bool, list[Any]],
) -> tuple[JobSummary, bool]:
    """The job with its claim held: (its summary, whether it ran to the end: the message's ran marker is set).
    where: (the ledger, the endpoint, the rate limits' Redis, the profiles file); claimed: (whether the claim
    had to wait for another delivery, the claim's reads: the journal set, then the ran marker if any)."""
    ledger, base_url, redis_url, profiles = where
    waited, (attempts, *ran) = claimed
    # Calls of an earlier delivery that died mid-job: recorded before anything else (the claim is ours).
    journal.recover(ledger, job, attempts)
    if (earlier := _ran_summary(ran[0] if ran else None, job)) is not None:
        return earlier, False
    # The check before the first API call (a job finished elsewhere never spends tokens twice), with the claim
    # held (a copy that finished just before it released the claim is seen). Skipped only when nothing can have
    # finished the job: the first, uncontended delivery of a job from a run's first session (coordinator.sweep).
    if (ctx.check_ledger or _redelivered(task_self) or waited) and ledger.has_job(job.run_id, job.key):
        return _summary(job, "skipped"), False
    provider = provider_for(job.profile, base_url, ctx.rpm, ctx.tpm, redis_url, profiles)

    def on_retry(j: Job, attempt: int, cls: str) -> None:
        task_self.update_state(state="RETRYING", meta={"key": j.key, "attempt": attempt, "class": cls})

    # At most one HEAD above, one conditional PUT in perform_job (and the transcript's PUT when the plan
    # keeps transcripts): nothing else on the success path.
    summary = perform_job(
        job,
        ledger,
        provider,
        on_retry=on_retry,
        max_attempts=ctx.max_attempts,
        check_existing=False,
        clear_failure=ctx.clear_failure,
        transcripts=ctx.transcripts,
        journal=journal,
    )
    _report_weather(claims, job.profile, provider)
    if ctx.budget_tokens is not None:  # every billed token counts toward the cap, failed attempts' too
        # Calls without usable usage at their upper bound too: the cap holds whatever the provider reports.
        _spend(task_self, job, int(summary.get("tokens") or 0) + int(summary.get("est_tokens") or 0))
    return {**summary, "worker": getattr(task_self.request, "hostname", None)}, True
