"""Rate limits: how many 429s, and how long, for ept's limiter vs the plain openai SDK behind a rate-limiting proxy.

Three clients send the same calls (8 threads each) through benchmarks/ratelimit_proxy.py in front of the
simulator: ept with the limits configured on the profile, ept with none (learning them from the proxy's
x-ratelimit-* headers), and the plain openai SDK with its default retries (a call that still fails is sent
again after a second). Reported per client: calls answered 429, wall time, and wall time as a share of the best
schedule the window allows and of the sustained-rate schedule.

    python3 benchmarks/bench_ratelimit.py --rpm 300 --tpm 60000 --window 60 --calls 500
    python3 benchmarks/bench_ratelimit.py --rpm 300 --tpm 60000 --window 10 --calls 500
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ratelimit_proxy import RateLimitProxy, best_schedule_s, sustained_schedule_s

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


def measure(sim_url: str, client: str, *, rpm: int, tpm: int, window_s: float, calls: int, threads: int = 8,
            max_tokens: int = 64) -> dict[str, Any]:  # fmt: skip
    """One client's run through a fresh proxy: its 429s, wall time and shares of the best schedules."""
    proxy = RateLimitProxy(sim_url, rpm=rpm, tpm=tpm, window_s=window_s).start()
    try:
        stats = None
        if client == "sdk":
            fn = sdk_caller(proxy.url, max_tokens)
        else:
            fn, c = ept_caller(proxy.url, rpm if client == "ept-limits" else None,
                               tpm if client == "ept-limits" else None, max_tokens)  # fmt: skip
            stats = c.rate_limiter.stats
        wall, tokens = _run_threads(calls, threads, fn)
    finally:
        proxy.stop()
    best = best_schedule_s(calls, tokens, rpm, tpm, window_s)
    sustained = sustained_schedule_s(calls, tokens, rpm, tpm)
    row = {"client": client, "window_s": window_s, "calls": calls, "tokens": tokens, "answered_429": proxy.stats["429"],
           "share_429": proxy.stats["429"] / max(1, proxy.stats["requests"]), "wall_s": round(wall, 2),
           "best_s": round(best, 1), "of_best": round(best / wall, 3), "sustained_s": round(sustained, 1),
           "of_sustained": round(sustained / wall, 3)}  # fmt: skip
    if stats is not None:
        row |= {"limiter_wait_s": round(stats.waited_s, 1), "pauses": stats.pauses}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rpm", type=int, default=300)
    ap.add_argument("--tpm", type=int, default=60000)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--latency-ms", type=float, default=300.0)
    ap.add_argument("--clients", default="ept-limits,ept-headers,sdk")
    a = ap.parse_args()
    from elo_per_token.simulator.control import start_in_thread

    sim = start_in_thread({"latency_ms": a.latency_ms, "latency_jitter_ms": a.latency_ms / 2})
    try:
        for client in a.clients.split(","):
            row = measure(sim.url, client, rpm=a.rpm, tpm=a.tpm, window_s=a.window, calls=a.calls)
            print(json.dumps(row), flush=True)
    finally:
        sim.stop()


if __name__ == "__main__":
    main()
