"""inspect_ai eval logs -> `ept analyze`, on logs written by real inspect_ai runs against the simulator.

Two configurations (temperature 0 as a .eval log, temperature 0.7 as a .json log) of the same task run
by inspect's OpenAI-compatible provider; the import must reproduce the tokens the simulator served per
run, inspect's own accuracy per run, and — for temperature 0 — the per-task tokens and scores of the same
calls made our way (greedy jobs through our ProviderClient).
"""

from __future__ import annotations

import csv
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_sim import SIM_KEY

inspect_log = pytest.importorskip("inspect_ai.log")

from cli_runner import run_ept  # noqa: E402

from elo_per_token.contracts.errors import InputError  # noqa: E402
from elo_per_token.contracts.jobs import Job  # noqa: E402
from elo_per_token.egress.client import ProviderClient  # noqa: E402
from elo_per_token.suites.load import load_builtin_suite  # noqa: E402
from elo_per_token.worker.job import run_job  # noqa: E402

N_TASKS, EPOCHS = 8, 2
TESTKIT = Path(__file__).resolve().parents[2] / "testkit"


_cli = functools.partial(run_ept, columns=200)  # the CLI in this process (testkit/cli_runner.py)


def _inspect_run(sim, log_dir: Path, temperature: float, fmt: str) -> str:
    res = subprocess.run(
        [
            sys.executable,
            str(TESTKIT / "inspect_sim_eval.py"),
            sim.url,
            str(log_dir),
            str(temperature),
            fmt,
            str(N_TASKS),
            str(EPOCHS),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "INSPECT_LOG_LEVEL": "warning"},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from elo_per_token.simulator.control import start_in_thread

    sim = start_in_thread({})
    try:
        logs = tmp_path_factory.mktemp("inspect_logs")
        served = {}
        for temp, fmt in ((0.0, "eval"), (0.7, "json")):
            before = sum(sim.control.stats()["tokens"].values())
            path = _inspect_run(sim, logs, temp, fmt)
            served[path] = sum(sim.control.stats()["tokens"].values()) - before
        # The same calls our way: greedy jobs (temperature 0, same system + user messages).
        client = ProviderClient(_profile(sim), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)
        ours = {
            t["task_id"]: run_job(Job("r", t, "greedy", 1, seed=0), client)
            for t in load_builtin_suite("math")[:N_TASKS]
        }
        yield logs, served, ours
    finally:
        sim.stop()


def _profile(sim):
    from elo_per_token.egress.profiles import Profile

    return Profile(
        name="sim",
        protocol="openai",
        api_key_env="EPT_SIM_API_KEY",
        model="ept-sim-1",
        base_url=sim.url,
        timeout=10.0,
        max_retries=3,
        supports_n=True,
    )


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.slow
def test_two_inspect_runs_import_and_analyze(runs, tmp_path):
    logs, served, _ = runs
    rec = tmp_path / "rec.jsonl"
    res = _cli("import", "inspect", str(logs), "-o", str(rec))
    assert res.returncode == 0, res.stderr
    assert f"{2 * N_TASKS * EPOCHS} call and {2 * N_TASKS * EPOCHS} outcome records" in res.stdout
    records = _records(rec)
    assert {r["arm"] for r in records} == {"temperature=0.0", "temperature=0.7"}
    assert {r["replicate"] for r in records} == set(range(EPOCHS))
    # Tokens: the import counts exactly what the simulator served for each run.
    for path, tokens in served.items():
        got = sum(
            r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"]
            for r in records
            if r["kind"] == "call" and r["source"].startswith(path + "#")
        )
        assert got == tokens > 0
    # Scores: the mean outcome per run is inspect's own accuracy metric for that run.
    for path in served:
        log = inspect_log.read_eval_log(path)
        acc = log.results.scores[0].metrics["accuracy"].value
        scores = [
            r["score"] for r in records if r["kind"] == "outcome" and r["source"].startswith(path + "#")
        ]
        assert sum(scores) / len(scores) == pytest.approx(acc)
    ana = _cli("analyze", str(rec), "--rounds", "30", "--out", str(tmp_path / "rep"), "--no-plots")
    assert ana.returncode == 0, ana.stderr
    arms = {a["arm"] for a in csv.DictReader((tmp_path / "rep" / "arms.csv").open())}
    assert arms == {"temperature=0.0", "temperature=0.7"}


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
def test_temperature_zero_run_equals_the_same_calls_recorded_our_way(runs, tmp_path):
    _, served, ours = runs
    path = next(p for p in served if p.endswith(".eval"))
    rec = tmp_path / "t0.jsonl"
    assert _cli("import", "inspect", path, "-o", str(rec)).returncode == 0
    records = [r for r in _records(rec) if r["replicate"] == 0]
    for task_id, res in ours.items():
        mine = [r for r in records if r["task_id"] == f"ept_math-{task_id}"]
        call = next(r for r in mine if r["kind"] == "call")
        outcome = next(r for r in mine if r["kind"] == "outcome")
        assert call["usage"]["prompt_tokens"] + call["usage"]["completion_tokens"] == res.tokens
        assert outcome["score"] == res.outcome.score


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
def test_arm_from_and_bad_logs(runs, tmp_path):
    from elo_per_token.analysis.imports.inspect_log import import_inspect

    logs, served, _ = runs
    col = import_inspect([str(logs)], arm_from="file")
    assert {r["arm"] for r in col.records} == {Path(p).stem for p in served}
    col = import_inspect([str(logs)], arm_from="temperature")
    assert {r["arm"] for r in col.records} == {"temperature=0.0", "temperature=0.7"}
    with pytest.raises(InputError) as e:
        import_inspect([str(logs)], arm_from="no_such_key")
    assert e.value.field == "arm-from"
    # Same arm name for both runs: sample/epoch pairs collide -> the second run's first sample is named.
    with pytest.raises(InputError) as e:
        import_inspect([str(logs)], arm_from="model")
    assert e.value.line == 1 and e.value.field == "id"
    junk = tmp_path / "junk.json"
    junk.write_text('{"not": "an inspect log"}')
    res = _cli("import", "inspect", str(junk), next(iter(served)), "-o", str(tmp_path / "x.jsonl"))
    assert res.returncode == 2 and str(junk) in res.stderr and not (tmp_path / "x.jsonl").exists()
    res = _cli(
        "import", "inspect", str(junk), next(iter(served)), "-o", str(tmp_path / "x.jsonl"), "--skip-bad"
    )
    assert res.returncode == 0 and "skipped 1 bad line" in res.stderr


def test_score_mapping_uses_inspect_values():
    from inspect_ai.scorer import Score

    from elo_per_token.analysis.imports.inspect_log import score_of

    assert score_of({"m": Score(value="C")}, None)[0] == 1.0
    assert score_of({"m": Score(value="P")}, None)[0] == 0.5
    assert score_of({"m": Score(value="I")}, None)[0] == 0.0
    assert score_of({"m": Score(value="N")}, None)[0] == 0.0
    assert score_of({"m": Score(value=0.25)}, None)[0] == 0.25
    assert score_of({"a": Score(value="I"), "b": Score(value=True)}, "b")[0] == 1.0
    assert score_of({"m": Score(value={"x": "C", "y": 0.0})}, None)[0] == 0.5
    assert score_of({"m": Score(value={"x": "C", "y": 0.0})}, "m.y")[0] == 0.0
    assert score_of({"m": Score(value=7)}, None)[1] == "scores.m.value"
    assert score_of({"m": Score(value="C")}, "other")[1] == "scores"
    assert score_of(None, None) == (None, None, "")
