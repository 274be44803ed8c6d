"""Reference-based graders: exact, normalised, numeric (with tolerance), regex, choice — scores are 0 or 1 —
and `none` (judge mode: no reference). Their registry entries are `GRADERS` at the end."""

from __future__ import annotations

import math
import re
from typing import Any

from elo_per_token.contracts.graders import check_choice, check_numeric, check_regex
from elo_per_token.contracts.tasks import Task
from elo_per_token.worker.graders.extract import normalise, parse_number
from elo_per_token.worker.graders.registry import Answered, GradeFn, Grader, GradeResult


def _result(ok: bool, grader: str, **details: Any) -> GradeResult:
    return GradeResult(1.0 if ok else 0.0, ok, {"grader": grader, **details})


def grade_exact(answer: str | None, reference: Any, options: dict[str, Any]) -> GradeResult:
    if answer is None:
        return _result(False, "exact", reason="no answer")
    return _result(answer.strip() == str(reference).strip(), "exact")


def grade_normalised(answer: str | None, reference: Any, options: dict[str, Any]) -> GradeResult:
    if answer is None:
        return _result(False, "normalised", reason="no answer")
    refs = reference if isinstance(reference, list) else [reference]
    return _result(normalise(answer) in {normalise(str(r)) for r in refs}, "normalised")


def grade_numeric(answer: str | None, reference: Any, options: dict[str, Any]) -> GradeResult:
    got = parse_number(answer)
    if got is None:
        return _result(False, "numeric", reason="no number in answer")
    want = float(reference)
    abs_tol = float(options.get("abs_tol", 1e-6))
    rel_tol = float(options.get("rel_tol", 0.0))
    ok = math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol)
    return _result(ok, "numeric", got=got, want=want)


def grade_regex(answer: str | None, reference: Any, options: dict[str, Any]) -> GradeResult:
    if answer is None:
        return _result(False, "regex", reason="no answer")
    pattern = options.get("pattern", str(reference))
    flags = re.IGNORECASE if options.get("ignore_case", True) else 0
    return _result(re.fullmatch(pattern, answer.strip(), flags) is not None, "regex")


def _choice_letter(answer: str, choices: list[str]) -> str | None:
    m = re.fullmatch(r"\(?([A-Za-z])\)?[.):]?(?:\s.*)?", answer.strip(), re.DOTALL)
    if m and (not choices or ord(m.group(1).upper()) - 65 < len(choices)):
        return m.group(1).upper()
    for i, c in enumerate(choices):  # the option's text instead of its letter
        if normalise(answer) == normalise(c):
            return chr(65 + i)
    return None


def grade_choice(answer: str | None, reference: Any, options: dict[str, Any]) -> GradeResult:
    """Multiple choice: the reference is a letter (or the option text when `choices` are given)."""
    if answer is None:
        return _result(False, "choice", reason="no answer")
    choices = [str(c) for c in options.get("choices", [])]
    got = _choice_letter(answer, choices)
    want = _choice_letter(str(reference), choices)
    return _result(got is not None and got == want, "choice", got=got, want=want)


BASIC = {
    "exact": grade_exact,
    "normalised": grade_normalised,
    "numeric": grade_numeric,
    "regex": grade_regex,
    "choice": grade_choice,
}


# ---------------------------------------------------------------- registry entries


def number_key(answer: str) -> str:
    """Vote key of an answer read as a number (by value: '1,000' and '1000.0' agree), else its normalised text."""
    x = parse_number(answer)
    if x is not None:
        return f"{x:.6g}" if abs(x) < 1e15 else repr(x)
    return normalise(answer)


def vote_number(task: Task, cand: Answered) -> str | None:
    return None if cand.answer is None else number_key(cand.answer)


def _on_answer(fn: Any) -> GradeFn:
    """A grader of (answer, reference, options) as a registry grade function; the outcome keeps the answer."""

    def grade(task: Task, answer: str | None, tool_calls: list[dict[str, Any]]) -> GradeResult:
        res: GradeResult = fn(answer, task["reference"], task["grader"])
        res.details.setdefault("answer", answer)
        return res

    return grade


def grade_none(task: Task, answer: str | None, tool_calls: list[dict[str, Any]]) -> GradeResult:
    return GradeResult(0.0, False, {"grader": "none", "reason": "no reference: use judge mode"})


GRADERS = (
    Grader("exact", _on_answer(grade_exact)),
    Grader("normalised", _on_answer(grade_normalised)),
    Grader("numeric", _on_answer(grade_numeric), vote_key=vote_number, check_options=check_numeric),
    Grader("regex", _on_answer(grade_regex), check_options=check_regex),
    Grader("choice", _on_answer(grade_choice), check_options=check_choice),
    Grader("none", grade_none, needs_reference=False),
)
