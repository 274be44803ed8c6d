"""Graders: turn a strategy's final reply into a score in 0..1 with details.

The grader registry. Add a grader: write one module with `GRADERS = (Grader(...),)` and list it in
`_MODULES` below (see docs/suites.md, "Adding a grader", and worker/graders/registry.py for the entry's
fields). `grade(task, text, tool_calls)` and `final_answer(task, text)` use the entry named by
task["grader"]["type"].
"""

from __future__ import annotations

from typing import Any

from elo_per_token.contracts.tasks import Task
from elo_per_token.worker.graders import basic, bfcl, code, mathverify, tool
from elo_per_token.worker.graders.registry import (
    GRADERS,
    Grader,
    GradeResult,
    grader_for,
    register,
    register_module,
)

_MODULES = (basic, mathverify, code, tool, bfcl)
for _m in _MODULES:
    register_module(_m)

__all__ = ["GRADERS", "GradeResult", "Grader", "final_answer", "grade", "grader_for", "register"]


def final_answer(task: Task, text: str | None) -> str | None:
    """What counts as the answer of a reply (the grader's `extract`): e.g. the code block for code tasks.

    None when extraction raises: a sample must not end its job; grade() extracts again and scores the raise
    as a loss."""
    extract = grader_for(task).extract
    try:
        return extract(task, text)
    except Exception:  # the reply is untrusted; the error resurfaces, scored, when this candidate is graded
        return None


def grade(task: Task, text: str | None, tool_calls: list[dict[str, Any]] | None = None) -> GradeResult:
    g = grader_for(task)
    return g.grade(task, g.extract(task, text), tool_calls or [])
