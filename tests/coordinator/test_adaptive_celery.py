"""`ept sweep --adaptive` on Celery against the simulator: the coordinator is SIGKILLed mid-sweep and rerun;
nothing is lost or duplicated and `ept status` shows the rounds and the arms still running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fixtures_plans import plan_toml
from test_sweep_celery import celery_setup, comparable  # noqa: F401  (celery_setup is a fixture)

from elo_per_token.coordinator.adaptive.core import run_adaptive
from elo_per_token.coordinator.adaptive.replay import replay_runner
from elo_per_token.coordinator.adaptive.run_table import RunTable, read_run_table
from elo_per_token.coordinator.adaptive.sweep import settings_of
from elo_per_token.coordinator.plan import parse_plan
from elo_per_token.coordinator.sweep import plan_jobs
from elo_per_token.ledger import open_ledger

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.mark.parametrize("futility", [False, True])
def test_adaptive_celery_sweep_resumes_after_a_coordinator_kill(
    tmp_path,
    celery_setup,  # noqa: F811  (the fixture imported above)
    s3_bucket,
    redis_server,
    futility,
):
    """With futility the sweep ends after round 2 (the two arms are not separable on 12 tasks), so replies
    are slowed until round 2 is surely still running when its 10th job lands (greedy's land first, majority's
    take three calls); the rerun must rebuild the futility state from the ledger and end the same way."""
    sim, queue, _ = celery_setup
    sim.control.set(latency_ms=400.0 if futility else 40.0)
    url = f"s3://{s3_bucket}/ad{int(futility)}"
    run_name = f"adk{int(futility)}"
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(plan_toml(
        [("greedy", [1]), ("majority", [3])], {"rate_limits.sim-test": {"rpm": 1000000, "tpm": 1000000000},
                                               "adaptive": {"rounds": 3, "min_rounds": 1,
                                                            "futility": futility, "epsilon_elo": 0}},
        name=run_name, profile="sim-test", suites=["math", "tool_use"], tasks_per_family=6, seed=13, ledger=url,
        executor="celery", queue=queue, concurrency=8, batch_size=5, bootstrap_rounds=0,
    ))  # fmt: skip
    env = {
        **os.environ,
        "EPT_BROKER_URL": redis_server.url,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    led = open_ledger(url)
    cmd = [sys.executable, "-m", "elo_per_token", "sweep", str(plan_file), "--adaptive", "--no-analysis"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while len(led.list_jobs(run_name)) < 10 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    st = subprocess.run([sys.executable, "-m", "elo_per_token", "status", run_name, "--ledger", url], env=env,
                        capture_output=True, text=True, timeout=120)  # fmt: skip
    assert st.returncode == 0 and "adaptive: round 1 of 3" in st.stdout, st.stdout + st.stderr
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Adaptive sweep" in r.stdout and "why it stopped" in r.stdout
    assert ("not separable within the grid" in r.stdout) == futility, r.stdout
    plan = parse_plan(plan_file.read_text())
    by_key = {j.key: j for j in plan_jobs(plan)}
    keys = led.list_jobs(run_name)
    # Nothing duplicated: every job object was requested exactly as often as it has calls.
    calls = {k: len(v[1]) for k, v in comparable(led, run_name, [by_key[k] for k in keys]).items()}
    assert sim.control.stats()["by_job"] == calls
    # Nothing lost: replaying the policy on the ledger, over the plan's whole grid (a sweep that stopped early
    # holds only some tasks), asks for exactly the cells the ledger holds.
    table = _on_plan_grid(read_run_table([led.run_url(run_name)]), plan_jobs(plan))
    asked: set[tuple[int, int]] = set()
    serve = replay_runner(table)

    def runner(rnd, tasks, arms):
        asked.update((t, a) for t in tasks for a in arms)
        return serve(rnd, tasks, arms)

    res = run_adaptive(table.families, table.arms, runner, settings_of(plan), weights=plan.weights or None)
    held = {
        (t, a)
        for t in range(len(table.tasks))
        for a in range(len(table.arms))
        if table.scores[t, a] == table.scores[t, a]
    }
    assert asked == held and len(keys) == len(held)
    assert (res.rounds_run < 3) == futility  # with futility the grid is not exhausted


def _on_plan_grid(table: RunTable, jobs: list) -> RunTable:
    """The run's table on every task and arm of the plan (sorted, as the live sweep orders them), NaN where
    the ledger holds nothing."""
    tasks = sorted({j.task_id for j in jobs})
    fam = {j.task_id: j.family for j in jobs}
    arms = sorted({j.arm for j in jobs})
    scores, tokens = np.full((len(tasks), len(arms)), np.nan), np.full((len(tasks), len(arms)), np.nan)
    ti, ai = table.index()
    for r, t in enumerate(tasks):
        for c, a in enumerate(arms):
            if t in ti and a in ai:
                scores[r, c], tokens[r, c] = table.scores[ti[t], ai[a]], table.tokens[ti[t], ai[a]]
    return replace(
        table, tasks=tasks, families=[fam[t] for t in tasks], arms=arms, scores=scores, tokens=tokens
    )
