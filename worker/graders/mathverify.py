"""Math grader: symbolic answer checking with HuggingFace's `math-verify` for answers that are not plain numbers.

Grader type `math`. LaTeX (`\\frac{3}{4}`, `\\sqrt{2}/2`, `2\\pi`), fractions, sets (`\\{1, 2\\}`), intervals
(`(-\\infty, 3]`), tuples, equations (`x = 5`), percentages and units are compared as mathematical objects,
so a MATH/AIME-style suite grades `0.75` against `\\frac34` correctly.

Plain numbers on both sides go to the numeric grader (same tolerances: `abs_tol`, `rel_tol`), because it
reads things math-verify reads differently ('1,234.50' is a number to us, a tuple to math-verify) and
because it needs no sympy. `tests/worker/test_math_verify.py` shows the two agree on the built-in math suite.

math-verify bounds each parse/compare with signal.alarm, which only works in a process's main thread, and
jobs run in threads: the worker runs math-verify in child processes it kills at a deadline (mathproc.py),
and never hands it text longer than MAX_MATH_CHARS or nested deeper than MAX_MATH_DEPTH.
"""

from __future__ import annotations

import re
from typing import Any

from elo_per_token.contracts.graders import check_math
from elo_per_token.contracts.tasks import Task
from elo_per_token.worker.graders import mathproc
from elo_per_token.worker.graders.basic import grade_numeric
from elo_per_token.worker.graders.extract import boxed, extract_answer, parse_number
from elo_per_token.worker.graders.registry import Grader, GradeResult

_PLAIN_NUMBER = re.compile(r"\s*+\$?\s*+[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?\s*")


def is_plain_number(text: Any) -> bool:
    """True for '42', '-3.5', '1,234.50', '$12', 7 — things the numeric grader reads exactly."""
    if isinstance(text, bool):
        return False
    if isinstance(text, int | float):
        return True
    return isinstance(text, str) and _PLAIN_NUMBER.fullmatch(text) is not None


# What is never handed to sympy: a final answer is short and shallow. Longer text (math-verify searching a
# whole reply for its last expression) is cut to its end, where the answer is; deeper nesting is refused.
MAX_MATH_CHARS = 2000
MAX_MATH_DEPTH = 50


def refusal(text: str) -> str | None:
    """Why an answer is not sent to math-verify at all, or None (cheap, linear checks)."""
    depth = deepest = 0
    for c in text:
        if c in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "})]":
            depth -= 1
    if deepest > MAX_MATH_DEPTH:
        return f"answer nested more than {MAX_MATH_DEPTH} levels deep: not checked as math"
    return None


def verify_math(answer: str, reference: Any) -> bool:
    """Whether `answer` is mathematically equal to `reference` by math-verify alone (no numeric shortcut),
    checked in a killable child process (mathproc)."""
    return mathproc.check(answer[-MAX_MATH_CHARS:], str(reference)).equal


def grade_math(answer: str | None, reference: Any, options: dict[str, Any]) -> GradeResult:
    """Score 1 when the answer equals the reference: numeric grader for plain numbers, else math-verify."""
    if answer is None or not str(answer).strip():
        return GradeResult(0.0, False, {"grader": "math", "reason": "no answer"})
    inner = boxed(answer)
    ans = inner if inner is not None else answer.strip()
    if is_plain_number(reference) and is_plain_number(ans):
        res = grade_numeric(ans, reference, options)
        return GradeResult(res.score, res.correct, {**res.details, "grader": "math", "via": "numeric"})
    refused = refusal(ans)
    ans = ans[-MAX_MATH_CHARS:]
    details: dict[str, Any] = {"grader": "math", "via": "math-verify", "answer": ans}
    if refused is not None:
        return GradeResult(0.0, False, {**details, "reason": refused})
    verdict = mathproc.check(ans, str(reference))
    if not verdict.equal:
        details["reason"] = verdict.error or (
            "not equal to the reference" if verdict.parsed else "answer does not parse as math"
        )
        if is_plain_number(reference) and parse_number(ans) is not None:
            details["got"] = parse_number(ans)
    return GradeResult(1.0 if verdict.equal else 0.0, verdict.equal, details)


def extract_math(task: Task, text: str | None) -> str | None:
    """A LaTeX answer is not a 'last number': keep the Answer line / \\boxed{}, else let math-verify find the
    answer in the whole reply."""
    mode = task["grader"].get("extract", "auto")
    if mode == "auto" and text:
        return extract_answer(text, "answer") or boxed(text) or text
    return extract_answer(text, mode)


def _grade(task: Task, answer: str | None, tool_calls: list[dict[str, Any]]) -> GradeResult:
    return grade_math(answer, task["reference"], task["grader"])


GRADERS = (Grader("math", _grade, extract=extract_math, check_options=check_math),)
