"""Rate limits per provider profile: requests per minute AND tokens per minute.

`RedisRateLimiter` keeps two token buckets in Redis, updated by one Lua script, so every worker on every
machine draws from the same budget. `LocalRateLimiter` is the same algorithm in-process for the local executor.

Both follow the ProviderClient contract: `acquire(est_tokens)` blocks until one request and `est_tokens`
tokens are available and takes the request; `record(tokens)` charges the tokens the server reported. Tokens
are charged after the fact (the bucket may go negative) because only the server knows the real count;
admission checks the estimate, so over-spend is bounded by the number of calls in flight.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

# KEYS[1] = bucket hash. ARGV: now_ms, rpm, tpm, need_req, need_tok, charge_tok.
# rpm/tpm <= 0 means unlimited. Returns 0 when admitted (and charged), else the milliseconds to wait.
_LUA = """
local key = KEYS[1]
local now = tonumber(ARGV[1])
local rpm = tonumber(ARGV[2])
local tpm = tonumber(ARGV[3])
local need_req = tonumber(ARGV[4])
local need_tok = tonumber(ARGV[5])
local charge_tok = tonumber(ARGV[6])
local st = redis.call('HMGET', key, 'req', 'tok', 'ts')
local req = tonumber(st[1])
local tok = tonumber(st[2])
local ts = tonumber(st[3])
if req == nil then req = rpm; tok = tpm; ts = now end
local dt = math.max(0, now - ts)
if rpm > 0 then req = math.min(rpm, req + dt * rpm / 60000.0) end
if tpm > 0 then tok = math.min(tpm, tok + dt * tpm / 60000.0) end
local wait = 0
if rpm > 0 and req < need_req then wait = math.max(wait, (need_req - req) * 60000.0 / rpm) end
if tpm > 0 and need_tok > 0 and tok < math.min(need_tok, tpm) then
  wait = math.max(wait, (math.min(need_tok, tpm) - tok) * 60000.0 / tpm)
end
if wait == 0 then
  if rpm > 0 then req = req - need_req end
  if tpm > 0 then tok = tok - charge_tok end
end
redis.call('HSET', key, 'req', req, 'tok', tok, 'ts', now)
redis.call('PEXPIRE', key, 120000)
return math.ceil(wait)
"""


@dataclass(frozen=True)
class Limits:
    rpm: int | None = None
    tpm: int | None = None

    @property
    def unlimited(self) -> bool:
        return not self.rpm and not self.tpm


class _Bucket:
    """Pure bucket arithmetic shared by the local limiter (mirrors the Lua script)."""

    def __init__(self, limits: Limits) -> None:
        self.rpm = limits.rpm or 0
        self.tpm = limits.tpm or 0
        self.req = float(self.rpm)
        self.tok = float(self.tpm)
        self.ts = time.monotonic() * 1000

    def step(self, now_ms: float, need_req: int, need_tok: int, charge_tok: int) -> float:
        dt = max(0.0, now_ms - self.ts)
        self.ts = now_ms
        if self.rpm:
            self.req = min(self.rpm, self.req + dt * self.rpm / 60000)
        if self.tpm:
            self.tok = min(self.tpm, self.tok + dt * self.tpm / 60000)
        wait = 0.0
        if self.rpm and self.req < need_req:
            wait = max(wait, (need_req - self.req) * 60000 / self.rpm)
        if self.tpm and need_tok > 0 and self.tok < min(need_tok, self.tpm):
            wait = max(wait, (min(need_tok, self.tpm) - self.tok) * 60000 / self.tpm)
        if wait == 0:
            if self.rpm:
                self.req -= need_req
            if self.tpm:
                self.tok -= charge_tok
        return wait


class LocalRateLimiter:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._b = _Bucket(limits)
        self._lock = threading.Lock()

    def acquire(self, est_tokens: int = 0) -> None:
        while True:
            with self._lock:
                wait = self._b.step(time.monotonic() * 1000, 1, max(0, int(est_tokens)), 0)
            if wait <= 0:
                return
            time.sleep(min(wait, 5000) / 1000)

    def record(self, tokens: int) -> None:
        with self._lock:
            self._b.step(time.monotonic() * 1000, 0, 0, max(0, int(tokens)))


class RedisRateLimiter:
    """Shared by all workers: the bucket lives at `ept:rl:<profile>` in Redis."""

    def __init__(self, redis_client: Any, profile: str, limits: Limits) -> None:
        self.limits = limits
        self.key = f"ept:rl:{profile}"
        self._r = redis_client
        self._script = redis_client.register_script(_LUA)

    def _now_ms(self) -> int:
        # The server's clock, so workers on machines with skewed clocks agree.
        sec, usec = self._r.time()
        return int(sec) * 1000 + int(usec) // 1000

    def _call(self, need_req: int, need_tok: int, charge_tok: int) -> int:
        args = [self._now_ms(), self.limits.rpm or 0, self.limits.tpm or 0, need_req, need_tok, charge_tok]
        return int(self._script(keys=[self.key], args=args))

    def acquire(self, est_tokens: int = 0) -> None:
        while True:
            wait = self._call(1, max(0, int(est_tokens)), 0)
            if wait <= 0:
                return
            time.sleep(min(wait, 5000) / 1000)

    def record(self, tokens: int) -> None:
        self._call(0, 0, max(0, int(tokens)))


def make_rate_limiter(
    profile: str, limits: Limits, redis_url: str | None = None
) -> LocalRateLimiter | RedisRateLimiter | None:
    """None when unlimited; a Redis-backed limiter when a Redis URL is given; else an in-process one."""
    if limits.unlimited:
        return None
    if redis_url:
        import redis

        return RedisRateLimiter(redis.Redis.from_url(redis_url), profile, limits)
    return LocalRateLimiter(limits)
