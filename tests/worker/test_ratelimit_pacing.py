"""The limiter paces instead of bursting, over real HTTP: the simulator behind testkit/ratelimit_proxy.py
(a provider counting requests and tokens over sliding 3-s windows (the 10-s mode, shorter), OpenAI's x-ratelimit-* headers and
Retry-After on 429). ept with the limits configured, and ept learning them from the headers, get (almost) no
429s and fewer than the plain openai SDK with 8 threads on the same calls."""

from __future__ import annotations

import threading
import time

import pytest
from bounds import bounded
from hypothesis import given, settings
from hypothesis import strategies as st
from ratelimit_clients import measure

from elo_per_token.worker.ratelimit import Limits, LocalRateLimiter, header_limits, parse_reset

LIMITS = {"rpm": 1200, "tpm": 60000, "window_s": 3.0, "calls": 50}


@pytest.fixture(scope="module")
def slow_sim():
    from elo_per_token.simulator.control import start_in_thread

    s = start_in_thread({"latency_ms": 60, "latency_jitter_ms": 30})
    yield s
    s.stop()


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
def test_ept_paces_under_a_short_window_with_almost_no_429s_and_fewer_than_the_sdk(slow_sim):
    rows = {c: measure(slow_sim.url, c, **LIMITS) for c in ("ept-limits", "ept-headers", "sdk")}  # type: ignore[arg-type]
    sdk = rows["sdk"]["answered_429"]
    assert sdk > 0, rows  # the window is tight enough that an unpaced client is refused: the test can fail
    for c in ("ept-limits", "ept-headers"):
        r = rows[c]
        assert r["answered_429"] <= 0.01 * r["calls"] and r["answered_429"] < sdk, rows
        assert r["of_sustained"] >= 0.8, rows  # paced at the limit, not far below it


def test_a_429_pauses_every_sender_once():
    """Eight threads behind one limiter: one pause (say a 429's Retry-After of 0.4 s) stops all of them."""
    lim = LocalRateLimiter(Limits())
    lim.pause(0.4)
    lim.pause(0.2)  # a second 429 inside the pause does not extend it
    done: list[float] = []
    t0 = time.monotonic()
    ts = [
        threading.Thread(target=lambda: (lim.acquire(0), done.append(time.monotonic() - t0)))
        for _ in range(8)
    ]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(done) == 8 and min(done) >= 0.35 and max(done) < 1.0
    assert lim.stats.rate_limited == 2


def test_the_bucket_holds_a_second_not_a_minute():
    lim = LocalRateLimiter(Limits(rpm=600))  # 10/s: the old bucket admitted 600 at once
    t0 = time.monotonic()
    for _ in range(25):
        lim.acquire(0)
    assert time.monotonic() - t0 >= 1.2  # ~(25 - 10) / 9.7 s


def test_headers_teach_the_limits_and_a_zero_remaining_holds_senders_until_its_reset():
    lim = LocalRateLimiter(Limits())
    lim.observe({"x-ratelimit-limit-requests": "120", "x-ratelimit-limit-tokens": "1000",
                 "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "300ms"})  # fmt: skip
    assert lim.limits == Limits(120, 1000)
    t0 = time.monotonic()
    lim.acquire(0)  # nothing in flight to restate the room: held until the provider's reset, then a probe
    assert 0.25 <= time.monotonic() - t0 < 1.0
    configured = LocalRateLimiter(Limits(rpm=60))
    configured.observe({"x-ratelimit-limit-requests": "120"})
    assert configured.limits == Limits(rpm=60)  # configured limits win
    paced = LocalRateLimiter(Limits(), headroom=False)  # no stated room kept: a remaining of 0 pauses all
    paced.observe({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1s"})
    assert paced.stats.pauses == 1 and paced.stats.rate_limited == 0


def test_room_stated_short_with_nothing_in_flight_sends_one_probe_not_a_bucket_burst():
    """The old limiter let the bucket send a second's worth at once into a window the provider said was spent
    (the 10-s window's 429s): after the reset only one call goes until its reply restates the room."""
    lim = LocalRateLimiter(Limits(rpm=6000))  # the bucket alone would admit ~97 at once
    lim.observe({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "200ms"})
    sent: list[float] = []
    t0 = time.monotonic()
    ts = [
        threading.Thread(target=lambda: (lim.acquire(10), sent.append(time.monotonic() - t0)))
        for _ in range(5)
    ]
    for t in ts:
        t.start()
    time.sleep(0.6)
    assert len(sent) == 1 and sent[0] >= 0.15, (
        sent
    )  # one probe after the reset; the others wait for its reply
    lim.observe({"x-ratelimit-remaining-requests": "10", "x-ratelimit-remaining-tokens": "10000"})
    for t in ts:
        t.join(2)
    assert len(sent) == 5


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([f"x-ratelimit-{a}-{b}" for a in ("limit", "remaining", "reset")
                                        for b in ("requests", "tokens")]),
                       st.text(max_size=60) | st.sampled_from(["0", "1s", "6m0s", "20ms", "1e309", "-5", "99999999999999999999"])))  # fmt: skip
def test_any_ratelimit_headers_are_read_in_bounded_time_and_never_pause_long(headers):
    limits, pauses = bounded(lambda: header_limits(headers), 0.5, 8)
    assert all(0 <= p <= 120 for p in pauses)
    assert all(v is None or v >= 0 for v in (limits.rpm, limits.tpm))
    for v in headers.values():
        r = parse_reset(v)
        assert r is None or r >= 0


def test_the_room_the_provider_states_is_spent_at_once_and_in_flight_tokens_are_counted():
    """x-ratelimit-remaining-* on top of the bucket: 20 requests left are admitted without pacing, the tokens
    of calls in flight are taken off the stated tokens, and a pause forgets the room until a reply restates it."""
    lim = LocalRateLimiter(Limits(rpm=60))  # the bucket alone: one a second
    lim.observe({"x-ratelimit-remaining-requests": "20", "x-ratelimit-remaining-tokens": "100000"})
    t0 = time.monotonic()
    for _ in range(20):
        lim.acquire(100)
    assert time.monotonic() - t0 < 0.5  # the bucket would have taken ~19 s
    assert lim.headroom is not None and lim.headroom.inflight_tok == 2000
    time.sleep(0.3)  # past RECENT_S: the provider has seen those requests (else they are taken off again)
    lim.observe({"x-ratelimit-remaining-requests": "5", "x-ratelimit-remaining-tokens": "2300"})
    assert lim.headroom.tok == 300  # 2,000 tokens in flight are not in the provider's figure yet
    assert not lim.headroom.take(300)  # short, with the estimate's slack
    assert lim.headroom.take(200) and lim.headroom.tok == 100
    # Room stated short while replies are on their way: a sender waits for them, at most STALE_S, not forever.
    t0 = time.monotonic()
    lim.acquire(300)
    assert 0.5 < time.monotonic() - t0 < 3
    lim.record(90, 100)
    assert lim.headroom.inflight_tok == 2200 and lim.headroom.inflight == 20
    lim.pause(0.01)
    assert lim.headroom.req is None  # a 429's pause: the room is unknown until the next reply


def test_calls_from_the_stated_room_are_not_refunded_to_the_bucket():
    """The bucket never charged a call the provider's stated room admitted: refunding its unused estimate let
    the bucket grow far past its second's worth and burst once the room was unknown again (after a 429)."""
    lim = LocalRateLimiter(Limits(tpm=6000))  # the bucket: ~97 tokens a second, holding one second's worth
    lim.observe({"x-ratelimit-remaining-requests": "100", "x-ratelimit-remaining-tokens": "100000"})
    for _ in range(5):
        lim.acquire(1000)
        lim.record(0, 1000)  # the calls used nothing: 5,000 tokens "given back"
    lim.headroom.forget()  # the room unknown: the bucket alone decides
    t0 = time.monotonic()
    for _ in range(3):
        lim.acquire(90)
    assert time.monotonic() - t0 >= 1.2  # (270 - 97) / 97 s, not at once from a bucket of 5,000 refunded


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.parametrize("client", ["celery-limits", "celery-headers"])
def test_a_celery_sweep_paces_with_almost_no_429s(client, slow_sim, redis_server, tmp_path):
    """Two `ept worker` processes x 4 threads share one budget and the provider's stated room in Redis: the
    same short window as above, a whole sweep (30 jobs, 60 calls), next to no 429s and paced near the limit."""
    from ratelimit_celery import measure_celery

    r = measure_celery(slow_sim.url, client, redis_server.url, tmp_path, rpm=1200, tpm=60000, window_s=3.0,
                       per_family=5)  # fmt: skip
    assert r["calls"] >= 60 and r["answered_429"] <= max(1, 0.01 * r["calls"]), r
    assert r["of_sustained"] >= 0.8, r
