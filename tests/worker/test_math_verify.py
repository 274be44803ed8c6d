"""The `math` grader (math-verify) on LaTeX answer pairs, and its agreement with the numeric grader."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.tasks import validate_task
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.graders import grade
from elo_per_token.worker.graders.basic import grade_numeric
from elo_per_token.worker.graders.mathverify import grade_math, is_plain_number, verify_math

PAIRS = [
    json.loads(line)
    for line in (Path(__file__).resolve().parents[1] / "fixtures" / "math_verify_pairs.jsonl").open()
]


def test_fixture_is_big_enough_and_has_both_kinds():
    assert len(PAIRS) >= 30
    assert sum(p["equal"] for p in PAIRS) >= 10 and sum(not p["equal"] for p in PAIRS) >= 10


@pytest.mark.parametrize("pair", PAIRS, ids=[p["why"] for p in PAIRS])
def test_latex_pair_graded_correctly(pair):
    res = grade_math(pair["answer"], pair["reference"], {})
    assert res.correct is pair["equal"], res.details
    assert res.score == (1.0 if pair["equal"] else 0.0)


def test_plain_numbers_go_to_the_numeric_grader_with_its_tolerance():
    res = grade_math("3.1416", "3.14159", {"abs_tol": 0.001})
    assert res.correct and res.details["via"] == "numeric"
    assert not grade_math("3.2", 3.14159, {"abs_tol": 0.001}).correct
    assert grade_math("1,234.50", 1234.5, {}).details["via"] == "numeric"
    assert is_plain_number("$12") and not is_plain_number(r"\frac12") and not is_plain_number(True)


def _candidates(task):
    ref = task["reference"]
    out = [str(ref), f"{float(ref):.2f}", str(float(ref) + 1)]
    out += [str(d) for d in task.get("distractors", [])]
    return out


def test_math_verify_agrees_with_numeric_grader_on_builtin_math_suite():
    tasks = load_builtin_suite("math")
    compared = disagreements = 0
    for t in tasks:
        for cand in _candidates(t):
            by_numeric = grade_numeric(cand, t["reference"], t["grader"]).correct
            by_verify = verify_math(cand, t["reference"])
            compared += 1
            if by_numeric != by_verify:
                disagreements += 1
    assert compared >= 5 * len(tasks)
    assert disagreements == 0


def test_full_reply_through_grade_uses_boxed_or_answer_line_not_the_last_number():
    task = validate_task(
        {
            "task_id": "m1",
            "family": "math",
            "prompt": "Solve x^2 < 9.",
            "reference": r"(-3, 3)",
            "grader": {"type": "math"},
        }
    )
    assert grade(task, r"Step 1 gives 9 then 3. So \boxed{(-3,3)}").correct
    assert grade(task, "Work...\nAnswer: $(-3, 3)$").correct
    assert not grade(task, r"Answer: $[-3, 3]$").correct
    assert not grade(task, None).correct


def test_grading_in_a_worker_thread_works_without_signal_alarm():
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("r", grade_math(r"\frac{6}{8}", r"\frac34", {})))
    th.start()
    th.join(30)
    assert out["r"].correct


def test_math_grader_reference_must_be_text_or_number():
    with pytest.raises(InputError) as e:
        validate_task(
            {
                "task_id": "m",
                "family": "math",
                "prompt": "p",
                "reference": {"a": 1},
                "grader": {"type": "math"},
            },
            "s.jsonl",
            4,
        )
    assert e.value.field == "reference" and e.value.line == 4
