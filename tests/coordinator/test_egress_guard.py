"""The egress guard through `ept sweep` (a subprocess, real HTTP): a proxy that answers a bad key with
400 "No connected db" (LiteLLM) and a dead server (connection refused) both stop the sweep after the
guard's streak, name the key variable or the endpoint, and exit with the egress code — instead of running
every job's retries. A 400 from the proxy is never suggested for `ept retry` as a permanent failure."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from elo_per_token.contracts.errors import EXIT_STOPPED_EGRESS
from elo_per_token.coordinator.sweep_tally import EGRESS_ABORT_AFTER

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _setup(tmp_path: Path, base_url: str, n_tasks: int = 20) -> tuple[Path, dict[str, str]]:
    prof = tmp_path / "profiles.toml"
    prof.write_text(
        f'[profiles.px]\nprotocol = "openai"\nbase_url = "{base_url}"\napi_key_env = "EPT_PX_KEY"\n'
        'model = "ept-sim-1"\ntimeout = 5\nmax_retries = 3\n'
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'name = "guard"\nprofile = "px"\nsuites = ["math"]\ntasks_per_family = {n_tasks}\nconcurrency = 2\n'
        f'ledger = "{tmp_path / "led"}"\nbootstrap_rounds = 0\n[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n'
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "EPT_PROFILES": str(prof), "COLUMNS": "200",
           "EPT_PX_KEY": "sk-wrong-0000000000000000000000"}  # fmt: skip
    return plan, env


def _sweep(plan: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "elo_per_token", "sweep", str(plan)], capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip


def test_proxy_400_on_every_request_is_credential_and_stops_the_sweep(tmp_path, make_sim):
    sim = make_sim(api_key="sk-right-1111111111111111111", auth_style="litellm")
    plan, env = _setup(tmp_path, sim.url)
    r = _sweep(plan, env)
    out = r.stdout + r.stderr
    assert r.returncode == EXIT_STOPPED_EGRESS, out
    assert "credential" in out and "stopped" in out and "EPT_PX_KEY" in out
    assert "permanent failures repeat" not in out  # classed credential, not permanent
    # Each job sent one request (a 4xx before any success is not retried); the guard stopped the rest.
    n400 = sim.control.stats()["by_status"].get("400", 0)
    assert EGRESS_ABORT_AFTER <= n400 < 20, n400
    assert "sk-wrong-0000000000000000000000" not in out


def test_dead_endpoint_opens_the_circuit_and_stops_fast_without_counting_connects_as_calls(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plan, env = _setup(tmp_path, f"http://127.0.0.1:{port}/v1")
    t0 = time.monotonic()
    r = _sweep(plan, env)
    took = time.monotonic() - t0
    out = (r.stdout + r.stderr).replace("\n", " ")
    assert r.returncode == EXIT_STOPPED_EGRESS, out
    assert "unreachable" in out and f"127.0.0.1:{port}" in out and "stopped" in out
    assert " 0 calls " in out  # failed connection attempts are not calls
    # 20 jobs x 4 attempts with backoff would take far longer; the circuit fails jobs fast once open.
    assert took < 60, took
