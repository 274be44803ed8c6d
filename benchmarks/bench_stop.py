"""Stopping a sweep: seconds from SIGTERM to exit, and API requests sent after the signal.

    PYTHONPATH=$PWD python benchmarks/bench_stop.py storm|slow [CAP=120 env: give up waiting after CAP s]

storm: every request gets 429 with Retry-After 8 s; slow: 1.5 s latency. 40 greedy jobs, concurrency 2,
SIGTERM once 3 requests reached the simulator. Run it against two checkouts (PYTHONPATH) to compare.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("PYTHONPATH") or str(Path(__file__).resolve().parents[1]))
from elo_per_token.simulator.control import start_in_thread

mode = sys.argv[1] if len(sys.argv) > 1 else "storm"
cfg = {"api_key": "sk-canary-0123456789abcdefWXYZ"}
if mode == "storm":
    cfg.update(rate_429=1.0, retry_after=8)
elif mode == "slow":
    cfg.update(latency_ms=1500)
sim = start_in_thread(cfg)
d = Path(tempfile.mkdtemp())
suite = d / "s.jsonl"
suite.write_text(
    "".join(
        json.dumps(
            {
                "task_id": f"t{i}",
                "family": "math",
                "prompt": "2+3?",
                "reference": 5,
                "grader": {"type": "numeric"},
            }
        )
        + "\n"
        for i in range(40)
    )
)
(d / "p.toml").write_text(
    f'name = "m"\nprofile = "simx"\nsuites = ["{suite}"]\nledger = "{d}/led"\nconcurrency = 2\n[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n'
)
(d / "prof.toml").write_text(
    f'[profiles.simx]\nprotocol = "openai"\nbase_url = "{sim.url}"\napi_key_env = "K"\nmodel = "ept-sim-1"\n'
)
env = {**os.environ, "EPT_PROFILES": str(d / "prof.toml"), "K": cfg["api_key"]}
p = subprocess.Popen(
    [sys.executable, "-m", "elo_per_token", "sweep", str(d / "p.toml"), "--no-analysis"],
    env=env,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
)
while sim.control.stats()["completion_requests"] < 3:
    time.sleep(0.05)
n0 = sim.control.stats()["completion_requests"]
t0 = time.monotonic()
p.send_signal(signal.SIGTERM)
try:
    p.wait(timeout=float(os.environ.get("CAP", "120")))
    took = time.monotonic() - t0
    rc = p.returncode
except subprocess.TimeoutExpired:
    took, rc = None, "still running"
    p.kill()
n1 = sim.control.stats()["completion_requests"]
print(
    f"{mode}: SIGTERM after {n0} requests -> exit {rc} after {took if took is None else round(took, 1)} s; requests after the signal: {n1 - n0}"
)
sim.stop()
