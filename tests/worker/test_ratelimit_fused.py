"""The Redis rate limiter's fused scripts (issue 39): a call's admission (the stated room's admit, the bucket's
step, the room's probe) and its settlement (the room's done, the bucket's correction) are one round trip each,
and decide exactly what the scripts run one by one decided (the fallback kept for a limiter whose room was
replaced), whatever the broker holds."""

from __future__ import annotations

import math
import threading
import time
import uuid

import pytest
from bounds import bounded
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from elo_per_token.worker.ratelimit import BUCKET, ROOM, ROOM_WAIT, Limits, RedisRateLimiter

pytestmark = pytest.mark.services


def _limiter(redis_server, limits: Limits, *, fused: bool = True) -> RedisRateLimiter:
    import redis

    lim = RedisRateLimiter(redis.Redis.from_url(redis_server.url), "rl-fused-" + uuid.uuid4().hex[:8], limits)
    if not fused:
        lim._fused = None  # the scripts one by one, as before the fused script
    return lim


def _state(lim: RedisRateLimiter) -> tuple[dict[str, float], dict[str, float]]:
    """The bucket's and the room's hashes as numbers (absent: not there)."""
    r = lim._r
    bucket = {k.decode(): float(v) for k, v in r.hgetall(lim.key).items()}
    room = {k.decode(): float(v) for k, v in r.hgetall(f"{lim.key}:room").items()}
    return bucket, room


def _counted_calls(lim: RedisRateLimiter) -> list[str]:
    """Every command the limiter's client sends, in order (the client's execute_command wrapped)."""
    sent: list[str] = []
    inner = lim._r.execute_command

    def spy(*args, **kw):
        sent.append(str(args[0]))
        return inner(*args, **kw)

    lim._r.execute_command = spy
    return sent


def test_a_call_is_one_round_trip_to_admit_and_one_to_settle(redis_server):
    """Bucket-admitted (no room stated) and room-admitted calls alike: 2 commands per call, not 5."""
    lim = _limiter(redis_server, Limits(rpm=6000, tpm=600_000))
    lim.acquire(10)  # loads the script (EVALSHA's first NOSCRIPT) before counting
    lim.record(12, 10)
    sent = _counted_calls(lim)
    lim.acquire(10)
    lim.record(12, 10)
    assert sent == ["EVALSHA", "EVALSHA"], sent
    lim.observe({"x-ratelimit-remaining-requests": "100", "x-ratelimit-remaining-tokens": "100000"})
    sent.clear()
    lim.acquire(10)
    assert lim._tl.via_room  # from the stated room: the bucket is not charged, nor refunded
    lim.record(12, 10)
    assert sent == ["EVALSHA", "EVALSHA"], sent


def test_the_fused_limiter_still_paces_and_counts_in_flight(redis_server):
    """rpm 60 holds one request a second: the second call waits for the bucket; the room's in-flight count
    goes up with the probe and back down with the settlement."""
    lim = _limiter(redis_server, Limits(rpm=60))
    lim.acquire(5)
    assert _state(lim)[1]["inflight"] == 1 and _state(lim)[1]["inflight_tok"] == 5
    t0 = time.monotonic()
    stop = threading.Event()
    threading.Timer(3.0, stop.set).start()
    lim.acquire(5, stop)
    took = time.monotonic() - t0
    stop.set()
    assert 0.5 < took < 2.5, took  # paced (~1 s), not unpaced and not stuck
    lim.record(5, 5)
    lim.record(5, 5)
    assert _state(lim)[1]["inflight"] == 0 and _state(lim)[1]["inflight_tok"] == 0


def test_past_the_reset_of_room_stated_short_eight_senders_send_one_probe_not_a_bucket_burst(redis_server):
    """The room's admit, the bucket's step and the probe in one script: no other sender sees the room between
    a bucket admission and its probe (one by one, two senders could both find the reset past and no probe in
    flight, and both go). The bucket alone (rpm 6000) would admit ~97 at once."""
    lim = _limiter(redis_server, Limits(rpm=6000))
    lim.observe({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "200ms"})
    stop, sent, t0 = threading.Event(), [], time.monotonic()

    def send() -> None:
        lim.acquire(10, stop)
        if not stop.is_set():
            sent.append(time.monotonic() - t0)

    ts = [threading.Thread(target=send) for _ in range(8)]
    for t in ts:
        t.start()
    time.sleep(0.7)  # past the reset, inside STALE_S of the probe: the others wait for its reply
    got = list(sent)
    stop.set()
    for t in ts:
        t.join(2)
    assert len(got) == 1 and got[0] >= 0.15, got
    assert _state(lim)[1]["inflight"] == 1


_op = st.one_of(
    st.tuples(st.just("observe"), st.integers(-1, 5), st.integers(-1, 400)),
    st.tuples(st.just("admit"), st.integers(0, 300)),
    st.tuples(st.just("record"), st.integers(0, 400), st.integers(0, 300), st.booleans()),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_op, max_size=12), st.sampled_from([Limits(), Limits(rpm=60), Limits(rpm=60, tpm=600)]))
def test_fused_and_one_by_one_decide_alike(redis_server, ops, limits):
    """The same operations on a fused limiter and on one running the scripts one by one, interleaved (their
    clocks a millisecond or two apart): the same decisions, the same calls in flight, the same buckets (up to
    the refill of those milliseconds)."""
    a, b = _limiter(redis_server, limits), _limiter(redis_server, limits, fused=False)
    for op in ops:
        got = []
        for lim in (a, b):
            if op[0] == "observe":
                stated = {
                    "x-ratelimit-remaining-requests": str(op[1]),
                    "x-ratelimit-remaining-tokens": str(op[2]),
                }
                lim.observe({k: v for k, v in stated.items() if not v.startswith("-")})
            elif op[0] == "admit":
                how, wait = bounded(lambda lim=lim, est=op[1]: lim._try_admit(est), 0.5, 8)
                got.append((how, wait > 0))
            else:
                lim._settle(op[2], None if op[3] else op[1] - op[2])
        assert len(set(got)) <= 1, (op, got)
        (ba, ra), (bb, rb) = _state(a), _state(b)
        for k in ("inflight", "inflight_tok", "req", "tok"):
            assert (k in ra) == (k in rb) and abs(ra.get(k, 0) - rb.get(k, 0)) < 1e-6, (op, k, ra, rb)
        for k in ("req", "tok", "pause"):
            assert (k in ba) == (k in bb) and abs(ba.get(k, 0) - bb.get(k, 0)) < 0.5, (op, k, ba, bb)


_junk = st.one_of(
    st.binary(max_size=12),
    st.sampled_from([b"nan", b"inf", b"-inf", b"1e400", b"-1e400", b"", b"9" * 40, b"-5", b"0x10"]),
    st.sampled_from([b"0", b"1", b"0.5", b"-0"]),
    # Waits just under 2^63 ms (an integer reply, positive) and past it (Redis's cast makes them negative).
    st.sampled_from([b"9.1e18", b"9.3e18", b"-8.83e16", b"-9.6e16", b"-1e30"]),
)

_ROOM_FIELDS = ["req", "tok", "at", "rreq", "rtok", "inflight", "inflight_tok", "seq"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.dictionaries(st.sampled_from(["req", "tok", "ts", "pause"]), _junk, max_size=4),
    st.dictionaries(st.sampled_from(_ROOM_FIELDS), _junk, max_size=8),
    st.sampled_from(["hash", "string", "list"]),
)
def test_whatever_the_broker_holds_a_call_is_admitted_or_told_to_wait_in_bounded_time(
    redis_server, bucket, room, kind
):
    """Forged or corrupt bucket and room keys (any field values, or keys of another type): admission answers
    within bounded time with a known decision and a wait that is a number >= 0 or unpaced, never an exception;
    settling never raises."""
    lim = _limiter(redis_server, Limits(rpm=600, tpm=60_000))
    _forge(lim, bucket, room, kind, recent_kind="")
    how, wait = bounded(lambda: lim._try_admit(10), 0.5, 8)
    assert how in (ROOM, ROOM_WAIT, BUCKET)
    assert wait >= 0 or how == BUCKET  # a bucket's negative is "admitted", as _step's
    assert wait == wait  # not NaN
    bounded(lambda: lim._settle(10, 2), 0.5, 8)
    bounded(lambda: lim._settle(10, None), 0.5, 8)


_TIME_FIELDS = {"ts", "at"}  # the server's clock at the step: the two limiters' calls are milliseconds apart


def _forge(lim: RedisRateLimiter, bucket: dict, room: dict, kind: str, recent_kind: str) -> None:
    r = lim._r
    for key, fields in ((lim.key, bucket), (f"{lim.key}:room", room)):
        if kind == "hash" and fields:
            r.hset(key, mapping=fields)
        elif kind == "string":
            r.set(key, b"junk")
        elif kind == "list":
            r.rpush(key, b"junk")
    if recent_kind == "string":
        r.set(f"{lim.key}:recent", b"junk")


def _snapshot(lim: RedisRateLimiter) -> dict[str, object]:
    """The bucket's and the room's fields as stored, and how many admissions the recent zset holds."""
    r, out = lim._r, {}
    for name, key in (("bucket", lim.key), ("room", f"{lim.key}:room")):
        if r.type(key) == b"hash":
            out |= {f"{name}.{k.decode()}": v for k, v in r.hgetall(key).items()}
        else:
            out[name] = r.type(key)
    recent = f"{lim.key}:recent"
    out["recent"] = r.zcard(recent) if r.type(recent) == b"zset" else r.type(recent)
    return out


def _alike(x: object, y: object, tol: float) -> bool:
    if x == y or not (isinstance(x, bytes) and isinstance(y, bytes)):
        return x == y
    try:
        fx, fy = float(x), float(y)
    except ValueError:
        return False
    if math.isnan(fx) or math.isnan(fy):
        return math.isnan(fx) and math.isnan(fy)
    return fx == fy or abs(fx - fy) <= tol + 1e-9 * max(abs(fx), abs(fy))


def _assert_same_state(a: RedisRateLimiter, b: RedisRateLimiter, what: object) -> None:
    sa, sb = _snapshot(a), _snapshot(b)
    assert sa.keys() == sb.keys(), (what, sa, sb)
    for k in sa:
        # rpm 60 / tpm 600: the buckets refill ~0.01 token per ms, so 2.0 covers ~200 ms between the two steps
        tol = 5000.0 if k.split(".")[-1] in _TIME_FIELDS else 2.0
        assert _alike(sa[k], sb[k], tol), (what, k, sa, sb)


def _decision(how: int, wait: float) -> tuple[int, bool]:
    """What acquire makes of one look: the way, and whether the call goes now."""
    return how, how == ROOM or (how == BUCKET and wait <= 0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.dictionaries(st.sampled_from(["req", "tok", "ts", "pause"]), _junk, max_size=4),
    st.dictionaries(st.sampled_from(_ROOM_FIELDS), _junk, max_size=8),
    st.sampled_from(["hash", "hash", "string", "list"]),
    st.sampled_from(["zset", "zset", "string"]),
    st.integers(0, 400),
)
@example({"tok": b"-8.83e16", "req": b"5", "ts": b"0"}, {}, "hash", "zset", 10)  # a wait of ~9.1e18 ms
@example({}, {"req": b"0", "rreq": b"9.1e18"}, "hash", "zset", 10)  # the room's wait just under 2^63
@example({}, {"req": b"0", "rreq": b"9.3e18"}, "hash", "zset", 10)  # past 2^63: the bucket decides
# The recent admissions' key of another type; the room failing after its first write (HINCRBY on junk).
@example({"req": b"5", "tok": b"500", "ts": b"0"}, {"req": b"3"}, "hash", "string", 10)
@example({}, {"req": b"3", "seq": b"x"}, "hash", "zset", 10)
def test_hostile_broker_values_the_fused_scripts_decide_and_write_what_the_scripts_one_by_one_did(
    redis_server, bucket, room, kind, recent_kind, est
):
    """The same forged keys under a fused limiter and one running the scripts one by one: the same decision
    (admitted from the room, told to wait for it, the bucket's wait or admission), about the same wait, and
    the same fields written (or left) in the bucket, the room and the recent admissions, after the admission
    and after both kinds of settlement; each step within bounded time."""
    limits = Limits(rpm=60, tpm=600)
    a, b = _limiter(redis_server, limits), _limiter(redis_server, limits, fused=False)
    for lim in (a, b):
        _forge(lim, bucket, room, kind, recent_kind)
    (ha, wa), (hb, wb) = (bounded(lambda lim=lim: lim._try_admit(est), 0.5, 8) for lim in (a, b))
    assert _decision(ha, wa) == _decision(hb, wb), (ha, wa, hb, wb)
    if not _decision(ha, wa)[1]:
        assert abs(wa - wb) <= 1000 + 1e-9 * max(abs(wa), abs(wb)), (ha, wa, hb, wb)
    _assert_same_state(a, b, "admit")
    for correction in (est // 2 - est, None):
        for lim in (a, b):
            bounded(lambda lim=lim, c=correction: lim._settle(est, c), 0.5, 8)
        _assert_same_state(a, b, ("settle", correction))
