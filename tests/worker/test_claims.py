"""Job leases in Redis (worker.celery_job.Claims) against a real redis-server."""

from __future__ import annotations

import time
import uuid

import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.jobs import Job
from elo_per_token.worker.celery_job import Claims

pytestmark = pytest.mark.services


def _job(task: str = "math-001") -> Job:
    return Job(run_id="claims", task={"task_id": task, "family": "math"}, strategy="greedy", budget_n=1)


def test_one_holder_at_a_time_and_release_frees_it(redis_server):
    r = redis_server.client()
    a, b = Claims(r, "host-a"), Claims(r, "host-b")
    job = _job()
    assert a.acquire(job)
    assert not b.acquire(job)  # another worker's duplicate delivery waits
    assert not a.acquire(job)  # so does a second thread of the same worker
    assert b.acquire(_job("math-002"))  # other jobs are independent
    a.release(job)
    assert r.get(Claims.key(job)) is None
    assert b.acquire(job)


def test_a_late_release_never_deletes_a_later_holders_lease(redis_server):
    r = redis_server.client()
    a, b = Claims(r, "host-a", ttl_ms=300), Claims(r, "host-b")
    job = _job("math-003")
    assert a.acquire(job)
    r.delete(Claims.key(job))  # a's lease is gone (as if it expired while a was stalled)
    assert b.acquire(job)
    a.release(job)
    assert r.get(Claims.key(job)) is not None and r.get(Claims.key(job)).decode().startswith("host-b")


def test_held_leases_are_renewed_and_a_dead_holders_lease_expires(redis_server):
    r = redis_server.client()
    live = Claims(r, "host-live", ttl_ms=400)
    job = _job("math-004")
    assert live.acquire(job)
    time.sleep(1.2)  # three lease lengths: only renewal keeps it
    assert r.pttl(Claims.key(job)) > 0
    live.release(job)

    dead = Claims(r, "host-dead", ttl_ms=400)
    job2 = _job("math-005")
    assert dead.acquire(job2)
    dead._held.clear()  # what a dead process renews: nothing
    time.sleep(0.8)
    assert r.get(Claims.key(job2)) is None
    assert Claims(r, "host-next").acquire(job2)


# ---- Reads in the claim's round trip, the ran marker with the release, the weather written when it changed
# (issue 39: a Celery job's Redis round trips) -------------------------------------------------------------


def test_claim_reads_come_back_with_the_claim_and_only_count_when_it_was_taken(redis_server):
    from elo_per_token.worker.journal import journal_set_key

    r = redis_server.client()
    job = _job(f"math-{uuid.uuid4().hex[:6]}")
    jset, ran = journal_set_key(job.run_id, job.key), f"ept:ran:{uuid.uuid4().hex}"
    r.sadd(jset, "a1", "a2")
    r.set(ran, b'{"x": 1}')
    reads = [("smembers", jset), ("get", ran)]
    a, b = Claims(r, "host-a"), Claims(r, "host-b")
    taken, values = a.acquire_reading(job, reads)
    assert taken and values == [{b"a1", b"a2"}, b'{"x": 1}']
    assert r.get(Claims.key(job)).decode().startswith("host-a")
    assert b.acquire_reading(job, reads)[0] is False  # held: the other delivery's reads are not to be used
    a.release(job)
    assert b.acquire_reading(job)[0] and b.acquire_reading(_job("other"), [])[0]


def test_the_ran_marker_is_set_in_the_releases_round_trip_before_the_claim_goes(redis_server):
    r = redis_server.client()
    job = _job(f"math-{uuid.uuid4().hex[:6]}")
    a, b = Claims(r, "host-a"), Claims(r, "host-b")
    assert a.acquire(job)
    marker = f"ept:ran:{uuid.uuid4().hex}"
    a.release(job, (marker, '{"status": "done"}', 60))
    assert r.get(marker) == b'{"status": "done"}' and 0 < r.ttl(marker) <= 60
    assert r.get(Claims.key(job)) is None
    # Not the holder (its lease ran out and another took it): the marker is still set, the other's lease stays.
    assert a.acquire(job)
    r.delete(Claims.key(job))
    assert b.acquire(job)
    a.release(job, (marker + "2", "{}", 60))
    assert r.get(marker + "2") == b"{}" and r.get(Claims.key(job)).decode().startswith("host-b")


class _Weather:
    """A provider's weather() as the worker reports it (egress.client.ProviderClient.weather)."""

    def __init__(self) -> None:
        self.doc = {"rate_limited": 0, "pauses": 0, "retries": {}}

    def weather(self) -> dict:
        return dict(self.doc)


def test_an_unchanged_weather_report_is_not_written_again_a_changed_one_is(redis_server):
    from elo_per_token.contracts.weather import read_reports, weather_key
    from elo_per_token.worker.celery_job import _report_weather

    r = redis_server.client()
    claims, prov, profile = Claims(r, f"host-{uuid.uuid4().hex[:6]}"), _Weather(), f"p-{uuid.uuid4().hex[:6]}"
    _report_weather(claims, profile, prov)
    assert read_reports(r, profile)[claims.owner] == prov.doc
    r.delete(weather_key(profile))  # so a second write would show
    _report_weather(claims, profile, prov)
    assert read_reports(r, profile) == {}  # same report: no round trip
    prov.doc["rate_limited"] = 1
    _report_weather(claims, profile, prov)
    assert read_reports(r, profile)[claims.owner]["rate_limited"] == 1


_HOSTILE = st.one_of(
    st.none(),
    st.tuples(st.just("string"), st.binary(max_size=200)),
    st.tuples(st.just("list"), st.lists(st.binary(max_size=50), min_size=1, max_size=5)),
    st.tuples(st.just("hash"), st.dictionaries(st.binary(min_size=1, max_size=20), st.binary(max_size=50), min_size=1, max_size=5)),
    st.tuples(st.just("set"), st.sets(st.text(alphabet="abcdef0123456789-_", min_size=1, max_size=40), min_size=1, max_size=5)),
)  # fmt: skip


def _put(r, key: str, value) -> None:
    r.delete(key)
    if value is None:
        return
    kind, v = value
    {"string": lambda: r.set(key, v), "list": lambda: r.rpush(key, *v), "hash": lambda: r.hset(key, mapping=v),
     "set": lambda: r.sadd(key, *v)}[kind]()  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jset=_HOSTILE, ran=_HOSTILE)
def test_whatever_the_broker_holds_under_the_claims_reads_the_claim_is_taken_and_nothing_raises(
    redis_server, tmp_path, jset, ran
):
    """Anything with the broker's password can put anything under a job's journal set or a message's ran
    marker (another type, garbage members): the claim is still taken in its round trip, the journal's recovery
    and the ran marker's reading shrug it off (a recovered journal is empty: nothing is written), fast."""
    from elo_per_token.ledger import open_ledger
    from elo_per_token.worker.celery_job import _claim_reads, _ran_key, _ran_summary
    from elo_per_token.worker.journal import CallJournal, journal_set_key

    r = redis_server.client()
    job = _job(f"math-{uuid.uuid4().hex[:8]}")
    tid = uuid.uuid4().hex
    _put(r, journal_set_key(job.run_id, job.key), jset)
    _put(r, _ran_key(tid), ran)
    claims, ledger = Claims(r, "host-h"), open_ledger(tmp_path / "ledger")

    def one() -> tuple[bool, int, object]:
        taken, (members, raw) = claims.acquire_reading(job, _claim_reads(job, tid))
        recovered = CallJournal(r).recover(ledger, job, members)
        return taken, recovered, _ran_summary(raw, job)

    taken, recovered, summary = bounded(one, time_s=2.0, memory_mb=20)
    claims.release(job)
    assert taken and recovered == 0 and summary is None
    assert not (tmp_path / "ledger").exists() or not list((tmp_path / "ledger").rglob("spent/*"))
