"""The Celery executor: enqueue jobs by task NAME in batches, then follow them through the result backend.

The coordinator does not import the worker's task code: messages name `ept.run_job` and carry the job (plain
JSON) and a context (contracts.jobs.CeleryJobContext, sent as plain JSON: ledger URL, endpoint override, rate
limits). Progress comes from the result backend with one MGET per poll for all outstanding jobs; the results
themselves are in the ledger.
If the coordinator is interrupted, enqueued jobs keep running on the workers; a rerun skips what has landed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import signal
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any

from elo_per_token.common.backoff import backoff_ceiling
from elo_per_token.contracts.jobs import CeleryJobContext, Job, JobSummary
from elo_per_token.contracts.weather import sweep_weather
from elo_per_token.coordinator.celery_batches import BATCH_TASK, pack, read_batch
from elo_per_token.coordinator.celery_budget import broker_redis, floor_budget, start_budget
from elo_per_token.coordinator.consumers import QueueStalled, QueueWatch, redis_watch, window_s

TASK_NAME = "ept.run_job"


def _failed(job_key: str, message: str) -> JobSummary:
    return {
        "key": job_key,
        "status": "failed",
        "class": "transient",
        "message": message,
        "calls": 0,
        "tokens": 0,
    }


def _pipelined(producer: Any, size: int) -> Any:
    """kombu >= 5.7 sends a batch of messages to Redis in one pipeline (one round trip, one client) instead of
    one LPUSH each, about a third of the coordinator's CPU per job; older kombu publishes one by one."""
    batch = getattr(producer, "batch", None)
    return batch(max_size=max(1, size)) if batch is not None else contextlib.nullcontext()


def _first_contact(fn: Callable[[], Any], app: Any) -> None:
    """The first broker round trip: a broker that is down, unreachable or refuses the password is a setup
    problem, reported as an exit-2 error naming the (masked) URL, not a redis traceback."""
    import redis.exceptions
    from kombu.exceptions import OperationalError

    from elo_per_token.contracts.errors import InputError
    from elo_per_token.contracts.secrets import mask_url

    try:
        fn()
    except (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.AuthenticationError,
        redis.exceptions.ResponseError,
        OperationalError,
    ) as e:
        url = mask_url(str(app.conf.broker_url))
        raise InputError(
            f"cannot use the broker at {url}: {type(e).__name__}: {mask_url(str(e))} — start Redis there, or point "
            "EPT_BROKER_URL (and EPT_RESULT_BACKEND) at a running one; `ept sweep --executor local` needs no broker",
            field="EPT_BROKER_URL",
        ) from None


def _record_stop(ledger_url: str, run_ids: Collection[str], message: str) -> None:
    """The reason the coordinator stopped, for `ept status` (coordinator.status.STOP_BLOB); best effort."""
    import json

    from elo_per_token.coordinator.status import STOP_BLOB
    from elo_per_token.ledger import open_ledger

    with contextlib.suppress(Exception):
        led = open_ledger(ledger_url)
        for rid in run_ids:
            led.put_blob(rid, STOP_BLOB, json.dumps({"at": time.time(), "message": message}).encode())


def _recover_journals(
    app: Any, ledger_url: str, run_ids: Collection[str], notice: Callable[[str], None] | None, finished: bool
) -> None:
    """The end of the sweep: calls journaled by deliveries that died and were never delivered again become
    spent objects (worker.journal.recover_run), so every call paid for is recorded by the time the sweep ends.
    The journals are where the workers keep them: EPT_RATELIMIT_URL, else the broker. Best effort. Not
    `finished` (Ctrl-C, a stalled queue), deliveries may still be running: only journals free now."""
    from elo_per_token.ledger import open_ledger
    from elo_per_token.worker.journal import END_WAIT_S, recover_run

    try:
        r = _workers_redis(app)
        led = open_ledger(ledger_url)
        for rid in sorted(run_ids):
            recovered, held = recover_run(r, led, rid, END_WAIT_S if finished else 0.0)
            if notice and recovered:
                notice(
                    f"recorded {recovered} call(s) of deliveries that died mid-job (spent/, from the journal)"
                )
            if notice and held:
                notice(f"{held} job(s) held by a running delivery: their calls are recorded when it ends")
    except Exception as e:  # the broker or the ledger gone at the very end: the next delivery recovers them
        if notice:
            notice(f"journals not recovered at the end ({type(e).__name__}); the jobs' next delivery does")


def _raise_interrupt(_sig: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _workers_redis(app: Any) -> Any:
    """The Redis where workers keep their claims, journals and outage reports: EPT_RATELIMIT_URL, else the
    broker (worker.celery_job._redis_url)."""
    import redis

    from elo_per_token.contracts import settings

    url = settings.read_str("EPT_RATELIMIT_URL") or str(app.conf.broker_url)
    return redis.Redis.from_url(url, socket_timeout=10)


class _OutageNote:
    """The live progress line's outage note of a Celery sweep: what the profile's workers report as under way
    (contracts.weather.read_outage), read at most once a second and passed to `show` (None: no outage)."""

    def __init__(self, app: Any, profile: str, show: Callable[[str | None], None]) -> None:
        self.app, self.profile, self.show = app, profile, show
        self._r: Any = None
        self._at = 0.0

    def tick(self) -> None:
        from elo_per_token.contracts.weather import read_outage
        from elo_per_token.egress.outage import outage_text

        if time.monotonic() - self._at < 1.0:
            return
        self._at, note = time.monotonic(), None
        with contextlib.suppress(Exception):  # the broker restarting: no note this second
            self._r = self._r or _workers_redis(self.app)
            if (o := read_outage(self._r, self.profile)) is not None:
                note = outage_text(o["what"], o["since"], o["patience"], time.time() - o["since"])
        self.show(note)


def _cancel_queued(app: Any, run_ids: set[str], n_pending: int, notice: Callable[[str], None] | None) -> None:
    """Ctrl-C/SIGTERM: the queued messages of this run must not start. Workers check the run's cancel key before
    a job's first API call; jobs already running finish and reach the ledger."""
    from elo_per_token.contracts.jobs import cancel_key

    with contextlib.suppress(Exception):  # the broker may be what failed; stopping must not raise here
        r = broker_redis(app)
        for rid in run_ids:
            r.set(cancel_key(rid), "1", ex=7 * 24 * 3600)
        if notice:
            notice(
                f"stopping: {n_pending} queued or running job(s) of this run are cancelled before they start; "
                "jobs already running finish on the workers"
            )


def _read_back(meta: dict[str, Any]) -> tuple[str, Any]:
    """A result-backend entry as (what happened, its payload): ("result", the job's summary), ("failure", the
    worker's exception message), ("retry", the worker's RETRYING meta) or ("running", None) for any other state
    (the job is not finished)."""
    state, result = meta.get("status"), meta.get("result")
    if state == "SUCCESS":
        return "result", result
    if state == "FAILURE":
        return "failure", result.get("exc_message") if isinstance(result, dict) else str(result)
    if state == "RETRYING" and isinstance(result, dict):
        return "retry", result
    return "running", None


class _Outstanding:
    """The run's enqueued, unfinished jobs and their progress in the result backend.

    One object rather than closures over shared locals, so each step (send, poll, recover from a broker
    restart) is a method of its own; the state is exactly what `run_celery` used to keep in locals.
    """

    # Jobs finish roughly in the order they were sent: most polls read only the oldest WINDOW pending
    # results; every tenth reads them all, so a job that finishes out of order is seen within a second.
    WINDOW = 1000

    def __init__(
        self,
        app: Any,
        ctx: CeleryJobContext,
        *,
        queue: str,
        batch_size: int,
        on_result: Callable[[JobSummary], None],
        on_retry: Callable[[str, int, str], None] | None,
        notice: Callable[[str], None] | None,
        clear_failures: Collection[str],
        per_message: int = 1,
    ) -> None:
        self.app, self.backend = app, app.backend
        self.per_message = per_message  # jobs per message (coordinator.celery_batches)
        self.queue, self.batch_size = queue, batch_size
        self.on_result, self.on_retry, self.notice = on_result, on_retry, notice
        self.clear_failures = clear_failures
        # Serialised once: the context of every message is one of these two plain dicts.
        self.ctx_wire = ctx.to_dict()
        self.ctx_clear_wire = dataclasses.replace(ctx, clear_failure=True).to_dict()
        # After the broker lost its data, a re-sent job may have finished before the loss: its worker checks
        # the ledger before the first API call whatever the session (worker.celery_job.celery_run_job).
        self.resent_wire = dataclasses.replace(ctx, check_ledger=True).to_dict()
        self.resent_clear_wire = dataclasses.replace(ctx, check_ledger=True, clear_failure=True).to_dict()
        # task id -> (the message's jobs, its result-backend key): the jobs to enqueue again if the broker loses
        # its data, the key built once rather than on every poll; and how many jobs that is in all.
        self.pending: dict[str, tuple[tuple[Job, ...], bytes]] = {}
        self.n_jobs = 0
        self.retry_seen: dict[str, Any] = {}
        self.ticks = 0
        self.run_ids: set[str] = set()
        # A marker in Redis: gone after a broker restart means Redis came back empty (no persistence).
        self.marker = f"ept:sweep-alive:{uuid.uuid4().hex}"
        self.broker_down_since: list[float] = []  # when the current broker outage began (empty = reachable)
        self.watch: QueueWatch | None = (
            None  # coordinator.consumers: a queue with work and no consumer stops us
        )
        # (run id, tokens spent by earlier sessions) when the run has a cap, and what this session's results
        # spent (measured + estimated): the floor of the broker's counter (floor_budget).
        self.budget: tuple[str, int] | None = None
        self.outage_note: _OutageNote | None = None
        self.seen_tokens = 0

    def tick(self) -> None:
        """The live outage note (a Celery sweep's progress line), when the sweep shows one."""
        if self.outage_note is not None:
            self.outage_note.tick()

    def check_consumers(self) -> None:
        """QueueStalled when the job queue or the grade queue has had work and no consumer for the window."""
        if self.watch is not None and (msg := self.watch.check(len(self.pending))):
            raise QueueStalled(msg, field="queue")

    def mark_alive(self) -> None:
        self.backend.client.set(self.marker, "1", ex=7 * 24 * 3600)

    def send(self, jobs: tuple[Job, ...], producer: Any, again: bool = False, check: bool = False) -> None:
        """One message: `ept.run_job` for one job, `ept.run_jobs` (worker.celery_batch) for several. again: after
        the broker lost its data; check: the worker checks the ledger before the first API call (both: a job
        that may have run already)."""
        for job in jobs:
            if job.run_id not in self.run_ids:  # a new session of the run lifts an earlier session's cancel
                from elo_per_token.contracts.jobs import cancel_key

                self.run_ids.add(job.run_id)
                broker_redis(self.app).delete(cancel_key(job.run_id))
        tid = f"{jobs[0].run_id}:{uuid.uuid4().hex}"
        # Only a job with a failure object from an earlier attempt deletes it on success (no blind DELETE); a
        # job sent again after the broker came back empty may have failed before (its result lost with the
        # broker's data): its success must not leave that failure record behind. (pack() keeps a message's
        # jobs alike in this.)
        clear = again or self._clears(jobs[0])
        if again or check:
            job_ctx = self.resent_clear_wire if clear else self.resent_wire
        else:
            job_ctx = self.ctx_clear_wire if clear else self.ctx_wire
        one = len(jobs) == 1
        # argsrepr: Flower shows the job key; Celery would otherwise saferepr() the whole job for every message,
        # ~15% of the coordinator's CPU per job.
        self.app.send_task(
            TASK_NAME if one else BATCH_TASK,
            args=[jobs[0].to_dict() if one else [j.to_dict() for j in jobs], job_ctx],
            task_id=tid,
            queue=self.queue,
            producer=producer,
            argsrepr=f"[{jobs[0].key!r}]" if one else f"[{len(jobs)} jobs from {jobs[0].key!r}]",
            kwargsrepr="{}",
        )
        self.pending[tid] = (jobs, self.backend.get_key_for_task(tid))
        self.n_jobs += len(jobs)

    def _clears(self, job: Job) -> bool:
        return job.key in self.clear_failures

    def send_batch(
        self, jobs: list[Job], producer: Any, again: bool = False, per_message: int = 0, check: bool = False
    ) -> None:
        """`jobs` in messages of `per_message` jobs (0: the plan's), pipelined (again, check: as `send`)."""
        with _pipelined(producer, self.batch_size):
            for message in pack(jobs, per_message or self.per_message, self._clears):
                self.send(message, producer, again, check)

    def poll(self) -> None:
        """One MGET for the pending results (see WINDOW); finished jobs are reported and their entries deleted."""
        if not self.pending:
            return
        self.ticks += 1
        ids = (
            list(self.pending) if self.ticks % 10 == 0 else list(itertools.islice(self.pending, self.WINDOW))
        )
        keys = [self.pending[t][1] for t in ids]
        values = self.backend.mget(keys)
        finished: list[bytes] = []
        deferred: list[Job] = []
        for tid, key, raw in zip(ids, keys, values, strict=True):
            if raw is None:
                continue
            what, payload = _read_back(self.backend.decode_result(raw))
            if what == "running" or what == "retry":
                self._note_retry(tid, payload if what == "retry" else None)
                continue
            jobs = self.pending.pop(tid)[0]
            self.n_jobs -= len(jobs)
            deferred.extend(self._finished(jobs, what, payload))
            finished.append(key)
        if finished and self.budget is not None:
            floor_budget(self.app, self.budget[0], self.budget[1] + self.seen_tokens)
        if finished:
            # One DEL per poll, not one round trip per finished job.
            self.backend.client.delete(*finished)
        if deferred:  # jobs a batch did not start (it ran out of time): one message each now
            # With a ledger check: a copy of the batch delivered again (after its lease) may run one of them
            # meanwhile; it checks the ledger as every redelivered message does, and so must the job sent again.
            with self.app.producer_or_acquire() as producer:
                self.send_batch(deferred, producer, per_message=1, check=True)

    def _finished(self, jobs: tuple[Job, ...], what: str, payload: Any) -> list[Job]:
        """Report a finished message's jobs ("result" or "failure"); the jobs of a batch it did not start."""
        deferred: list[Job] = []
        if what == "failure":
            summaries = [_failed(j.key, f"worker error: {payload}") for j in jobs]
        elif len(jobs) == 1:
            summaries = [payload]
        else:
            summaries, deferred = read_batch(payload, jobs, _failed)
        for summary in summaries:
            self.on_result(summary)
            self.seen_tokens += int(summary.get("tokens") or 0) + int(summary.get("est_tokens") or 0)
        return deferred

    def _note_retry(self, tid: str, meta: dict[str, Any] | None) -> None:
        """Report a job's retry once per attempt (the backend shows the same RETRYING meta on every poll)."""
        if meta is not None and self.on_retry and self.retry_seen.get(tid) != meta:
            self.retry_seen[tid] = meta
            key = meta.get("key")
            self.on_retry(
                key if isinstance(key, str) else self.pending[tid][0][0].key,
                int(meta.get("attempt", 1)),
                str(meta.get("class")),
            )

    def resend_if_lost(self) -> None:
        """After an outage: if Redis lost its data, the queued messages and results are gone — enqueue the
        pending jobs again. Safe if some did run: workers skip jobs already in the ledger."""
        if self.backend.client.exists(self.marker):
            return
        lost = [job for jobs, _ in self.pending.values() for job in jobs]
        self.pending.clear()
        self.n_jobs = 0
        with self.app.producer_or_acquire() as producer:
            self.send_batch(lost, producer, again=True)
        self.mark_alive()
        if self.notice:
            self.notice(f"the broker came back empty: enqueued {len(lost)} unfinished jobs again")

    def patient_poll(self, broker_patience_s: float) -> None:
        """poll(), riding out a broker restart: the results wait in Redis, so reconnect and read them later."""
        import redis.exceptions
        from kombu.exceptions import OperationalError

        try:
            if self.broker_down_since:
                self.resend_if_lost()
            self.poll()
            self.broker_down_since.clear()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OperationalError) as e:
            if not self.broker_down_since:
                self.broker_down_since.append(time.monotonic())
                if self.notice:
                    self.notice(f"lost the broker ({type(e).__name__}); reconnecting")
            if time.monotonic() - self.broker_down_since[0] > broker_patience_s:
                raise
            # One coordinator, so no herd to spread: the ceiling itself, not a jittered draw.
            time.sleep(backoff_ceiling(int(time.monotonic() - self.broker_down_since[0]) + 1, 0.2, 2.0))


@dataclasses.dataclass(frozen=True)
class _Pace:
    """How the coordinator paces a sweep: seconds between polls, how long a broker outage is waited out, after how
    long without a finished job it says why, and how many jobs may be enqueued and unfinished at once."""

    poll_s: float
    broker_patience_s: float
    idle_notice_s: float
    max_pending: int


def _enqueue_all(
    out: _Outstanding, jobs: Iterable[Job], pace: _Pace, should_stop: Callable[[], bool]
) -> None:
    """Send the jobs in pipelined batches, never more than `pace.max_pending` unfinished at once."""
    stream = iter(jobs)
    with out.app.producer_or_acquire() as producer:
        while not should_stop():
            batch = list(itertools.islice(stream, max(1, out.batch_size)))
            if not batch:
                break
            out.send_batch(batch, producer)
            del batch
            out.poll()
            while out.n_jobs >= pace.max_pending and not should_stop():
                time.sleep(pace.poll_s)
                out.patient_poll(pace.broker_patience_s)
                out.check_consumers()
                out.tick()


def _drain(out: _Outstanding, pace: _Pace, cancel_when: Callable[[], bool] = lambda: False) -> None:
    """Follow the enqueued jobs until every one has finished; say once if none finishes for a while. Once
    cancel_when() is true (a budget cap reached), the queued jobs are cancelled: workers skip them."""
    last_change, last_pending, told, cancelled = time.monotonic(), out.n_jobs, False, False
    while out.pending:
        time.sleep(pace.poll_s)
        out.patient_poll(pace.broker_patience_s)
        out.tick()
        if not cancelled and cancel_when():
            cancelled = True
            _cancel_queued(out.app, out.run_ids, out.n_jobs, out.notice)
        out.check_consumers()
        if out.n_jobs != last_pending:
            last_change, last_pending = time.monotonic(), out.n_jobs
        elif out.notice and not told and time.monotonic() - last_change > pace.idle_notice_s:
            told = True
            out.notice(_idle_message(out, pace.idle_notice_s))


def _idle_message(out: _Outstanding, idle_s: float) -> str:
    """Why no job finished for a while. With live workers on the queue (their heartbeats) it is not a missing
    worker: the provider is slow, rate-limiting (a Retry-After pause) or down (waited out within the profile's
    patience), and the summary's weather line will say which."""
    alive = out.watch.alive(out.queue) if out.watch is not None else 0
    if alive:
        return (
            f"no job finished in {idle_s:.0f}s though {alive} worker process(es) consume queue {out.queue!r}: "
            "the provider is slow, rate-limiting or down (workers wait a rate limit or an outage out, up to the "
            "profile's patience); the summary's weather line tells"
        )
    return (
        f"no job finished in {idle_s:.0f}s: is a worker consuming queue {out.queue!r} on this broker "
        f"(`ept worker --queue {out.queue}`), and, for code tasks, a grader on the grade queue? The sweep "
        "stops if either has work and no consumer for EPT_NO_CONSUMER_S (60 s)"
    )


def _weather_reports(app: Any, weather: tuple[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """The workers' weather reports for the sweep's profile (contracts.weather); None when unreadable."""
    from elo_per_token.contracts.weather import read_reports

    if weather is None:
        return None
    try:
        return read_reports(broker_redis(app), weather[0])
    except Exception:  # the broker gone at the very end: the summary has no weather line, the sweep is fine
        return None


def _report_weather(
    app: Any, weather: tuple[str, Callable[[dict[str, Any]], None]] | None, before: dict[str, Any] | None
) -> None:
    """Pass the workers' provider weather over this sweep (their reports now less `before`) to the sink."""
    if weather is not None and before is not None and (after := _weather_reports(app, weather)) is not None:
        weather[1](sweep_weather(before, after))


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops the coordinator like Ctrl-C while the block runs (in the main thread, where signals are
    handled): the run's queued jobs are cancelled, not left to run unobserved."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    prev = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, prev)


def _stop_queued(app: Any, ctx: CeleryJobContext, out: _Outstanding, why: BaseException) -> None:
    """The sweep stops before its jobs ran (Ctrl-C, SIGTERM, or a queue nobody consumes): the queued jobs are
    cancelled, so they do not start later and spend on a sweep nobody follows. A stalled queue is recorded in the
    ledger too, where `ept status` says why the run stopped."""
    if isinstance(why, QueueStalled):
        _cancel_queued(app, out.run_ids, out.n_jobs, None)
        _record_stop(ctx.ledger, out.run_ids, why.message)
    else:
        _cancel_queued(app, out.run_ids, out.n_jobs, out.notice)


def _close(
    app: Any, ctx: CeleryJobContext, out: _Outstanding, finished: bool, weather: Any, before: Any
) -> None:
    """After the sweep, however it ended: journals of calls nobody finished recovered, the weather reported, the
    broker connection closed."""
    _recover_journals(app, ctx.ledger, out.run_ids, out.notice, finished)
    _report_weather(app, weather, before)
    app.close()


def _start(
    out: _Outstanding, app: Any, weather: tuple[str, Any] | None, budget: tuple[str, int] | None
) -> dict[str, dict[str, Any]] | None:
    """First contact with the broker, then the workers' weather reports at the start (None: unreadable) and the
    run's spend counter: (run id, spent by earlier sessions), from which workers count the run's spend."""
    _first_contact(out.mark_alive, app)
    before = _weather_reports(app, weather)
    if budget is not None:
        start_budget(app, *budget)
        out.budget = budget
    return before


def run_celery(
    jobs: Iterable[Job],
    ctx: CeleryJobContext,
    *,
    queue: str,
    batch_size: int,
    on_result: Callable[[JobSummary], None],
    on_retry: Callable[[str, int, str], None] | None = None,
    broker_url: str | None = None,
    poll_s: float = 0.1,
    should_stop: Callable[[], bool] = lambda: False,
    notice: Callable[[str], None] | None = None,
    idle_notice_s: float = 20.0,
    broker_patience_s: float = 180.0,
    clear_failures: Collection[str] = (),
    max_pending: int = 50_000,
    cancel_when: Callable[[], bool] = lambda: False,
    budget: tuple[str, int] | None = None,
    watch_consumers: bool = True,
    weather: tuple[str, Callable[[dict[str, Any]], None]] | None = None,
    on_outage: Callable[[str | None], None] | None = None,
    per_message: int = 1,
) -> bool:
    """Enqueue `jobs` (any iterable: a million-job plan is streamed) in pipelined batches and follow them.
    weather: (profile, sink): the workers' provider weather over this sweep is passed to sink at the end.
    on_outage: called about once a second with the outage the workers of that profile are waiting out now
    ("provider unreachable since 12:03:10, waiting (patience 10 min)"), or None.
    At most `max_pending` jobs are enqueued and unfinished at once (memory and the broker's queue stay bounded,
    workers' queue full), `per_message` per message (the plan's jobs_per_message; coordinator.celery_batches)."""
    from elo_per_token.worker.celery_app import make_app

    app = make_app(broker_url)
    out = _Outstanding(
        app,
        ctx,
        queue=queue,
        batch_size=batch_size,
        on_result=on_result,
        on_retry=on_retry,
        notice=notice,
        clear_failures=clear_failures,
        per_message=per_message,
    )
    out.watch = redis_watch(app, queue, window_s()) if watch_consumers else None
    out.outage_note = _OutageNote(app, weather[0], on_outage) if weather and on_outage else None
    pace = _Pace(poll_s, broker_patience_s, idle_notice_s, max_pending)
    before, finished = None, False
    with _sigterm_interrupts():
        try:
            before = _start(out, app, weather, budget)
            _enqueue_all(out, jobs, pace, should_stop)
            _drain(out, pace, cancel_when)
            finished = True  # every job answered: a journal's holder can only be dead (its lease runs out)
            # Stopped early (egress broken) unless every job was sent before it tripped.
            return not should_stop()
        except (KeyboardInterrupt, QueueStalled) as e:
            _stop_queued(app, ctx, out, e)
            raise
        finally:
            _close(app, ctx, out, finished, weather, before)
