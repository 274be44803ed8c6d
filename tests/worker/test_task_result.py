"""A job stores its own Celery result entry in its claim's release round trip (issue 39: worker.celery_job.
TaskResult) instead of Celery's two round trips after the task returns. The entry must be exactly what Celery's
backend would have written and read back (status, summary, publish to subscribers, expiry), an earlier SUCCESS
must be kept as Celery keeps it, and whatever else the broker holds under the key must neither raise nor stop
the claim's release."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_claims import _HOSTILE, _put

from elo_per_token.contracts.jobs import Job
from elo_per_token.worker.celery_app import make_app, results_with_claims
from elo_per_token.worker.celery_job import Claims, JobSettings
from elo_per_token.worker.task_result import TaskResult

pytestmark = pytest.mark.services


def _job() -> Job:
    task = {"task_id": f"math-{uuid.uuid4().hex[:8]}", "family": "math"}
    return Job(run_id="results", task=task, strategy="greedy", budget_n=1)


def _summary(job: Job, status: str = "done") -> dict:
    return {"key": job.key, "status": status, "calls": 1, "tokens": 42, "class": None, "message": None}


def test_claims_on_the_result_backend_store_the_result_themselves():
    broker = "redis://h:6379/0"
    assert results_with_claims(broker, broker, JobSettings())
    # Claims elsewhere (EPT_RATELIMIT_URL), or results elsewhere (EPT_RESULT_BACKEND): Celery stores it.
    assert not results_with_claims(broker, broker, JobSettings(ratelimit_url="redis://other:6379/0"))
    assert not results_with_claims(broker, "redis://results:6379/0", JobSettings())
    assert results_with_claims(broker, "redis://rl:1/2", JobSettings(ratelimit_url="redis://rl:1/2"))
    # A broker that is not Redis: the claims are on EPT_BROKER_URL's Redis, if that is the backend.
    assert results_with_claims("amqp://mq//", "redis://b:1/0", JobSettings(env_broker="redis://b:1/0"))
    assert not results_with_claims("amqp://mq//", "rpc://", JobSettings(env_broker="rpc://"))
    assert not results_with_claims("amqp://mq//", "redis://b:1/0", JobSettings())


def _release_with_result(r, app, job: Job, tid: str, summary: dict) -> bool:
    claims = Claims(r, "host-r")
    assert claims.acquire(job)
    marker = (f"ept:ran:{tid}", json.dumps(summary), 60)
    ok = claims.release(job, marker, [], TaskResult(app.backend, tid, summary))
    assert r.get(Claims.key(job)) is None  # released whatever happened to the result
    return ok


def test_the_entry_is_celerys_own_read_back_and_published(redis_server):
    r = redis_server.client()
    app = make_app(redis_server.url)
    job, tid = _job(), f"results:{uuid.uuid4().hex}"
    pubsub = r.pubsub()
    pubsub.subscribe(app.backend.get_key_for_task(tid))
    assert pubsub.get_message(timeout=2)["type"] == "subscribe"
    summary = _summary(job)
    assert _release_with_result(r, app, job, tid, summary)
    meta = app.backend.get_task_meta(tid)
    assert meta["status"] == "SUCCESS" and meta["result"] == summary and meta["task_id"] == tid
    assert app.AsyncResult(tid).get(timeout=5) == summary  # what a caller waiting on the task sees
    published = pubsub.get_message(timeout=2)
    assert published is not None and app.backend.decode_result(published["data"])["result"] == summary
    ttl = r.ttl(app.backend.get_key_for_task(tid))
    assert 7 * 24 * 3600 - 60 < ttl <= 7 * 24 * 3600  # Celery's result_expires, as make_app sets it
    app.close()


def test_an_earlier_success_is_kept_other_states_are_replaced(redis_server):
    r = redis_server.client()
    app = make_app(redis_server.url)
    job, tid = _job(), f"results:{uuid.uuid4().hex}"
    app.backend.store_result(tid, {"attempt": 1, "class": "transient"}, "RETRYING")
    assert _release_with_result(r, app, job, tid, _summary(job))
    assert app.backend.get_task_meta(tid)["result"]["status"] == "done"
    # A redelivered copy's later entry (say "skipped") does not overwrite the first delivery's SUCCESS.
    assert _release_with_result(r, app, job, tid, _summary(job, "skipped"))
    assert app.backend.get_task_meta(tid)["result"]["status"] == "done"
    app.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    held=st.one_of(
        _HOSTILE,
        st.tuples(
            st.just("string"), st.sampled_from([b'{"status": "SUCCESS"', b"[1,2]", b"null", b'"SUCCESS"'])
        ),
        st.tuples(st.just("string"), st.binary(min_size=1, max_size=2000).map(lambda b: b'{"status": ' + b)),
    )
)
def test_whatever_the_key_holds_the_result_is_stored_and_the_claim_released(redis_server, held):
    """Anything with the broker's password can put anything under a task's result key: another type, bytes
    that are not JSON, JSON that is not an object. Unless it is Celery's SUCCESS entry, the job's entry replaces
    it; nothing raises, and the release's round trip stays bounded."""
    r = redis_server.client()
    app = make_app(redis_server.url)
    job, tid = _job(), f"results:{uuid.uuid4().hex}"
    _put(r, app.backend.get_key_for_task(tid).decode(), held)
    summary = _summary(job)
    assert bounded(lambda: _release_with_result(r, app, job, tid, summary), 2.0, 20)
    assert app.backend.get_task_meta(tid)["result"] == summary
    app.close()


def test_a_broker_gone_at_the_release_leaves_the_result_to_celery(redis_server, tmp_path):
    """The release's round trip fails (the broker went away): it says the result was not stored, so the task
    stores it through Celery's backend, which retries until the broker is back."""
    from fixtures_services import start_redis, stop_proc

    dead = start_redis(tmp_path / "dead")
    r = dead.client()
    app = make_app(redis_server.url)
    job, tid = _job(), f"results:{uuid.uuid4().hex}"
    claims = Claims(r, "host-x")
    assert claims.acquire(job)
    stop_proc(dead.proc)
    t0 = time.monotonic()
    assert not claims.release(job, None, [], TaskResult(app.backend, tid, _summary(job)))
    assert time.monotonic() - t0 < 10
    TaskResult(app.backend, tid, _summary(job)).store_by_celery()
    assert app.backend.get_task_meta(tid)["result"]["status"] == "done"
    app.close()
