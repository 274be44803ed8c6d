"""Rate limits: how many 429s, and how long, for ept's limiter vs the plain openai SDK behind a rate-limiting proxy.

Three clients send the same calls (8 threads each) through testkit/ratelimit_proxy.py in front of the
simulator: ept with the limits configured on the profile, ept with none (learning them from the proxy's
x-ratelimit-* headers), and the plain openai SDK with its default retries (a call that still fails is sent
again after a second). Reported per client: calls answered 429, wall time, and wall time as a share of the best
schedule (`of_best`: the window's budgets at the client's own pace with no limits, measured first through a
proxy without limits — see tests/ratelimit_proxy.best_schedule_s), of the zero-latency bound no client
reaches (`of_bound`) and of the sustained rate (`of_sustained`). `--clients oracle` runs a client that knows the
proxy's window and budgets (tests/ratelimit_clients._Oracle): it shows the best schedule is reachable.

    python3 benchmarks/bench_ratelimit.py --rpm 300 --tpm 60000 --window 60 --calls 500
    python3 benchmarks/bench_ratelimit.py --rpm 300 --tpm 60000 --window 10 --calls 500
    python3 benchmarks/bench_ratelimit.py --window 10 --clients celery-limits,celery-headers  # 2 workers x 4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

# The proxy and the clients are the tests' helpers (testkit/ratelimit_proxy.py, testkit/ratelimit_clients.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testkit"))
from ratelimit_clients import free_rate, measure


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
        clients = a.clients.split(",")
        # Each kind of client's own pace with no limits to meet (the best schedule's pace): a Celery sweep's
        # (per-job bookkeeping, its jobs' parallel calls) is not the 8 local threads'.
        free = free_rate(sim.url, a.calls)
        print(json.dumps({"client": "free (no limits)", "calls_per_s": round(free, 1)}), flush=True)
        free_celery = 0.0
        if any(c.startswith("celery") for c in clients):
            row = _celery(sim.url, "celery-free", a, 0.0)
            free_celery = float(row["calls_per_s"])
            print(json.dumps(row), flush=True)
        for client in clients:
            if client.startswith("celery"):
                row = _celery(sim.url, client, a, free_celery)
            else:
                row = measure(sim.url, client, rpm=a.rpm, tpm=a.tpm, window_s=a.window, calls=a.calls, free=free,
                              latency_s=a.latency_ms / 1000)  # fmt: skip
            print(json.dumps(row), flush=True)
    finally:
        sim.stop()
        if _redis:
            from fixtures_services import stop_proc

            stop_proc(_redis[0].proc)


_redis: list[Any] = []


def _celery(sim_url: str, client: str, a: argparse.Namespace, free: float) -> dict[str, Any]:
    """A Celery sweep of about --calls calls (6 calls per task) on a real Redis started once."""
    from fixtures_services import start_redis
    from ratelimit_celery import measure_celery

    tmp = Path(tempfile.mkdtemp(prefix="bench-rl-"))
    if not _redis:
        _redis.append(start_redis(tmp / "redis"))
    return measure_celery(sim_url, client, _redis[0].url, tmp / client, rpm=a.rpm, tpm=a.tpm, window_s=a.window,
                          per_family=max(1, round(a.calls / 12)), free=free, latency_s=a.latency_ms / 1000)  # fmt: skip


if __name__ == "__main__":
    main()
