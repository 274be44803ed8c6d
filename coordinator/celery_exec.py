"""The Celery executor: enqueue jobs by task NAME in batches, then follow them through the result backend.

The coordinator does not import the worker's task code: messages name `ept.run_job` and carry the job (plain
JSON) and a context (ledger URL, endpoint override, rate limits). Progress comes from the result backend with
one MGET per poll for all outstanding jobs; the results themselves are in the ledger.
If the coordinator is interrupted, enqueued jobs keep running on the workers; a rerun skips what has landed.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable
from typing import Any

from elo_per_token.contracts.jobs import Job

TASK_NAME = "ept.run_job"


def _failed(job_key: str, message: str) -> dict[str, Any]:
    return {"key": job_key, "status": "failed", "class": "transient", "message": message, "calls": 0, "tokens": 0}


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
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.AuthenticationError,
            redis.exceptions.ResponseError, OperationalError) as e:  # fmt: skip
        url = mask_url(str(app.conf.broker_url))
        raise InputError(
            f"cannot use the broker at {url}: {type(e).__name__}: {mask_url(str(e))} — start Redis there, or point "
            "EPT_BROKER_URL (and EPT_RESULT_BACKEND) at a running one; `ept sweep --executor local` needs no broker",
            field="EPT_BROKER_URL",
        ) from None


def _raise_interrupt(_sig: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _broker_redis(app: Any) -> Any:
    import redis

    return redis.Redis.from_url(str(app.conf.broker_url))


def _cancel_queued(app: Any, run_ids: set[str], n_pending: int, notice: Callable[[str], None] | None) -> None:
    """Ctrl-C/SIGTERM: the queued messages of this run must not start. Workers check the run's cancel key before
    a job's first API call; jobs already running finish and reach the ledger."""
    from elo_per_token.contracts.jobs import cancel_key

    with contextlib.suppress(Exception):  # the broker may be what failed; stopping must not raise here
        r = _broker_redis(app)
        for rid in run_ids:
            r.set(cancel_key(rid), "1", ex=7 * 24 * 3600)
        if notice:
            notice(f"stopping: {n_pending} queued or running job(s) of this run are cancelled before they start; "
                   "jobs already running finish on the workers")  # fmt: skip


def run_celery(
    jobs: Iterable[Job],
    ctx: dict[str, Any],
    *,
    queue: str,
    batch_size: int,
    on_result: Callable[[dict[str, Any]], None],
    on_retry: Callable[[str, int, str], None] | None = None,
    broker_url: str | None = None,
    poll_s: float = 0.1,
    should_stop: Callable[[], bool] = lambda: False,
    notice: Callable[[str], None] | None = None,
    idle_notice_s: float = 20.0,
    broker_patience_s: float = 180.0,
    clear_failures: Collection[str] = (),
    max_pending: int = 50_000,
) -> bool:
    """Enqueue `jobs` (any iterable: a million-job plan is streamed) in pipelined batches and follow them.

    At most `max_pending` jobs are enqueued and unfinished at once, so the coordinator's memory and the
    broker's queue stay bounded whatever the plan's size; workers still always have a full queue.
    """
    from elo_per_token.worker.celery_app import make_app

    app = make_app(broker_url)
    backend = app.backend
    # task id -> (job, its result-backend key): the job to enqueue again if the broker loses its data, the key
    # built once rather than on every poll.
    pending: dict[str, tuple[Job, bytes]] = {}
    retry_seen: dict[str, Any] = {}
    ticks = 0
    window = 1000
    # A marker in Redis: gone after a broker restart means Redis came back empty (no persistence).
    marker = f"ept:sweep-alive:{uuid.uuid4().hex}"

    def poll() -> None:
        nonlocal ticks
        if not pending:
            return
        # Jobs finish roughly in the order they were sent: most polls read only the oldest `window` pending
        # results; every tenth reads them all, so a job that finishes out of order is seen within a second.
        ticks += 1
        ids = list(pending) if ticks % 10 == 0 else list(itertools.islice(pending, window))
        keys = [pending[t][1] for t in ids]
        values = backend.mget(keys)
        finished = []
        for tid, key, raw in zip(ids, keys, values, strict=True):
            if raw is None:
                continue
            meta = backend.decode_result(raw)
            state, result = meta.get("status"), meta.get("result")
            if state == "SUCCESS":
                on_result(result)
            elif state == "FAILURE":
                msg = result.get("exc_message") if isinstance(result, dict) else str(result)
                on_result(_failed(pending[tid][0].key, f"worker error: {msg}"))
            else:
                if state == "RETRYING" and on_retry and isinstance(result, dict) and retry_seen.get(tid) != result:
                    retry_seen[tid] = result
                    on_retry(pending[tid][0].key, int(result.get("attempt", 1)), str(result.get("class")))
                continue
            pending.pop(tid)
            finished.append(key)
        if finished:
            # One DEL per poll, not one round trip per finished job.
            backend.client.delete(*finished)

    ctx_clear = {**ctx, "clear_failure": True}

    run_ids: set[str] = set()

    def send(job: Job, producer: Any) -> None:
        if job.run_id not in run_ids:  # a new session of the run lifts an earlier session's cancel
            from elo_per_token.contracts.jobs import cancel_key

            run_ids.add(job.run_id)
            _broker_redis(app).delete(cancel_key(job.run_id))
        tid = f"{job.run_id}:{uuid.uuid4().hex}"
        # Only a job with a failure object from an earlier attempt deletes it on success (no blind DELETE).
        job_ctx = ctx_clear if job.key in clear_failures else ctx
        # argsrepr: Flower shows the job key; Celery would otherwise saferepr() the whole job for every message,
        # ~15% of the coordinator's CPU per job.
        app.send_task(TASK_NAME, args=[job.to_dict(), job_ctx], task_id=tid, queue=queue, producer=producer,
                      argsrepr=f"[{job.key!r}]", kwargsrepr="{}")  # fmt: skip
        pending[tid] = (job, backend.get_key_for_task(tid))

    def resend_if_lost() -> None:
        """After an outage: if Redis lost its data, the queued messages and results are gone — enqueue the
        pending jobs again. Safe if some did run: workers skip jobs already in the ledger."""
        if backend.client.exists(marker):
            return
        lost = [job for job, _ in pending.values()]
        pending.clear()
        with app.producer_or_acquire() as producer, _pipelined(producer, batch_size):
            for job in lost:
                send(job, producer)
        backend.client.set(marker, "1", ex=7 * 24 * 3600)
        if notice:
            notice(f"the broker came back empty: enqueued {len(lost)} unfinished jobs again")

    broker_down_since: list[float] = []  # when the current broker outage began (empty = reachable)

    def patient_poll() -> None:
        """poll(), riding out a broker restart: the results wait in Redis, so reconnect and read them later."""
        import redis.exceptions
        from kombu.exceptions import OperationalError

        try:
            if broker_down_since:
                resend_if_lost()
            poll()
            broker_down_since.clear()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OperationalError) as e:
            if not broker_down_since:
                broker_down_since.append(time.monotonic())
                if notice:
                    notice(f"lost the broker ({type(e).__name__}); reconnecting")
            if time.monotonic() - broker_down_since[0] > broker_patience_s:
                raise
            time.sleep(min(2.0, 0.2 * 2 ** min(int(time.monotonic() - broker_down_since[0]), 4)))

    # SIGTERM stops the coordinator like Ctrl-C: the run's queued jobs are cancelled, not left to run unobserved.
    prev_term = None
    if threading.current_thread() is threading.main_thread():
        prev_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        _first_contact(lambda: backend.client.set(marker, "1", ex=7 * 24 * 3600), app)
        stream = iter(jobs)
        with app.producer_or_acquire() as producer:
            while not should_stop():
                batch = list(itertools.islice(stream, max(1, batch_size)))
                if not batch:
                    break
                with _pipelined(producer, batch_size):
                    for job in batch:
                        send(job, producer)
                del batch
                poll()
                while len(pending) >= max_pending and not should_stop():
                    time.sleep(poll_s)
                    patient_poll()
        last_change, last_pending, told = time.monotonic(), len(pending), False
        while pending:
            time.sleep(poll_s)
            patient_poll()
            if len(pending) != last_pending:
                last_change, last_pending = time.monotonic(), len(pending)
            elif notice and not told and time.monotonic() - last_change > idle_notice_s:
                told = True
                notice(
                    f"no job finished in {idle_notice_s:.0f}s: is a worker consuming queue {queue!r} on this broker? "
                    f"(start one with `ept worker --queue {queue}`); enqueued jobs wait on the queue until then"
                )
        return not should_stop()  # stopped early (egress broken) unless every job was sent before it tripped
    except KeyboardInterrupt:
        _cancel_queued(app, run_ids, len(pending), notice)
        raise
    finally:
        if prev_term is not None:
            signal.signal(signal.SIGTERM, prev_term)
        app.close()
