"""Provider weather shared by Celery workers (issue 38), on a real Redis: the provider's stated room
(worker.headroom_redis) is spent once by all workers of a profile, not once by each; and the workers' weather
reports (contracts.weather) add up to the sweep's weather, whatever the broker holds."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from bounds import bounded
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.weather import read_reports, report, sweep_weather, weather_key
from elo_per_token.worker.ratelimit import Limits, RedisRateLimiter


def _pair(redis_server, limits: Limits) -> list[RedisRateLimiter]:
    import redis

    name = "rl-room-" + uuid.uuid4().hex[:6]
    return [RedisRateLimiter(redis.Redis.from_url(redis_server.url), name, limits) for _ in range(2)]


@pytest.mark.services
def test_the_stated_room_is_spent_once_by_two_workers(redis_server):
    """The provider says 10 requests are left (reset in 1 s); two workers with 8 threads each want 16 at once.
    Each worker kept the room to itself before (20 sent into a window with 10 left): now 10 go at once and the
    rest wait for the reset (a probe) or for replies restating the room."""
    a, b = _pair(redis_server, Limits())  # no limits configured: only the stated room holds senders back
    a.observe({"x-ratelimit-remaining-requests": "10", "x-ratelimit-reset-requests": "1s"})
    sent: list[float] = []
    lock = threading.Lock()
    t0 = time.monotonic()

    def send(lim: RedisRateLimiter) -> None:
        lim.acquire(0)
        with lock:
            sent.append(time.monotonic() - t0)

    ts = [threading.Thread(target=send, args=(lim,)) for lim in (a, b) for _ in range(8)]
    for t in ts:
        t.start()
    time.sleep(0.5)
    assert len(sent) == 10, sent  # the room, once; nothing in flight has replied yet
    b.observe({"x-ratelimit-remaining-requests": "50"})  # a reply on worker b restates the room
    for t in ts:
        t.join(3)
    assert len(sent) == 16
    for lim in (a, b):
        lim.record(0, 0)


@pytest.mark.services
def test_workers_weather_reports_add_up_to_the_sweep_s(redis_server):
    r = redis_server.client()
    prof = "wx-" + uuid.uuid4().hex[:6]
    report(r, prof, "w1", {"rate_limited": 2, "pauses": 2, "limiter_wait_s": 3.0, "retries": {"rate_limit": 2},
                           "retry_wait_s": 0.0, "outages": 1, "outage_s": 10.0})  # fmt: skip
    before = read_reports(r, prof)
    report(r, prof, "w1", {"rate_limited": 5, "pauses": 3, "limiter_wait_s": 4.5, "retries": {"rate_limit": 5,
                           "unreachable": 4}, "retry_wait_s": 1.0, "outages": 2, "outage_s": 55.0})  # fmt: skip
    report(r, prof, "w2", {"rate_limited": 1, "pauses": 1, "limiter_wait_s": 0.5, "retries": {"unreachable": 3},
                           "retry_wait_s": 0.0, "outages": 1, "outage_s": 44.0})  # fmt: skip
    r.hset(weather_key(prof), "junk", b"\xff{not json")
    w = sweep_weather(before, read_reports(r, prof))
    assert w["rate_limited"] == 4 and w["pauses"] == 2 and w["limiter_wait_s"] == pytest.approx(2.0)
    assert w["retries"] == {"rate_limit": 3, "unreachable": 7}
    assert w["outages"] == 1 and w["outage_s"] == pytest.approx(45.0)  # one outage both saw, not two


_field = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                   st.text(max_size=20), st.lists(st.integers(), max_size=3))  # fmt: skip
_doc = st.dictionaries(
    st.sampled_from(["rate_limited", "pauses", "limiter_wait_s", "retry_wait_s", "outages", "outage_s", "retries", "x"]),
    _field | st.dictionaries(st.text(max_size=50), _field, max_size=20),
    max_size=8,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.text(max_size=10), _doc, max_size=6),
    st.dictionaries(st.text(max_size=10), _doc, max_size=6),
)
def test_any_reports_give_a_finite_non_negative_weather_in_bounded_time(before, after):
    """The broker may hold anything (a forged or corrupt report): the sweep's weather is still numbers >= 0."""
    from elo_per_token.coordinator.weather import weather_line

    w = bounded(lambda: sweep_weather(before, after), 0.5, 8)
    for k in ("rate_limited", "pauses", "limiter_wait_s", "retry_wait_s", "outages", "outage_s"):
        assert 0 <= w[k] < 1e16, (k, w)
    assert all(isinstance(n, int) and n >= 0 for n in w["retries"].values())
    line = weather_line(json.loads(json.dumps(w)))
    assert line is None or "\n" not in line


def test_a_stall_with_live_workers_is_not_blamed_on_a_missing_worker():
    """During a Retry-After pause or an outage every worker waits: the notice said "is a worker consuming
    queue 'ept'?" (issue 38); with workers' heartbeats on the queue it points at the provider instead."""
    from types import SimpleNamespace

    from elo_per_token.coordinator.celery_exec import _idle_message

    live = SimpleNamespace(queue="ept", watch=SimpleNamespace(alive=lambda q: 2 if q == "ept" else 0))
    msg = _idle_message(live, 20)  # type: ignore[arg-type]
    assert "2 worker process(es) consume queue 'ept'" in msg and "is a worker consuming" not in msg
    none = SimpleNamespace(queue="ept", watch=SimpleNamespace(alive=lambda q: 0))
    assert "is a worker consuming queue 'ept'" in _idle_message(none, 20)  # type: ignore[arg-type]


_JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True), st.integers(), st.text(max_size=60)),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=10), c, max_size=5),
    max_leaves=12,
)
_REPORT = st.one_of(
    _JSONISH,
    st.fixed_dictionaries({"since": st.floats(allow_nan=True), "seen": st.floats(allow_nan=True),
                           "patience": st.floats(allow_nan=True), "what": st.text(max_size=80)}),
)  # fmt: skip


@pytest.mark.services
@settings(max_examples=60, deadline=None, derandomize=True)
@given(reports=st.lists(st.one_of(_REPORT.map(json.dumps), st.binary(max_size=80)), max_size=8))
def test_any_outage_reports_read_back_as_a_sane_note_or_none(redis_server, reports):
    """contracts.weather.read_outage over whatever the broker holds: None or a fresh report with a finite start,
    a patience and a kind of letters only (it reaches a terminal), the earliest start; bounded."""
    from elo_per_token.contracts.weather import outage_key, read_outage

    r = redis_server.client()
    profile = f"p{uuid.uuid4().hex[:8]}"
    for i, v in enumerate(reports):
        r.hset(outage_key(profile), f"w{i}", v)
    now = time.time()
    got = bounded(lambda: read_outage(r, profile, now), 2.0, 20)
    r.delete(outage_key(profile))
    if got is not None:
        assert all(c.isalnum() or c in " ?" for c in got["what"]) and len(got["what"]) <= 40
        assert 0 <= got["patience"] < 1e7 and got["since"] == got["since"]  # finite: not NaN


@pytest.mark.services
def test_an_outage_report_is_shown_while_fresh_and_cleared_when_the_provider_answers(redis_server):
    """A worker's Outage reports an outage's start to the broker, and its end; a report nobody refreshes (the
    worker died mid-outage) stops being shown after OUTAGE_FRESH_S."""
    from elo_per_token.contracts.weather import OUTAGE_FRESH_S, read_outage, report_outage
    from elo_per_token.egress.errors import ProviderError
    from elo_per_token.egress.outage import Outage, SharedReach

    r = redis_server.client()
    profile = f"p{uuid.uuid4().hex[:8]}"
    out = Outage(patience=600, profile=profile, shared=SharedReach(r, profile, "http://x"))
    out.note(None, False)  # reached once: a failed connect is an outage from now on
    assert read_outage(r, profile) is None
    out.note(ProviderError("unreachable", "connection refused"), False)
    seen = read_outage(r, profile)
    assert seen is not None and seen["what"] == "unreachable" and seen["patience"] == 600
    assert abs(seen["since"] - time.time()) < 5
    out.note(None, True)  # the probe answered: over
    assert read_outage(r, profile) is None
    report_outage(
        r, profile, "dead-worker", {"since": time.time() - 100, "what": "unreachable", "patience": 60}
    )
    assert read_outage(r, profile) is not None
    assert read_outage(r, profile, now=time.time() + OUTAGE_FRESH_S + 1) is None
