"""Hostile replies through extraction and grading (issue 23): bounded time, a score, never a frozen worker.

Each case runs the real path: the simulator over HTTP answers with the hostile reply, `run_job` extracts,
grades (the code grader in the real bwrap sandbox, math-verify in its killable child process) and records.
A reply that makes grading raise must come back as a scored loss that keeps its tokens (score 0, no
error), never as an unscored "task" failure. Every case fails on c20688e (a hang past the guard, a raise,
or an unscored outcome) and passes after.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from fixtures_sim import SIM_KEY
from optional import bfcl_tasks

from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.prompts import parse_score, parse_winner
from elo_per_token.contracts.records import JobResult
from elo_per_token.contracts.tasks import validate_task
from elo_per_token.egress.client import ProviderClient
from elo_per_token.simulator.generic import BrainReply, BrainRequest
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.job import _grade, run_job
from elo_per_token.worker.sandbox import checks
from elo_per_token.worker.strategies.base import Candidate, StrategyResult

MATH = load_builtin_suite("math")
CODE = load_builtin_suite("code")
TOOL = load_builtin_suite("tool_use")
LATEX_TASK = validate_task(
    {
        "task_id": "m-latex",
        "family": "math",
        "prompt": "Simplify 6/8.",
        "reference": r"\frac34",
        "grader": {"type": "math"},
    }
)
HANG_GUARD_S = 120.0  # far above any bound asserted below: only a frozen grader reaches it


class ReplyBrain:
    """Answers every request with the same text (what a degenerate or hostile model sends)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def respond(self, req: BrainRequest) -> BrainReply:
        return BrainReply(text=self.text, completion_tokens=50)


def _client(sim: Any) -> ProviderClient:
    return ProviderClient(sim.profile(supports_n=False), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)


def _driver(
    spec: dict[str, Any], timeout: float = HANG_GUARD_S, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run one case in its own process (testkit/grading_driver.py). A case that holds the GIL (c20688e's regex,
    sympy's integer power) freezes a whole interpreter, a test thread's join() included: only a process
    can be stopped at a deadline."""
    import json
    import os
    import subprocess
    import sys

    driver = os.path.join(os.path.dirname(__file__), "..", "..", "testkit", "grading_driver.py")
    try:
        p = subprocess.run(
            [sys.executable, driver],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{spec['kind']} still running after {timeout:g}s: the worker would be frozen")
    assert p.returncode == 0, p.stderr[-3000:]
    out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def _loss_dict(r: dict[str, Any]) -> None:
    """_scored_loss for a driver's run_job report."""
    assert r["error"] is None, r["error"]
    assert r["score"] == 0.0 and r["correct"] is False, r["grader"]
    assert r["tokens"] > 0 and all(e is None for e in r["call_errors"])


def _scored_loss(res: JobResult) -> None:
    """Scored 0 with its tokens, no error: the job stays in the fit and is never paid for again."""
    o = res.outcome
    assert o.error is None, o.error
    assert o.score == 0.0 and o.correct is False, o.grader
    assert res.tokens > 0 and all(c.error is None for c in res.calls)


# ---- item 1: extraction in linear time ----------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        "\n" * 2_000,  # c20688e: cubic, ~40 s of CPU with the GIL held (1,200 newlines: 8.7 s)
        "Answer:" + " " * 20_000,  # quadratic
        " " * 20_000 + "x",
        "answer" + " " * 20_000 + "x",
        "**" * 20_000,
    ],
    ids=["newlines", "answer-spaces", "spaces", "label-spaces", "stars"],
)
def test_answer_extraction_is_linear_on_degenerate_replies(reply):
    out = _driver({"kind": "extract", "text": reply * 20}, timeout=60)  # 20 copies: still well under a second
    assert out["cpu_s"] < 1.0, out


def test_judge_and_verifier_labels_are_linear():
    t0 = time.process_time()
    assert parse_winner("winner:" + " " * 20_000 + "x") is None  # c20688e: quadratic, 3.8 s
    assert parse_score("score:" + " " * 20_000 + "x") is None
    assert parse_winner("Winner: **B**") == "B" and parse_score("Score: 0.7") == 0.7
    assert time.process_time() - t0 < 0.5


def test_a_newline_flood_reply_is_graded_as_a_loss_in_bounded_time(make_sim):
    sim = make_sim(
        brain=ReplyBrain("\n" * 10_000), api_key=SIM_KEY
    )  # 10 KB: c20688e needs ~1.2 h per extraction
    out = _driver(
        {
            "kind": "run_job",
            "task": MATH[0],
            "strategy": "greedy",
            "budget": 1,
            "base_url": sim.url,
            "key": SIM_KEY,
        },
        timeout=90,
    )
    _loss_dict(out["result"])
    assert out["cpu_s"] < 10 and sim.control.stats()["requests"] == 1


# ---- item 2: math-verify in a killable process --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "answer",
    [
        r"$9^{9^{9}}$",  # c20688e: froze `ept sweep` for 1,255 s
        r"$\binom{10^9}{5\cdot10^8}$",  # > 90 s
        "$" + r"\frac{1}{" * 2_000 + "2" + "}" * 2_000 + "$",  # 14.8 s
    ],
    ids=["tower", "binomial", "nested-frac"],
)
def test_math_answers_that_make_sympy_run_for_ever_are_killed_and_scored(make_sim, answer):
    sim = make_sim(brain=ReplyBrain(f"Working.\nAnswer: {answer}"), api_key=SIM_KEY)
    out = _driver(
        {
            "kind": "run_job",
            "task": LATEX_TASK,
            "strategy": "greedy",
            "budget": 1,
            "base_url": sim.url,
            "key": SIM_KEY,
        },
        timeout=90,
        env={"EPT_MATH_TIMEOUT_S": "3"},
    )
    _loss_dict(out["result"])
    # A 3 s deadline (plus starting the math-verify process); the worker's own CPU and memory stay small.
    assert out["wall_s"] < 60 and out["cpu_s"] < 10 and out["maxrss_mb"] < 1024, out


@pytest.mark.slow
def test_after_a_killed_math_check_the_next_one_runs_on_a_fresh_process():
    out = _driver(
        {
            "kind": "grade_seq",
            "task": LATEX_TASK,
            "replies": [r"Answer: $9^{9^{9}}$", r"Answer: $\frac{6}{8}$"],
        },
        timeout=90,
        env={"EPT_MATH_TIMEOUT_S": "3"},
    )
    bad, ok = out["result"]
    assert bad["score"] == 0.0 and "killed" in bad["reason"]
    assert ok["correct"] is True


# ---- item 3: decoded values from the sandbox are bounded ------------------------------------------------


def test_colliding_hash_ints_from_the_sandbox_are_refused_in_bounded_time():
    # 300k distinct ints that all hash to 0 (what a 335-byte candidate builds): c20688e > 11 min of worker CPU.
    forged = {"s": [{"i": hex(k * (2**61 - 1))} for k in range(1, 300_001)]}
    out = _driver(
        {
            "kind": "verdict",
            "test": "assert f(1) == {1, 2}",
            "line": {"c": [[0, [{"v": forged}]]], "e": None},
        },
        timeout=90,
    )
    assert out["cpu_s"] < 10 and out["maxrss_mb"] < 1024, out
    assert "collide" in out["result"]["why"]


def test_set_of_candidate_values_is_built_in_the_sandbox_not_the_worker():
    prep = checks.prepare("assert set(f(1)) == {1, 2}\nassert f(2) == set([1, 2])")
    assert [c.probes for c in prep.checks.values()] == [("set(f(1))",), ("f(2)",)]


def test_huge_ints_from_the_sandbox_fail_their_check_only():
    prep = checks.prepare("assert f(1) == 2")
    why = checks.verdict(prep, {"c": [[0, [{"v": {"i": hex(2**200_000)}}]]], "e": None})
    assert why is not None and "too large" in why


# ---- a wrong answer is a loss, not an unscored task failure ---------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        "1/" + "7" * 5_000,  # c20688e: ValueError (int past 4,300 digits) -> "failed (task) grader failed"
        "9" * 400 + "/1",  # OverflowError (a float past its range)
    ],
    ids=["long-denominator", "huge-fraction"],
)
def test_fractions_past_int_and_float_limits_are_losses(make_sim, answer):
    sim = make_sim(brain=ReplyBrain(f"Answer: {answer}"))
    res = run_job(Job("r", MATH[0], "greedy", 1, seed=1), _client(sim))
    _scored_loss(res)
    # ... and their majority vote key (c20688e: the vote raised inside the strategy: a task failure).
    res = run_job(Job("r", MATH[0], "majority", 3, seed=1), _client(sim), concurrency=1)
    _scored_loss(res)


def test_code_returning_an_int_past_the_repr_limit_is_a_loss(make_sim):
    code = "```python\ndef sum_multiples(n):\n    return 10**5000\n```\nAnswer: done"
    sim = make_sim(brain=ReplyBrain(code))
    res = run_job(Job("r", CODE[0], "greedy", 1, seed=1), _client(sim))
    _scored_loss(res)  # c20688e: ValueError from repr() of the value in the failure message
    assert "bits" in res.outcome.grader["reason"]


def test_a_forged_float_in_the_result_channel_is_a_loss(make_sim):
    forged = (
        '{"load": null}',
        '{"t": 0, "c": [[0, [{"v": {"f": "0x1p99999"}}]]], "e": null}',
        '{"done": true}',
    )
    report = "".join(f"\x1eEPT:{x}\n" for x in forged).encode()
    code = f"```python\nimport os\nos.write(1, {report!r})\nos._exit(0)\n```"
    sim = make_sim(brain=ReplyBrain(code))
    res = run_job(Job("r", CODE[0], "greedy", 1, seed=1), _client(sim))
    _scored_loss(res)  # c20688e: OverflowError out of float.fromhex
    assert "tampered" in res.outcome.grader["reason"]


def _deep(n: int) -> str:
    return '{"key": ' + "[" * n + "]" * n + "}"


@pytest.mark.parametrize("suite", ["tool_use", "bfcl"])
def test_tool_arguments_nested_100k_deep_are_a_loss(suite):
    task = TOOL[0] if suite == "tool_use" else bfcl_tasks()[0]  # skips, naming the install, without bfcl-eval
    name = task["tools"][0]["function"]["name"]
    cand = Candidate(0, "Answer: 1", "1", [{"name": name, "arguments": _deep(100_000)}])
    t0 = time.process_time()
    out = _grade(Job("r", task, "greedy", 1, seed=1), StrategyResult(cand))
    assert out.error is None and out.score == 0.0  # c20688e: RecursionError -> unscored task failure
    from elo_per_token.worker.strategies.majority import vote

    chosen, details = vote(task, [cand, cand])
    assert chosen is cand and details["n_valid"] == 2  # the vote key does not raise either
    assert time.process_time() - t0 < 2


def test_infrastructure_failures_of_grading_stay_unscored(monkeypatch):
    """A grader queue that never answers says nothing about the candidate: unscored, retried."""
    monkeypatch.setenv("EPT_MATH_TIMEOUT_S", "3")
    from elo_per_token.worker.graders import mathproc

    monkeypatch.setattr(mathproc, "START_TIMEOUT_S", 0.001)  # the child cannot say "ready" this fast
    mathproc.close()
    monkeypatch.setattr(mathproc, "_POOL", None)
    out = _grade(
        Job("r", LATEX_TASK, "greedy", 1, seed=1), StrategyResult(Candidate(0, "Answer: x^2", "x^2"))
    )
    assert out.score is None and out.error["class"] == "task" and "math-verify" in out.error["message"]


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
def test_peak_memory_of_grading_hostile_replies_stays_near_a_benign_one(make_sim):
    """The worker's peak RSS grading a hostile reply (majority of 2, in its own process) is within 200 MB of
    grading "Answer: 42", and under 1 GB."""

    def peak(text: str) -> float:
        sim = make_sim(brain=ReplyBrain(text), api_key=SIM_KEY)
        out = _driver(
            {
                "kind": "run_job",
                "task": MATH[0],
                "strategy": "majority",
                "budget": 2,
                "base_url": sim.url,
                "key": SIM_KEY,
            },
            timeout=90,
        )
        _loss_dict(out["result"])
        return float(out["maxrss_mb"])

    base = peak("Answer: 42")
    for text in (
        "\n" * 50_000,
        "Answer: 1/" + "7" * 50_000,
        "Answer:" + " " * 500_000,
        "answer" + " " * 500_000 + "x",
    ):
        got = peak(text)
        assert got - base < 200 and got < 1024, (text[:12], got, base)


def test_the_old_answer_regex_agrees_with_the_linear_scan_on_a_known_reply():
    old = re.compile(r"^\s*\**\s*(?:final\s+)?answer\s*\**\s*[:：]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
    text = "Work\n**Final Answer:** 42 \nAnswer:\n\n  7  \nanswer： x"
    from elo_per_token.contracts.prompts import answer_lines

    assert answer_lines(text) == old.findall(text) == ["** 42", "7", "x"]


# ---- sandbox memory: one budget for all sandboxes -------------------------------------------------------

_HOG = """
import os, time
def f(x):
    pids = []
    for i in range(6):
        pid = os.fork()
        if pid == 0:
            b = bytearray(200 * 1024 * 1024)
            for j in range(0, len(b), 4096):
                b[j] = 1  # touch every page: resident, not just reserved
            time.sleep(1.0)
            os._exit(0)
        pids.append(pid)
    ok = 0
    for p in pids:
        _, st = os.waitpid(p, 0)
        ok += os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
    return ok
"""

_DRIVER = """
import json, sys
from elo_per_token.worker.graders.code import Limits, run_tests
res = run_tests(sys.stdin.read(), ["assert f(1) == 6"], "f", Limits(timeout_s=10, cpu_s=10), audit_hook=False)
try:
    from elo_per_token.worker.sandbox import budget
    cg = budget.cgroup()
except ImportError:  # c20688e: no whole-sandbox budget at all
    cg = budget = None
peak = None
if cg is not None:
    name = "memory.max_usage_in_bytes" if cg.version == 1 else "memory.peak"
    with open(cg.path + "/" + name) as fh:
        peak = int(fh.read())
print(json.dumps({"passed": res["passed"], "reason": res["reason"], "peak": peak}))
"""


@pytest.mark.slow
def test_all_sandboxes_of_a_worker_share_one_memory_budget(tmp_path):
    """6 children x 200 MB, each under the 512 MB per-process limit: c20688e let all six take 1.2 GB. With
    a 400 MB budget for the worker's sandboxes the kernel kills inside the sandbox and the test fails."""
    import json
    import os
    import subprocess
    import sys

    try:
        from elo_per_token.worker.sandbox import budget

        if budget.cgroup() is None:
            pytest.skip("no memory cgroup can be created here (the concurrency cap still holds)")
    except ImportError:
        pass  # c20688e: the run below shows all six children getting their memory
    env = {**os.environ, "EPT_SANDBOX_MEMORY_MB": "400"}
    p = subprocess.run(
        [sys.executable, "-c", _DRIVER],
        input=_HOG,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["passed"] == 0, out
    assert out["peak"] is not None and out["peak"] <= 400 * 2**20, out


# ---- the Celery poison message: graded once, paid once, the worker keeps answering ------------------------


def _profiles(tmp_path: Any, url: str) -> Any:
    p = tmp_path / "profiles.toml"
    p.write_text(
        f'[profiles.sim-test]\nprotocol = "openai"\nbase_url = "{url}"\napi_key_env = "EPT_SIM_API_KEY"\n'
        'model = "ept-sim-1"\ntimeout = 20\nsupports_n = false\n'
    )
    return p


@pytest.mark.slow
@pytest.mark.services
def test_a_newline_flood_through_celery_is_graded_once_paid_once_and_pings_answered(
    tmp_path, make_sim, redis_server, s3_env, s3_bucket, monkeypatch
):
    """c20688e: 6,000 newlines are ~18 min of CPU with the GIL held; the worker stops answering pings, its
    message comes back after the visibility timeout and the next worker pays for the request again."""
    import json
    import uuid

    from fixtures_plans import plan_toml
    from fixtures_services import start_celery_workers

    from elo_per_token.coordinator.plan import parse_plan
    from elo_per_token.coordinator.sweep import execute, plan_jobs
    from elo_per_token.egress.profiles import get_profile
    from elo_per_token.ledger import open_ledger
    from elo_per_token.worker.celery_app import make_app

    sim = make_sim(brain=ReplyBrain("\n" * 6_000), api_key=SIM_KEY)
    prof = _profiles(tmp_path, sim.url)
    monkeypatch.setenv("EPT_PROFILES", str(prof))
    monkeypatch.setenv("EPT_SIM_API_KEY", SIM_KEY)
    queue = "q-" + uuid.uuid4().hex[:8]
    env = {
        **s3_env.env(),
        "EPT_PROFILES": str(prof),
        "EPT_SIM_API_KEY": SIM_KEY,
        "EPT_VISIBILITY_TIMEOUT": "10",
    }
    workers = start_celery_workers(2, redis_server.url, tmp_path / "w", env=env, concurrency=2, queue=queue)
    plan = parse_plan(plan_toml(
        [("greedy", [1])], {"rate_limits.sim-test": {"rpm": 1000000}}, name="flood", profile="sim-test",
        suites=["math"], tasks_per_family=4, seed=5, ledger=f"s3://{s3_bucket}/f", executor="celery", queue=queue,
        batch_size=2, bootstrap_rounds=0,
    ))  # fmt: skip
    jobs = plan_jobs(plan)
    out: list[Any] = []
    app = make_app(redis_server.url)
    gaps: dict[str, float] = {}
    try:
        sweep = threading.Thread(
            target=lambda: out.append(
                execute(
                    plan, jobs, profile=get_profile("sim-test"), broker_url=redis_server.url, analyze=False
                )
            ),
            daemon=True,
        )
        sweep.start()
        last: dict[str, float] = {}
        deadline = time.monotonic() + 240
        while sweep.is_alive() and time.monotonic() < deadline:
            now = time.monotonic()
            for reply in app.control.ping(timeout=1.0) or []:
                name = next(iter(reply))
                gaps[name] = max(gaps.get(name, 0.0), now - last.get(name, now))
                last[name] = now
            time.sleep(0.5)
        sweep.join(1)
        assert not sweep.is_alive(), "the sweep is still running: a worker is frozen on the reply"
        answered = app.control.ping(timeout=2.0) or []
    finally:
        app.close()
        workers.stop()
    res = out[0]
    assert res.ok and res.tally.done == len(jobs) == 4
    assert len(answered) == 2 and all(g < 10 for g in gaps.values()), gaps  # pings answered throughout
    assert sim.control.stats()["requests"] == len(jobs)  # paid once each: no redelivery re-ran a request
    led = open_ledger(f"s3://{s3_bucket}/f")
    for j in jobs:
        r = JobResult.from_lines(
            [json.loads(x) for x in led.get_job("flood", j.key).decode().splitlines()], j
        )
        _scored_loss(r)
