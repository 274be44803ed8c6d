"""The calculator tool is fed by the model: bounded work, never an exception, and a job whose tool call went
wrong still records the tokens it spent."""

from __future__ import annotations

import json
import time

import pytest
from fixtures_sim import SIM_KEY

from elo_per_token.contracts.jobs import Job
from elo_per_token.egress.client import ProviderClient
from elo_per_token.simulator.brain import TaskBrain
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.job import run_job
from elo_per_token.worker.tools import calculate, execute_tool

TASK = {
    "tool_impl": {
        "calculator": {"type": "calculator"},
        "lookup": {"type": "lookup", "table": {"t": {"a": 1}}},
    }
}


@pytest.mark.parametrize(
    "expr",
    [
        "((9**999)**999)**10",  # held the GIL for ~19 s
        "(9**999)**999",  # a number too big to print: json.dumps raised out of execute_tool
        "+".join(["1"] * 5000),  # 5,000 terms: RecursionError out of execute_tool
        "(" * 3000 + "1" + ")" * 3000,  # deep nesting
        "9" * 5000,  # a literal too big to print
        "2**(2**(2**(2**5)))",
        "10**10000 * 10**10000",
        "1.5 ** 100000",
        "(-8) ** 0.5",  # complex
        "x + 1",
        "1 / 0",
        "",
    ],
    ids=lambda e: e if len(e) < 30 else f"{e[:20]}...({len(e)} chars)",
)
def test_hostile_expressions_are_refused_quickly_with_an_error_text(expr):
    t0 = time.monotonic()
    out = execute_tool(TASK, "calculator", {"expression": expr})
    assert time.monotonic() - t0 < 1.0
    assert out.startswith("error: "), out[:200]
    assert len(out) < 400


def test_honest_expressions_still_work():
    assert calculate("123 * 456 - 789 * 12") == 123 * 456 - 789 * 12
    assert calculate("2**64 + 3^2") == 2**64 + 9
    assert calculate("7 // 2 + 7 % 2 - -1") == 5
    assert calculate("+".join(["1"] * 150)) == 150
    big = json.loads(execute_tool(TASK, "calculator", json.dumps({"expression": "2**3000"})))
    assert big["value"] == 2**3000


@pytest.mark.parametrize(
    "task,args",
    [
        ({"tool_impl": {"lookup": {"type": "lookup", "table": "not a dict"}}}, {"key": "a"}),
        ({"tool_impl": {"lookup": {"type": "lookup", "table": {"t": ["a"]}}}}, {"table": "t", "key": "a"}),
        ({"tool_impl": {"calculator": {}}}, {"expression": "1"}),
        ({"tool_impl": []}, {}),
    ],
)
def test_execute_tool_never_raises(task, args):
    out = execute_tool(
        task, next(iter(task["tool_impl"]), "lookup") if isinstance(task["tool_impl"], dict) else "x", args
    )
    assert out.startswith("error: ")


@pytest.mark.parametrize("expr", ["(9**999)**999", "+".join(["1"] * 5000)], ids=["huge-power", "5000-terms"])
def test_a_job_whose_tool_call_blew_up_keeps_its_calls_and_tokens(make_sim, expr):
    """Reproduces the report: the model asks the calculator for `(9**999)**999` (or a 5,000-term sum); the
    exception escaped execute_tool and the job was recorded as calls 0, tokens 0."""
    calc = next(
        t for t in load_builtin_suite("tool_use") if t["grader"]["expect_calls"][0]["name"] == "calculator"
    )
    task = {**calc, "task_id": "hostile-calc", "prompt": f"Use the calculator to compute exactly: {expr}."}
    sim = make_sim(brain=TaskBrain([task]))  # a model that calls the calculator with exactly that expression
    client = ProviderClient(sim.profile(), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)
    res = run_job(Job("r", task, "greedy", 1, seed=3), client)
    turns = [c for c in res.calls if c.role == "tool_turn"]
    assert len(turns) >= 2  # the tool call, then the turn that read the tool's error text
    assert res.tokens > 0 and res.tokens == sum(
        c.usage["prompt_tokens"] + c.usage["completion_tokens"] for c in res.calls
    )
    assert res.ok and res.outcome.score is not None
