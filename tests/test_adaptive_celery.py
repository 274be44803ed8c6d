"""`ept sweep --adaptive` on Celery against the simulator: the coordinator is SIGKILLed mid-sweep and rerun;
nothing is lost or duplicated and `ept status` shows the rounds and the arms still running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures_plans import plan_toml
from test_sweep_celery import celery_setup, comparable  # noqa: F401  (celery_setup is a fixture)

from elo_per_token.analysis.run_table import read_run_table
from elo_per_token.coordinator.adaptive import run_adaptive
from elo_per_token.coordinator.adaptive_sweep import settings_of
from elo_per_token.coordinator.plan import parse_plan
from elo_per_token.coordinator.replay import replay_runner
from elo_per_token.coordinator.sweep import plan_jobs
from elo_per_token.ledger import open_ledger

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_adaptive_celery_sweep_resumes_after_a_coordinator_kill(
    tmp_path,
    celery_setup,  # noqa: F811  (the fixture imported above)
    s3_bucket,
    redis_server,
):
    sim, queue, _ = celery_setup
    sim.control.set(latency_ms=40.0)
    url = f"s3://{s3_bucket}/ad"
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(plan_toml(
        [("greedy", [1]), ("majority", [3])], {"rate_limits.sim-test": {"rpm": 1000000, "tpm": 1000000000},
                                               "adaptive": {"rounds": 3, "min_rounds": 1,
                                                            "futility": False}},
        name="adk", profile="sim-test", suites=["math", "tool_use"], tasks_per_family=6, seed=13, ledger=url,
        executor="celery", queue=queue, concurrency=8, batch_size=5, bootstrap_rounds=0,
    ))  # fmt: skip
    env = {
        **os.environ,
        "EPT_BROKER_URL": redis_server.url,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    led = open_ledger(url)
    cmd = [sys.executable, "-m", "elo_per_token", "sweep", str(plan_file), "--adaptive", "--no-analysis"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while len(led.list_jobs("adk")) < 10 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    st = subprocess.run([sys.executable, "-m", "elo_per_token", "status", "adk", "--ledger", url], env=env,
                        capture_output=True, text=True, timeout=120)  # fmt: skip
    assert st.returncode == 0 and "adaptive: round 1 of 3" in st.stdout, st.stdout + st.stderr
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Adaptive sweep" in r.stdout and "why it stopped" in r.stdout
    plan = parse_plan(plan_file.read_text())
    by_key = {j.key: j for j in plan_jobs(plan)}
    keys = led.list_jobs("adk")
    # Nothing duplicated: every job object was requested exactly as often as it has calls.
    calls = {k: len(v[1]) for k, v in comparable(led, "adk", [by_key[k] for k in keys]).items()}
    assert sim.control.stats()["by_job"] == calls
    # Nothing lost: replaying the policy on the ledger asks for exactly the cells the ledger holds.
    table = read_run_table([led.run_url("adk")])
    asked: set[tuple[int, int]] = set()
    serve = replay_runner(table)

    def runner(rnd, tasks, arms):
        asked.update((t, a) for t in tasks for a in arms)
        return serve(rnd, tasks, arms)

    run_adaptive(table.families, table.arms, runner, settings_of(plan), weights=plan.weights or None)
    held = {
        (t, a)
        for t in range(len(table.tasks))
        for a in range(len(table.arms))
        if table.scores[t, a] == table.scores[t, a]
    }
    assert asked == held and len(keys) == len(held)
