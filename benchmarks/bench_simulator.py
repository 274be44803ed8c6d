"""Simulator throughput and ProviderClient overhead (run on demand; not a test).

    python benchmarks/bench_simulator.py [--calls 400] [--concurrency 32]

Starts `ept simulate` in a subprocess (latency 0, so the client and server do not share a GIL), then:
  1. server throughput: an aiohttp client with `--concurrency` requests in flight -> requests/s;
  2. a raw `openai` SDK loop (sequential) -> seconds per call;
  3. ProviderClient.chat in the same loop -> seconds per call, and the ratio / overhead against (2),
     in wall time and in client-process CPU time (steadier on a shared machine).
(2) and (3) are interleaved in rounds so machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KEY = "sk-bench-dummy-key-0000"
MSGS = [{"role": "user", "content": "What is 17 times 3? Think, then give 'Answer: N'."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-m", "elo_per_token", "simulate", "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).read()
            return p
        except OSError:
            time.sleep(0.2)
    p.kill()
    raise SystemExit("simulator did not start")


async def aiohttp_throughput(url: str, total: int, concurrency: int) -> float:
    import aiohttp

    body = json.dumps({"model": "ept-sim-1", "messages": MSGS, "seed": 1}).encode()
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:

        async def one() -> None:
            async with sem, s.post(url + "/chat/completions", data=body, headers=headers) as r:
                assert r.status == 200
                await r.read()

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(total)))
        return total / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400, help="sequential calls per client per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()

    import openai

    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.egress.profiles import Profile

    port = free_port()
    server = start_server(port)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        tput = [asyncio.run(aiohttp_throughput(url, args.calls * 4, args.concurrency)) for _ in range(2)]
        raw = openai.OpenAI(api_key=KEY, base_url=url, max_retries=0)
        prof = Profile(
            name="bench", protocol="openai", base_url=url, api_key_env="BENCH_KEY", model="ept-sim-1"
        )
        ours = ProviderClient(prof, api_key=KEY)

        def raw_call(i: int) -> None:
            r = raw.chat.completions.create(model="ept-sim-1", messages=MSGS, seed=i, temperature=0.7)
            assert r.usage is not None

        def our_call(i: int) -> None:
            r = ours.chat(MSGS, seed=i, temperature=0.7, meta={"Job": "bench", "Arm": "a@1"})
            assert r.usage is not None

        for f in (raw_call, our_call):  # warm up connections and imports
            for i in range(20):
                f(i)
        t_raw, t_ours, cpu_raw, cpu_ours = [], [], [], []
        for _ in range(args.rounds):
            for f, acc, cpu in ((raw_call, t_raw, cpu_raw), (our_call, t_ours, cpu_ours)):
                t0, c0 = time.perf_counter(), time.process_time()
                for i in range(args.calls):
                    f(i)
                acc.append((time.perf_counter() - t0) / args.calls)
                cpu.append((time.process_time() - c0) / args.calls)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()

    raw_s, ours_s = statistics.median(t_raw), statistics.median(t_ours)
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, openai {openai.__version__}")
    print(
        f"simulator throughput at zero latency (aiohttp client, {args.concurrency} in flight): "
        f"{', '.join(f'{x:,.0f}' for x in tput)} requests/s"
    )
    print(
        f"raw openai loop (sequential):  {raw_s * 1e3:.3f} ms/call  ({1 / raw_s:,.0f} requests/s)"
        f"  rounds: {', '.join(f'{x * 1e3:.3f}' for x in t_raw)}"
    )
    print(
        f"ProviderClient loop:           {ours_s * 1e3:.3f} ms/call  ({1 / ours_s:,.0f} requests/s)"
        f"  rounds: {', '.join(f'{x * 1e3:.3f}' for x in t_ours)}"
    )
    print(
        f"ProviderClient / raw openai: {ours_s / raw_s:.3f}x  (overhead {1e3 * (ours_s - raw_s):+.3f} ms/call)"
    )
    # Client-process CPU per call is steadier than wall time on a shared machine.
    cr, co = statistics.median(cpu_raw), statistics.median(cpu_ours)
    print(
        f"client CPU per call: raw openai {cr * 1e3:.3f} ms, ProviderClient {co * 1e3:.3f} ms  "
        f"ratio {co / cr:.3f}x  (overhead {1e3 * (co - cr):+.3f} ms/call)"
    )


if __name__ == "__main__":
    main()
