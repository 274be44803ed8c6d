"""Reference-based graders: exact, normalised, numeric (with tolerance), regex, choice. Scores are 0 or 1."""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from elo_per_token.worker.graders.extract import parse_number


@dataclass
class GradeResult:
    score: float  # 0..1
    correct: bool
    details: dict[str, Any] = field(default_factory=dict)  # grader name, reason, …


def _result(ok: bool, grader: str, **details: Any) -> GradeResult:
    return GradeResult(1.0 if ok else 0.0, ok, {"grader": grader, **details})


def normalise(text: str) -> str:
    """Case-, accent-, punctuation- and whitespace-insensitive form; '1,000' and '1000' agree."""
    t = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode().lower().strip()
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)
    t = re.sub(r"^(the|a|an)\s+", "", t)
    t = re.sub(r"[^\w\s.\-]", " ", t)
    t = re.sub(r"\s+", " ", t).strip()
    return t.rstrip(".")


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
