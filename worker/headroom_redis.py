"""The provider's stated room (worker.ratelimit.Headroom) shared by every worker of a profile, in Redis.

Each worker process sees the provider's `x-ratelimit-remaining-*` in its own replies; the provider counts all
of them. Kept per process, the same stated room would be spent once by each process (a burst of 429s), so the
room, the calls in flight and the recent admissions live at `ept:rl:<profile>:room` (hash) and `...:recent`
(sorted set), and every step is one Lua script: the same arithmetic as Headroom, step for step, on the
server's clock. A broker outage leaves the call to the pacing bucket (which admits unpaced then): pacing is an
optimisation, never a reason to fail a job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elo_per_token.worker import ratelimit_headers
from elo_per_token.worker.ratelimit_headers import header_int, parse_reset

# KEYS: room hash, recent zset. ARGV[1]: op; then per op (times in ms):
#   observe rem_req rem_tok reset_req reset_tok   (-1: not stated)
#   admit est slack stale_ms                      -> 0 taken, -1 to the bucket, > 0 wait ms
#   probe est                                     (a call the bucket admitted)
#   done reserved | forget
_LUA = """
local room, recent, op = KEYS[1], KEYS[2], ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', room, 'req', 'tok', 'at', 'rreq', 'rtok', 'inflight', 'inflight_tok')
local req, tok, at = tonumber(h[1]), tonumber(h[2]), tonumber(h[3]) or 0
local rreq, rtok = tonumber(h[4]) or 0, tonumber(h[5]) or 0
local inflight, inflight_tok = tonumber(h[6]) or 0, tonumber(h[7]) or 0
local out = 0
local function admitted(est, counted)
  inflight = inflight + 1
  inflight_tok = inflight_tok + est
  local seq = redis.call('HINCRBY', room, 'seq', 1)
  redis.call('ZADD', recent, now, tostring(now) .. ':' .. tostring(seq))
  if not counted then at = now end
  if req then req = req - 1 end
  if tok then tok = tok - est end
end
if op == 'observe' then
  redis.call('ZREMRANGEBYSCORE', recent, '-inf', now - RECENT_MS)
  local n = redis.call('ZCARD', recent)
  local rr, rt = tonumber(ARGV[2]), tonumber(ARGV[3])
  at = now
  if rr >= 0 then req = rr - n; rreq = now + tonumber(ARGV[4]) end
  if rt >= 0 then tok = rt - inflight_tok; rtok = now + tonumber(ARGV[5]) end
elseif op == 'admit' then
  local est, slack, stale = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  if req == nil then return -1 end
  local short_req = req < 1
  local short_tok = tok ~= nil and tok < est * slack
  if not (short_req or short_tok) then
    admitted(est, true)
  elseif inflight > 0 and now - at < stale then
    out = 20
  else
    local reset = 0
    if short_req then reset = rreq end
    if short_tok and rtok > reset then reset = rtok end
    out = reset - now
    if out <= 0 then out = -1 end
  end
elseif op == 'probe' then
  admitted(tonumber(ARGV[2]), false)
elseif op == 'done' then
  inflight = math.max(0, inflight - 1)
  inflight_tok = math.max(0, inflight_tok - tonumber(ARGV[2]))
elseif op == 'forget' then
  req = nil; tok = nil
end
redis.call('HDEL', room, 'req', 'tok')
if req then redis.call('HSET', room, 'req', req) end
if tok then redis.call('HSET', room, 'tok', tok) end
redis.call('HSET', room, 'at', at, 'rreq', rreq, 'rtok', rtok, 'inflight', inflight, 'inflight_tok', inflight_tok)
redis.call('PEXPIRE', room, 300000)
redis.call('PEXPIRE', recent, 300000)
return math.ceil(out)
"""
# The script as run: also a function of worker.ratelimit's admission and settlement scripts (one round trip).
ROOM_LUA = _LUA.replace("RECENT_MS", str(int(ratelimit_headers.RECENT_S * 1000)))


class RedisHeadroom:
    """worker.ratelimit.Headroom's interface (`admit`, `probe`, `observe`, `forget`, `done`) over Redis."""

    def __init__(self, redis_client: Any, key: str) -> None:
        self._h = ratelimit_headers  # the in-process Headroom's constants: one truth for both
        self.keys = [f"{key}:room", f"{key}:recent"]
        self._script = redis_client.register_script(ROOM_LUA)

    def _run(self, *args: Any) -> float | None:
        try:
            return float(self._script(keys=self.keys, args=list(args)))
        except Exception:  # redis.RedisError, OSError: the broker is restarting or gone; the bucket decides
            return None

    def admit(self, est: int) -> float | None:
        """0: admitted from the stated room; None: no room stated (the bucket decides); else seconds to wait."""
        out = self._run("admit", est, self._h.TOKEN_SLACK, int(self._h.STALE_S * 1000))
        if out is None or out < 0:
            return None
        return out / 1000

    def probe(self, est: int) -> None:
        self._run("probe", est)

    def observe(self, headers: Mapping[str, str]) -> None:
        def ms(kind: str) -> int:
            v = parse_reset(headers.get(f"x-ratelimit-reset-{kind}")) or 0.0
            return int(min(v, self._h.MAX_RESET_S) * 1000)

        req = header_int(headers.get("x-ratelimit-remaining-requests"))
        tok = header_int(headers.get("x-ratelimit-remaining-tokens"))
        if req is None and tok is None:
            return
        self._run(
            "observe", -1 if req is None else req, -1 if tok is None else tok, ms("requests"), ms("tokens")
        )

    def forget(self) -> None:
        self._run("forget")

    def done(self, reserved: int) -> None:
        self._run("done", max(0, int(reserved)))
