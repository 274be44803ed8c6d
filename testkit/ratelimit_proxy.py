"""A rate-limiting OpenAI-style proxy: forwards /v1/* to an upstream (the simulator) and enforces requests and
tokens per minute the way providers count them — over a sliding window of `window_s` seconds (60: a sliding
minute; 10: limits enforced per 10-s window, i.e. rpm/6 and tpm/6 in any 10 s).

A request is refused with 429 (OpenAI's body, `Retry-After` and `retry-after-ms`) when the window already
holds the limit's requests or tokens; tokens are counted from the upstream's usage when the reply completes.
Every response carries `x-ratelimit-limit/remaining/reset-requests|tokens` as OpenAI sends them.

    proxy = RateLimitProxy(sim_url, rpm=300, tpm=60000, window_s=60).start()   # proxy.url ends in /v1
    ...; proxy.stats  # {"requests", "ok", "429"}; proxy.stop()
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections import deque

import aiohttp
from aiohttp import web


class RateLimitProxy:
    def __init__(self, upstream: str, *, rpm: int, tpm: int, window_s: float = 60.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.rpm, self.tpm, self.window = rpm, tpm, window_s
        self.max_req = rpm * window_s / 60  # per window
        self.max_tok = tpm * window_s / 60
        self.reqs: deque[float] = deque()
        self.toks: deque[tuple[float, int]] = deque()
        self.stats = {"requests": 0, "ok": 0, "429": 0, "tokens": 0}
        self.events: list[tuple[float, int]] = []  # (monotonic arrival, status): the timeline, for diagnosis
        self.last_done = 0.0  # when the last forwarded reply completed
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def span_s(self) -> float:
        """From the first request's arrival to the last reply: the schedule the provider saw (a client's start-up
        before its first call is not the limiter's time)."""
        return self.last_done - self.events[0][0] if self.events else 0.0

    def _expire(self, now: float) -> tuple[int, int]:
        while self.reqs and self.reqs[0] <= now - self.window:
            self.reqs.popleft()
        while self.toks and self.toks[0][0] <= now - self.window:
            self.toks.popleft()
        return len(self.reqs), sum(n for _, n in self.toks)

    def _reset(self, now: float) -> tuple[float, float]:
        """Seconds until a request more, and until tokens below the limit, would be admitted."""
        n, used = self._expire(now)
        r = self.reqs[n - int(self.max_req)] + self.window - now if n >= self.max_req else 0.0
        t, over = 0.0, used - self.max_tok
        for ts, k in self.toks:  # until enough token entries leave the window
            if over < 0:
                break
            over -= k
            t = ts + self.window - now
        return max(r, 0.0), max(t, 0.0)

    def _headers(self, now: float) -> dict[str, str]:
        n, used = self._expire(now)
        rr, rt = self._reset(now)
        return {
            "x-ratelimit-limit-requests": str(self.rpm),
            "x-ratelimit-limit-tokens": str(self.tpm),
            "x-ratelimit-remaining-requests": str(max(0, int(self.max_req) - n)),
            "x-ratelimit-remaining-tokens": str(max(0, int(self.max_tok - used))),
            "x-ratelimit-reset-requests": f"{rr:.3f}s",
            "x-ratelimit-reset-tokens": f"{rt:.3f}s",
        }

    async def _handle(self, request: web.Request) -> web.Response:
        now = time.monotonic()
        self.stats["requests"] += 1
        n, used = self._expire(now)
        if n >= self.max_req or used >= self.max_tok:
            self.stats["429"] += 1
            self.events.append((now, 429))
            wait = max(self._reset(now))
            body = {"error": {"message": "Rate limit reached (proxy).", "type": "requests", "param": None,
                              "code": "rate_limit_exceeded"}}  # fmt: skip
            headers = {**self._headers(now), "Retry-After": str(max(1, math.ceil(wait))),
                       "retry-after-ms": str(int(wait * 1000) + 1)}  # fmt: skip
            return web.json_response(body, status=429, headers=headers)
        self.reqs.append(now)
        self.events.append((now, 200))
        return await self._forward(request)

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        data = await request.read()
        fwd = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
        fwd |= {k: v for k, v in request.headers.items() if k.lower().startswith("x-ept-")}
        async with self._session.request(
            request.method, self.upstream + request.path_qs.removeprefix("/v1"), data=data, headers=fwd
        ) as up:
            body = await up.read()
            ctype = up.headers.get("Content-Type", "application/json")
        if up.status == 200:
            self.stats["ok"] += 1
            try:
                usage = json.loads(body).get("usage") or {}
                self.toks.append((time.monotonic(), int(usage.get("total_tokens") or 0)))
                self.stats["tokens"] += self.toks[-1][1]
            except (ValueError, AttributeError):
                pass
        self.last_done = time.monotonic()
        headers = self._headers(self.last_done)
        return web.Response(status=up.status, body=body, headers={**headers, "Content-Type": ctype})

    def start(self) -> RateLimitProxy:
        """Serve on a free loopback port from a thread of its own; returns self (url set)."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)

            async def boot() -> None:
                self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
                app = web.Application()
                app.router.add_route("*", "/v1/{tail:.*}", self._handle)
                self._runner = web.AppRunner(app, access_log=None)
                await self._runner.setup()
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                await site.start()
                port = self._runner.addresses[0][1]
                self.url = f"http://127.0.0.1:{port}/v1"
                ready.set()

            loop.run_until_complete(boot())
            loop.run_forever()

        threading.Thread(target=run, daemon=True, name="ratelimit-proxy").start()
        if not ready.wait(10):
            raise RuntimeError("rate-limit proxy did not start")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def down() -> None:
            if self._session is not None:
                await self._session.close()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(down(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)


def bound_schedule_s(calls: int, tokens: int, rpm: int, tpm: int, window_s: float) -> float:
    """A lower bound no client reaches: whole windows' budgets spent in no time (replies taking none), the
    last window started when the others expired."""
    per_req, per_tok = rpm * window_s / 60, tpm * window_s / 60
    windows = max(math.ceil(calls / per_req), math.ceil(tokens / per_tok))
    return (windows - 1) * window_s


def best_schedule_s(
    calls: int, tokens: int, rpm: int, tpm: int, window_s: float, pace: float, latency_s: float = 0.0
) -> float:
    """The shortest wall time any client sending at most `pace` calls a second (its pace with no limits to
    meet: its concurrency over the server's latency, and its own overhead) can reach through this proxy. Each
    window's budget goes at `pace`; the next window's calls can arrive exactly `window_s` after the ones whose
    room they take — when requests bind (counted at arrival) — or `window_s` after those completed, when
    tokens bind (counted when the reply completes: `latency_s` later); the last window's calls at `pace`.
    bound_schedule_s (replies taking no time) is unreachable by construction: 200 calls of a sliding
    minute's last window take 8 s at 25 calls/s, 12% of a 68-s schedule."""
    per_req, per_tok = rpm * window_s / 60, tpm * window_s / 60
    by_req, by_tok = math.ceil(calls / per_req), math.ceil(tokens / per_tok)
    windows = max(by_req, by_tok)
    shift = window_s + (latency_s if by_tok > by_req else 0.0)
    per_window = min(per_req, per_tok / max(1.0, tokens / max(1, calls)))
    last = max(0.0, calls - (windows - 1) * per_window)
    return (windows - 1) * shift + last / max(pace, 1e-9)


def sustained_schedule_s(calls: int, tokens: int, rpm: int, tpm: int) -> float:
    """The wall time at the sustained limit (no first-window burst): what a pacing client can reach."""
    return max(calls / rpm, tokens / tpm) * 60
