"""Graders: turn a strategy's final reply into a score in 0..1 with details.

`grade(task, text, tool_calls)` picks the grader named by task["grader"]["type"].
"""

from __future__ import annotations

from typing import Any

from elo_per_token.worker.graders.basic import BASIC, GradeResult
from elo_per_token.worker.graders.code import grade_code
from elo_per_token.worker.graders.extract import boxed, extract_answer, extract_code
from elo_per_token.worker.graders.mathverify import grade_math
from elo_per_token.worker.graders.tool import grade_tool

__all__ = ["GradeResult", "final_answer", "grade"]


def final_answer(task: dict[str, Any], text: str | None) -> str | None:
    """What counts as the answer of a reply: the code block for code tasks, else the extracted answer."""
    gtype = task["grader"]["type"]
    if gtype == "code":
        return extract_code(text)
    mode = task["grader"].get("extract", "auto")
    if gtype == "math" and mode == "auto" and text:
        # A LaTeX answer is not a 'last number': keep the Answer line / \boxed{}, else let math-verify
        # find the answer in the whole reply.
        return extract_answer(text, "answer") or boxed(text) or text
    if gtype == "tool":
        mode = task["grader"].get("answer", {}).get("extract", mode)
    return extract_answer(text, mode)


def grade(task: dict[str, Any], text: str | None, tool_calls: list[dict[str, Any]] | None = None) -> GradeResult:
    g = task["grader"]
    gtype = g["type"]
    answer = final_answer(task, text)
    if gtype == "code":
        return grade_code(answer, task)
    if gtype == "tool":
        return grade_tool(answer, task, tool_calls or [])
    if gtype == "bfcl":
        from elo_per_token.worker.graders.bfcl import grade_bfcl

        return grade_bfcl(task, tool_calls or [])
    if gtype == "none":
        return GradeResult(0.0, False, {"grader": "none", "reason": "no reference: use judge mode"})
    if gtype == "math":
        return grade_math(answer, task["reference"], g)
    res = BASIC[gtype](answer, task["reference"], g)
    res.details.setdefault("answer", answer)
    return res
