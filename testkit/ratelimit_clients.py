"""Clients for the rate-limit measurements (tests/worker/test_ratelimit_pacing.py, benchmarks/bench_ratelimit.py):
the same calls (8 threads) sent through testkit/ratelimit_proxy.py by ept with the limits configured, ept with none
(learning them from the proxy's x-ratelimit-* headers), and the plain openai SDK with its default retries (a call
that still fails is sent again after a second). `measure` reports one client's 429s and wall time as a share of
the best schedule the window allows and of the sustained-rate schedule."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ratelimit_proxy import RateLimitProxy, best_schedule_s, bound_schedule_s, sustained_schedule_s

KEY = "sk-bench-ratelimit-0000000000"


def _messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Question {i}: what is {i} plus {i * 7 % 13}? " + "ctx " * (i % 40)}]


def _run_threads(n_calls: int, threads: int, call: Callable[[int], int]) -> tuple[float, int]:
    """n_calls calls over `threads` threads; (wall seconds, tokens answered)."""
    next_i, lock, tokens = iter(range(n_calls)), threading.Lock(), [0]

    def work() -> None:
        while True:
            with lock:
                i = next(next_i, None)
            if i is None:
                return
            used = call(i)
            with lock:
                tokens[0] += used

    t0 = time.monotonic()
    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.monotonic() - t0, tokens[0]


def ept_caller(
    url: str, rpm: int | None, tpm: int | None, max_tokens: int
) -> tuple[Callable[[int], int], Any]:
    """ept's ProviderClient with its limiter (limits configured, or none: learned from the headers)."""
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.egress.profiles import Profile
    from elo_per_token.worker.ratelimit import Limits, make_rate_limiter

    prof = Profile(name="bench-rl", protocol="openai", base_url=url, api_key_env="EPT_BENCH_KEY", model="ept-sim-1",
                   max_retries=8, rpm=rpm, tpm=tpm)  # fmt: skip
    limiter = make_rate_limiter(prof.name, Limits(rpm, tpm))
    client = ProviderClient(prof, api_key=KEY, rate_limiter=limiter)

    def call(i: int) -> int:
        r = client.chat(_messages(i), seed=i, max_tokens=max_tokens)
        return int(r.usage["total_tokens"]) if r.usage else 0

    return call, client


class _Oracle:
    """A client that knows the proxy's window and budgets (no client does): it keeps its own sliding log of
    arrivals and of completed tokens and sends the moment the window has room, never into a full one. It shows
    that ratelimit_proxy.best_schedule_s is reachable (benchmarks/bench_ratelimit.py --clients oracle)."""

    def __init__(self, window_s: float, max_req: float, max_tok: float, est: int) -> None:
        self.w, self.max_req, self.max_tok, self.est = window_s + 0.1, max_req, max_tok, est
        self.sent: deque[float] = deque()
        self.done: deque[tuple[float, int]] = deque()
        self.inflight = 0
        self.cond = threading.Condition()

    def acquire(self) -> None:
        with self.cond:
            while True:
                now = time.monotonic()
                while self.sent and self.sent[0] <= now - self.w:
                    self.sent.popleft()
                while self.done and self.done[0][0] <= now - self.w:
                    self.done.popleft()
                used = sum(n for _, n in self.done) + self.inflight * self.est
                if len(self.sent) < self.max_req and used + self.est <= self.max_tok:
                    self.sent.append(now)
                    self.inflight += 1
                    return
                # The next expiry, or a reply (record notifies) when calls in flight fill the window.
                ends = [self.sent[0] + self.w] if self.sent else []
                ends += [self.done[0][0] + self.w] if self.done else []
                self.cond.wait(max(0.001, min(ends, default=now + 0.05) - now))

    def record(self, tokens: int) -> None:
        with self.cond:
            self.inflight -= 1
            self.done.append((time.monotonic(), tokens))
            self.cond.notify_all()


def oracle_caller(url: str, window_s: float, rpm: int, tpm: int, max_tokens: int) -> Callable[[int], int]:
    """ept's ProviderClient without a limiter, behind the _Oracle (an estimate of 100 tokens a call)."""
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.egress.profiles import Profile

    prof = Profile(name="bench-oracle", protocol="openai", base_url=url, api_key_env="EPT_BENCH_KEY",
                   model="ept-sim-1", max_retries=8)  # fmt: skip
    client = ProviderClient(prof, api_key=KEY, rate_limiter=None)
    oracle = _Oracle(window_s, rpm * window_s / 60, tpm * window_s / 60, 100)

    def call(i: int) -> int:
        oracle.acquire()
        r = client.chat(_messages(i), seed=i, max_tokens=max_tokens)
        used = int(r.usage["total_tokens"]) if r.usage else 0
        oracle.record(used)
        return used

    return call


def sdk_caller(url: str, max_tokens: int) -> Callable[[int], int]:
    """The plain openai SDK (default max_retries=2); a call that still fails is sent again after 1 s."""
    import openai

    oc = openai.OpenAI(base_url=url, api_key=KEY)

    def call(i: int) -> int:
        while True:
            try:
                r = oc.chat.completions.create(model="ept-sim-1", messages=_messages(i), seed=i,  # type: ignore[arg-type]
                                               max_tokens=max_tokens)  # fmt: skip
                return r.usage.total_tokens if r.usage else 0
            except openai.RateLimitError:
                time.sleep(1.0)

    return call


def free_rate(sim_url: str, calls: int, threads: int = 8, max_tokens: int = 64) -> float:
    """Calls per second ept's client makes through the proxy with no limits to meet (what pacing can't beat)."""
    proxy = RateLimitProxy(sim_url, rpm=10**9, tpm=10**12, window_s=60).start()
    try:
        ept_caller(sim_url, None, None, max_tokens)[0](0)  # warm: lazy imports are not the client's pace
        wall, _ = _run_threads(calls, threads, ept_caller(proxy.url, None, None, max_tokens)[0])
    finally:
        proxy.stop()
    return calls / wall


def measure(sim_url: str, client: str, *, rpm: int, tpm: int, window_s: float, calls: int, threads: int = 8,
            max_tokens: int = 64, free: float | None = None, latency_s: float = 0.0) -> dict[str, Any]:  # fmt: skip
    """One client's run through a fresh proxy: its 429s, wall time and shares of the best schedules (with
    `free`, the calls per second of free_rate: also of the reachable one)."""
    proxy = RateLimitProxy(sim_url, rpm=rpm, tpm=tpm, window_s=window_s).start()
    try:
        stats = None
        if client == "sdk":
            fn = sdk_caller(proxy.url, max_tokens)
        elif client == "oracle":
            fn = oracle_caller(proxy.url, window_s, rpm, tpm, max_tokens)
        else:
            # One call straight to the simulator first: the process's lazy imports (the token estimate's
            # tokenizer: seconds on a loaded machine) are not the limiter's time.
            ept_caller(sim_url, None, None, max_tokens)[0](0)
            fn, c = ept_caller(proxy.url, rpm if client == "ept-limits" else None,
                               tpm if client == "ept-limits" else None, max_tokens)  # fmt: skip
            stats = c.rate_limiter.stats
        wall, tokens = _run_threads(calls, threads, fn)
    finally:
        proxy.stop()
    row = schedule_row(client, proxy.stats, calls, tokens, wall, rpm=rpm, tpm=tpm, window_s=window_s, free=free,
                       latency_s=latency_s)  # fmt: skip
    if stats is not None:
        row |= {"limiter_wait_s": round(stats.waited_s, 1), "pauses": stats.pauses}
    return row


def schedule_row(client: str, proxy_stats: dict[str, int], calls: int, tokens: int, wall: float, *, rpm: int,
                 tpm: int, window_s: float, free: float | None = None, latency_s: float = 0.0) -> dict[str, Any]:  # fmt: skip
    """One measured run as a row: its 429s and its wall time as a share of the schedules the limits allow. With
    `free` (the client's calls per second with no limits to meet): of the best schedule (ratelimit_proxy.
    best_schedule_s); always of the zero-latency bound and of the sustained rate."""
    bound = bound_schedule_s(calls, tokens, rpm, tpm, window_s)
    sustained = sustained_schedule_s(calls, tokens, rpm, tpm)
    row = {"client": client, "window_s": window_s, "calls": calls, "tokens": tokens,
           "answered_429": proxy_stats["429"], "share_429": round(proxy_stats["429"] / max(1, calls), 4),
           "wall_s": round(wall, 2), "bound_s": round(bound, 1), "of_bound": round(bound / wall, 3),
           "sustained_s": round(sustained, 1), "of_sustained": round(sustained / wall, 3)}  # fmt: skip
    if free:
        best = best_schedule_s(calls, tokens, rpm, tpm, window_s, free, latency_s)
        row |= {
            "free_calls_per_s": round(free, 1),
            "best_s": round(best, 1),
            "of_best": round(best / wall, 3),
        }
    return row
