"""Rate limits per provider profile: requests per minute AND tokens per minute, paced rather than burst.

Two token buckets (requests, tokens) refill at MARGIN of the limit and hold only BURST_S seconds of it, so no
window of a provider's count (a sliding minute, or 10-s windows) sees more than the limit plus a second's
worth, and a sweep never opens with a minute's burst. A call reserves its estimated tokens at admission (in
flight, they are counted) and `record` corrects the reservation with the server's usage. A 429 pauses every
sender of the profile once (`pause`: one shared stop until Retry-After, the buckets drained so senders resume
paced); `observe` reads a response's `x-ratelimit-*` headers: with no limits configured it adopts the
provider's `limit-*` ones, and a `remaining-*` of 0 pauses until its `reset-*`.

`RedisRateLimiter` keeps the buckets and the pause in Redis, updated by one Lua script (the same arithmetic),
so every worker on every machine draws from one budget; `LocalRateLimiter` does it in-process.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from elo_per_token.worker.ratelimit_headers import (
    MAX_RESET_S,
    RECENT_S,
    STALE_S,
    TOKEN_SLACK,
    header_int,
    parse_reset,
)

if TYPE_CHECKING:
    from elo_per_token.worker.headroom_redis import RedisHeadroom

BURST_S = 1.0  # bucket capacity, in seconds of the limit
MARGIN = 0.97  # pace at this share of the limit: our clock and the provider's arrival order differ a little
MAX_PAUSE_S = 120.0  # a header or Retry-After asking for longer is capped (a hostile or broken server)
# What one look at admission decided (_Limiter._try_admit): from the stated room, wait for it, the bucket's say.
ROOM, ROOM_WAIT, BUCKET = 0, 1, 2

# KEYS[1] = bucket hash. ARGV: now_ms, rpm, tpm, burst_ms, need_req, need_tok, pause_until_ms.
# rpm/tpm <= 0: unlimited. need_tok may be negative (a reservation corrected down). Returns 0 when admitted
# (and charged), else the milliseconds to wait. Mirrors _Bucket.step.
_LUA = """
local key = KEYS[1]
local now = tonumber(ARGV[1])
if now == 0 then  -- the server's clock, read here: one round trip per step instead of TIME and then the script
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local rpm = tonumber(ARGV[2]) * MARGIN
local tpm = tonumber(ARGV[3]) * MARGIN
local burst = tonumber(ARGV[4])
local need_req = tonumber(ARGV[5])
local need_tok = tonumber(ARGV[6])
local pause_to = tonumber(ARGV[7])
local cap_req = math.max(1, rpm * burst / 60000.0)
local cap_tok = tpm * burst / 60000.0
local st = redis.call('HMGET', key, 'req', 'tok', 'ts', 'pause')
local req = tonumber(st[1])
local tok = tonumber(st[2])
local ts = tonumber(st[3])
local pause = tonumber(st[4]) or 0
if req == nil then req = cap_req; tok = cap_tok; ts = now end
local dt = math.max(0, now - ts)
if rpm > 0 then req = math.min(cap_req, req + dt * rpm / 60000.0) end
if tpm > 0 then tok = math.max(tok, math.min(cap_tok, tok + dt * tpm / 60000.0)) end
if pause_to > pause then pause = pause_to; req = math.min(req, 0); tok = math.min(tok, 0) end
local wait = 0
if need_req > 0 then
  if now < pause then wait = pause - now end
  if rpm > 0 and req < need_req then wait = math.max(wait, (need_req - req) * 60000.0 / rpm) end
  local want = math.min(need_tok, cap_tok)
  if tpm > 0 and want > 0 and tok < want then wait = math.max(wait, (want - tok) * 60000.0 / tpm) end
end
if wait == 0 then
  if rpm > 0 then req = req - need_req end
  if tpm > 0 then tok = tok - need_tok end
end
redis.call('HSET', key, 'req', req, 'tok', tok, 'ts', now, 'pause', pause)
redis.call('PEXPIRE', key, 300000)
return math.ceil(wait)
""".replace("MARGIN", repr(MARGIN))


# One round trip per call each way instead of up to three (the stated room's admit, the bucket's step, the
# room's probe; then the room's done and the bucket's correction): the two scripts above as functions, run in
# _Limiter._try_admit's and _settle's order. KEYS: bucket, room hash, recent zset. ARGV[1] = op, then
#   acquire est slack stale_ms rpm tpm burst_ms       -> {ROOM, 0} | {ROOM_WAIT, ms} | {BUCKET, ms}
#   settle reserved correct(0|1) tokens rpm tpm burst_ms
# Each part under pcall: a part that fails (a key of another type, a forged value Lua cannot compute with)
# fails alone, as its own script did (the room's failure sends the call to the bucket, the bucket's admits it
# unpaced), instead of the whole call going unpaced and unprobed. What Python saw of a script's reply is what
# Redis made of the number: an integer (long long) cast, so a wait >= 2^63, inf or nan arrived as a negative.
_FUSED = """
local function bucket(KEYS, ARGV)
BUCKET_LUA
end
local function room(KEYS, ARGV)
ROOM_LUA
end
local BIG = 9223372036854775808
local bk, rk = {KEYS[1]}, {KEYS[2], KEYS[3]}
if ARGV[1] == 'acquire' then
  local ok, held = pcall(room, rk, {'admit', ARGV[2], ARGV[3], ARGV[4]})
  if not ok then held = -1 end
  if held == 0 then return {0, 0} end
  if held > 0 and held < BIG then return {1, held} end
  local okb, wait = pcall(bucket, bk, {'0', ARGV[5], ARGV[6], ARGV[7], '1', ARGV[2], '0'})
  if not okb then wait = 0 end
  if not (wait > 0 and wait < BIG) then
    pcall(room, rk, {'probe', ARGV[2]})
    return {2, 0}
  end
  return {2, wait}
end
pcall(room, rk, {'done', ARGV[2]})
if ARGV[3] == '1' then pcall(bucket, bk, {'0', ARGV[5], ARGV[6], ARGV[7], '0', ARGV[4], '0'}) end
return 0
"""


@dataclass(frozen=True)
class Limits:
    rpm: int | None = None
    tpm: int | None = None

    @property
    def unlimited(self) -> bool:
        return not self.rpm and not self.tpm


@dataclass
class LimiterStats:
    """What pacing cost a client: time blocked before sending, the 429s fed back, the shared pauses."""

    waited_s: float = 0.0
    rate_limited: int = 0  # 429s answered to this client (each pauses every sender once)
    pauses: int = 0  # pauses from a 429 or a remaining-* of 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_wait(self, s: float) -> None:
        with self.lock:
            self.waited_s += s


class _Bucket:
    """Pure bucket arithmetic of the local limiter (the Lua script is the same, step for step)."""

    def __init__(self, limits: Limits, burst_s: float = BURST_S) -> None:
        self.burst_ms = burst_s * 1000
        self.set_limits(limits)
        self.req, self.tok = self.cap_req, self.cap_tok  # full at a second's worth, not a minute's
        self.ts = time.monotonic() * 1000
        self.pause = 0.0

    def set_limits(self, limits: Limits) -> None:
        self.limits = limits
        self.rpm, self.tpm = (limits.rpm or 0) * MARGIN, (limits.tpm or 0) * MARGIN
        self.cap_req = max(1.0, self.rpm * self.burst_ms / 60000)
        self.cap_tok = self.tpm * self.burst_ms / 60000

    def step(self, now: float, need_req: int, need_tok: float, pause_to: float = 0.0) -> float:
        """Refill to `now` (ms), apply a pause until `pause_to`, and take (need_req, need_tok) if both are
        there: 0, else the milliseconds to wait. need_req=0 charges tokens unconditionally (a correction)."""
        dt, self.ts = max(0.0, now - self.ts), now
        if self.rpm:
            self.req = min(self.cap_req, self.req + dt * self.rpm / 60000)
        if self.tpm:  # refilled up to the cap; a level above it (refunds) is kept, not cut
            self.tok = max(self.tok, min(self.cap_tok, self.tok + dt * self.tpm / 60000))
        if pause_to > self.pause:  # one shared pause; drained so that senders resume paced, not all at once
            self.pause, self.req, self.tok = pause_to, min(self.req, 0.0), min(self.tok, 0.0)
        wait = 0.0
        if need_req:
            wait = max(0.0, self.pause - now)
            if self.rpm and self.req < need_req:
                wait = max(wait, (need_req - self.req) * 60000 / self.rpm)
            want = min(need_tok, self.cap_tok)
            if self.tpm and want > 0 and self.tok < want:
                wait = max(wait, (want - self.tok) * 60000 / self.tpm)
        if wait == 0:
            if self.rpm:
                self.req -= need_req
            if self.tpm:  # not clipped: a refund above the cap is budget held by calls in flight until now
                self.tok -= need_tok
        return wait


def header_limits(headers: Mapping[str, str]) -> tuple[Limits, list[float]]:
    """(the limits a response's x-ratelimit-limit-* headers state, the pauses in seconds its remaining-* of 0
    ask for: until the matching reset-*)."""
    get = headers.get
    limits = Limits(
        header_int(get("x-ratelimit-limit-requests")), header_int(get("x-ratelimit-limit-tokens"))
    )
    pauses = []
    for kind in ("requests", "tokens"):
        if header_int(get(f"x-ratelimit-remaining-{kind}")) == 0:
            reset = parse_reset(get(f"x-ratelimit-reset-{kind}"))
            pauses.append(min(reset if reset is not None else 1.0, MAX_PAUSE_S))
    return limits, pauses


class Headroom:
    """What the provider's latest `x-ratelimit-remaining-*` said is left, less what was admitted since: room
    the pacing bucket may not see (a sliding minute that has not been spent yet). Requests are counted by the
    provider when they arrive (those in flight are in its figure); tokens when a reply completes, so the
    estimates of the calls in flight are taken off its remaining tokens.

    Room stated short holds every sender back (the bucket would send into a window the provider says is
    spent: 429s) until a reply on its way restates it, else until the provider's `reset-*` for what is short;
    then one probe goes through the bucket and its reply restates the room."""

    STALE_S = STALE_S
    RECENT_S = RECENT_S
    TOKEN_SLACK = TOKEN_SLACK
    MAX_RESET_S = MAX_RESET_S

    def __init__(self) -> None:
        self.req: float | None = None  # None: no header seen yet
        self.tok: float | None = None
        self.inflight_tok = 0
        self.inflight = 0  # calls admitted and not yet recorded
        self.at = 0.0  # when a reply last stated the room, or a probe was admitted
        self.reset_req = self.reset_tok = 0.0  # when the provider said requests / tokens come back
        self._recent: deque[float] = deque()  # when the latest admissions were made
        self._lock = threading.Lock()

    def observe(self, headers: Mapping[str, str]) -> None:
        req = header_int(headers.get("x-ratelimit-remaining-requests"))
        tok = header_int(headers.get("x-ratelimit-remaining-tokens"))
        with self._lock:
            now = time.monotonic()
            while self._recent and self._recent[0] < now - self.RECENT_S:
                self._recent.popleft()
            self.at = now
            if req is not None:  # less what may still be on its way (counted twice at worst: the safe side)
                self.req = float(req - len(self._recent))
                self.reset_req = now + min(
                    parse_reset(headers.get("x-ratelimit-reset-requests")) or 0.0, self.MAX_RESET_S
                )
            if tok is not None:
                self.tok = float(tok - self.inflight_tok)
                self.reset_tok = now + min(
                    parse_reset(headers.get("x-ratelimit-reset-tokens")) or 0.0, self.MAX_RESET_S
                )

    def _short_req(self) -> bool:
        return self.req is not None and self.req < 1

    def _short_tok(self, est: int) -> bool:
        return self.req is not None and self.tok is not None and self.tok < est * self.TOKEN_SLACK

    def wait_s(self, est: int) -> float:
        """Seconds this call must wait for room the provider stated short (0: it may go to the bucket): while
        replies on their way will restate the room, or until the provider's reset of what is short."""
        with self._lock:
            short_req, short_tok = self._short_req(), self._short_tok(est)
            if not (short_req or short_tok):
                return 0.0
            now = time.monotonic()
            if self.inflight > 0 and now - self.at < self.STALE_S:
                return 0.02  # the next reply says how much room there is
            reset = max(self.reset_req if short_req else 0.0, self.reset_tok if short_tok else 0.0)
            return max(0.0, reset - now)

    def take(self, est: int) -> bool:
        """Admit one call of `est` tokens from the room the provider stated, if there is that much."""
        with self._lock:
            if self.req is None or self._short_req() or self._short_tok(est):
                return False
            self.req -= 1
            if self.tok is not None:
                self.tok -= est
            return True

    def admitted(self, est: int, *, counted: bool) -> None:
        """A call admitted (by the bucket when not `counted` here): its request and tokens are in flight."""
        with self._lock:
            now = time.monotonic()
            self.inflight_tok += est
            self.inflight += 1
            self._recent.append(now)
            if (
                not counted
            ):  # a probe: the others wait for its reply (or STALE_S) before the bucket sends more
                self.at = now
                self.req = None if self.req is None else self.req - 1
                self.tok = None if self.tok is None else self.tok - est

    def admit(self, est: int) -> float | None:
        """0: admitted from the stated room; None: no room stated, or a probe is due (the bucket decides);
        else the seconds to wait for room."""
        if self.take(est):
            self.admitted(est, counted=True)
            return 0.0
        return (self.wait_s(est) or None) if self.req is not None else None

    def probe(self, est: int) -> None:
        """A call the bucket admitted (the room unknown, or past its reset)."""
        self.admitted(est, counted=False)

    def forget(self) -> None:
        """A pause (429, remaining 0): the stated room is no longer known until the next reply says it."""
        with self._lock:
            self.req = self.tok = None

    def done(self, reserved: int) -> None:
        with self._lock:
            self.inflight_tok = max(0, self.inflight_tok - reserved)
            self.inflight = max(0, self.inflight - 1)


class _Limiter:
    """What both limiters share: configured or learned limits, the stats, and the blocking loop."""

    def __init__(self, limits: Limits) -> None:
        self.configured = limits
        self.limits = limits
        self.stats = LimiterStats()
        self._tl = threading.local()  # per thread: whether its last admission came from the stated room
        # The provider's stated room, on top of the bucket (worker.headroom_redis for the Redis limiter).
        self.headroom: Headroom | RedisHeadroom | None = None

    def _step(self, need_req: int, need_tok: float, pause_to: float = 0.0) -> float:
        raise NotImplementedError

    def _now_ms(self) -> float:
        return time.monotonic() * 1000

    def _try_admit(self, est: int) -> tuple[int, float]:
        """One look at the stated room, then (if it does not decide) the bucket: (ROOM, 0) admitted from the
        stated room; (ROOM_WAIT, ms) wait for room the provider stated short; (BUCKET, ms) the bucket's answer,
        0 when it admitted the call (then a probe of the room, if any)."""
        room = self.headroom
        held = room.admit(est) if room is not None else None
        if held == 0:
            return ROOM, 0.0
        if held is not None:
            return ROOM_WAIT, held * 1000
        wait = self._step(1, est)
        if wait <= 0 and room is not None:
            room.probe(est)
        return BUCKET, wait

    def _settle(self, reserved: int, correction: int | None) -> None:
        """A call is over: its reservation leaves the room's in-flight count, and `correction` (None: none)
        goes to the bucket."""
        if self.headroom is not None:
            self.headroom.done(reserved)
        if correction is not None:
            self._step(0, correction)

    def acquire(self, est_tokens: int = 0, stop: threading.Event | None = None) -> None:
        """Block until one request and `est_tokens` tokens are there (or a pause is over); take them: the
        tokens stay reserved until `record` corrects them. Returns early when `stop` is set."""
        t0, est = time.monotonic(), max(0, int(est_tokens))
        while True:
            how, wait = self._try_admit(est)
            if how == ROOM:  # the provider says there is room now: no pacing wait
                self._tl.via_room = True  # the bucket was not charged: `record` must not refund it
                return self._waited(t0)
            if how == BUCKET and wait <= 0:
                break
            # With a stated room, look again soon: another sender's reply may bring fresh headers.
            nap = min(wait, 50 if how == ROOM_WAIT else 1000) / 1000
            if stop is not None and stop.wait(nap):
                break
            if stop is None:
                time.sleep(nap)
        self._tl.via_room = False
        self._waited(t0)

    def _waited(self, t0: float) -> None:
        if (took := time.monotonic() - t0) > 0.001:
            self.stats.add_wait(took)

    def record(self, tokens: int, reserved: int = 0) -> None:
        """Charge what the server reported against what `acquire` reserved (a refund when less was used). A
        call this thread's last `acquire` admitted from the provider's stated room never drew on the bucket: its
        estimate is not refunded there (refunds of calls the bucket never charged let it burst later)."""
        reserved = max(0, int(reserved))
        via_room = getattr(self._tl, "via_room", False)
        self._tl.via_room = False
        self._settle(reserved, None if via_room else max(0, int(tokens)) - reserved)

    def pause(self, seconds: float, *, rate_limited: bool = True) -> None:
        """Stop every sender of this profile for `seconds` (a 429's Retry-After), once: pauses overlap."""
        with self.stats.lock:
            self.stats.pauses += 1
            self.stats.rate_limited += int(rate_limited)
        if self.headroom is not None:
            self.headroom.forget()
        self._step(0, 0, self._now_ms() + min(max(seconds, 0.0), MAX_PAUSE_S) * 1000)

    def observe(self, headers: Mapping[str, str]) -> None:
        """A response's x-ratelimit-* headers: learn the limits when none are configured; a remaining-* of
        0 pauses until its reset-*."""
        learned, pauses = header_limits(headers)
        if self.headroom is not None:
            self.headroom.observe(headers)
        if self.configured.unlimited and not learned.unlimited and learned != self.limits:
            self.limits = learned
            self._set_limits(learned)
        if pauses and self.headroom is None:  # with a headroom, stated room of 0 holds senders until reset-*
            self.pause(max(pauses), rate_limited=False)

    def _set_limits(self, limits: Limits) -> None:
        raise NotImplementedError


class LocalRateLimiter(_Limiter):
    def __init__(self, limits: Limits, burst_s: float = BURST_S, headroom: bool = True) -> None:
        super().__init__(limits)
        self.headroom = Headroom() if headroom else None
        self._b = _Bucket(limits, burst_s)
        self._lock = threading.Lock()

    def _step(self, need_req: int, need_tok: float, pause_to: float = 0.0) -> float:
        with self._lock:
            return self._b.step(self._now_ms(), need_req, need_tok, pause_to)

    def _set_limits(self, limits: Limits) -> None:
        with self._lock:
            self._b.set_limits(limits)


class RedisRateLimiter(_Limiter):
    """Shared by all workers: the buckets and the pause live at `ept:rl:<profile>` in Redis."""

    def __init__(
        self, redis_client: Any, profile: str, limits: Limits, burst_s: float = BURST_S, headroom: bool = True
    ) -> None:
        super().__init__(limits)
        self.key = f"ept:rl:{profile}"
        self.burst_ms = int(burst_s * 1000)
        self._r = redis_client
        self._script = redis_client.register_script(_LUA)
        self._fused: Any = None
        self._room: RedisHeadroom | None = None  # the fused script's room (self.headroom unless replaced)
        if headroom:
            from elo_per_token.worker.headroom_redis import ROOM_LUA, RedisHeadroom

            self.headroom = self._room = RedisHeadroom(redis_client, self.key)
            fused = _FUSED.replace("BUCKET_LUA", _LUA).replace("ROOM_LUA", ROOM_LUA)
            self._fused = redis_client.register_script(fused)

    def _fused_room(self) -> RedisHeadroom | None:
        """The room the fused script keeps, unless `headroom` was replaced or dropped (then: one script each)."""
        room = self._room
        return room if self._fused is not None and room is not None and self.headroom is room else None

    def _limit_args(self) -> list[int]:
        lim = self.limits
        return [lim.rpm or 0, lim.tpm or 0, self.burst_ms]

    def _try_admit(self, est: int) -> tuple[int, float]:
        if (room := self._fused_room()) is None:
            return super()._try_admit(est)
        args = ["acquire", est, room._h.TOKEN_SLACK, int(room._h.STALE_S * 1000), *self._limit_args()]
        try:
            how, wait = self._fused(keys=[self.key, *room.keys], args=args)
            how, wait = int(how), float(wait)
        except Exception:  # redis.RedisError, OSError, a reply of another shape: unpaced, as _step's outage
            return BUCKET, 0.0
        return (how, wait) if how in (ROOM, ROOM_WAIT, BUCKET) else (BUCKET, 0.0)

    def _settle(self, reserved: int, correction: int | None) -> None:
        if (room := self._fused_room()) is None:
            return super()._settle(reserved, correction)
        fix = 0 if correction is None else int(correction)
        args = ["settle", reserved, int(correction is not None), fix, *self._limit_args()]
        with contextlib.suppress(Exception):  # as _step's and the room's outages: pacing is an optimisation
            self._fused(keys=[self.key, *room.keys], args=args)

    def _now_ms(self) -> float:
        # The server's clock, so workers on machines with skewed clocks agree.
        sec, usec = self._r.time()
        return int(sec) * 1000 + int(usec) // 1000

    def _step(self, need_req: int, need_tok: float, pause_to: float = 0.0) -> float:
        lim = self.limits
        try:
            # now = 0: the script reads the server's clock itself (TIME), as _now_ms does for a pause's end.
            args = [0, lim.rpm or 0, lim.tpm or 0, self.burst_ms, need_req, int(need_tok), int(pause_to)]
            return float(self._script(keys=[self.key], args=args))
        except Exception:  # redis.RedisError, OSError: the broker is restarting or gone
            # Pacing is an optimisation: a broker outage must not fail a job, least of all after its calls were
            # made (correcting the reservation with the real usage runs after each call): the job would be run
            # and paid again (tests/system/test_fault_redis_restart.py). Without the broker, this call is not paced.
            return 0.0

    def _set_limits(self, limits: Limits) -> None:
        pass  # passed with every step


def make_rate_limiter(
    profile: str, limits: Limits, redis_url: str | None = None
) -> LocalRateLimiter | RedisRateLimiter:
    """A Redis-backed limiter when a Redis URL is given, else an in-process one. Made even without limits: it
    learns them from the provider's headers and shares a 429's pause between the profile's senders."""
    if redis_url:
        import redis

        return RedisRateLimiter(redis.Redis.from_url(redis_url), profile, limits)
    return LocalRateLimiter(limits)
