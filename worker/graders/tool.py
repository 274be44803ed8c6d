"""Tool-use grader: were the expected tool calls made, and is the final answer right?

score = 0.5 * (expected calls made) + 0.5 * (answer right); `correct` needs both.
An expected call matches a made call with the same name whose arguments include the expected ones
(compared after normalisation, so "qx-104" matches "QX-104").
"""

from __future__ import annotations

from typing import Any

from elo_per_token.contracts.graders import check_tool
from elo_per_token.contracts.tasks import Task
from elo_per_token.worker.graders.basic import BASIC, number_key
from elo_per_token.worker.graders.extract import extract_answer, normalise
from elo_per_token.worker.graders.jsonargs import BadArguments, parse_arguments
from elo_per_token.worker.graders.registry import Answered, Grader, GradeResult


def _args(a: Any) -> dict[str, Any]:
    try:
        v = parse_arguments(a)
    except BadArguments:  # not JSON, or nested past MAX_DEPTH: no expected argument can match
        return {}
    return v if isinstance(v, dict) else {}


def call_matches(expected: dict[str, Any], made: dict[str, Any]) -> bool:
    if expected["name"] != made.get("name"):
        return False
    got = _args(made.get("arguments"))
    return all(
        k in got and normalise(str(got[k])) == normalise(str(v))
        for k, v in expected.get("arguments", {}).items()
    )


def grade_tool(answer: str | None, task: Task, tool_calls: list[dict[str, Any]]) -> GradeResult:
    opts = task["grader"]
    expected = opts.get("expect_calls", [])
    missing = [e["name"] for e in expected if not any(call_matches(e, m) for m in tool_calls)]
    ans_opts = opts.get("answer", {"type": "normalised"})
    ans = BASIC[ans_opts.get("type", "normalised")](answer, task["reference"], ans_opts)
    calls_ok = not missing
    score = 0.5 * calls_ok + 0.5 * ans.correct
    reason = None
    if missing:
        reason = f"expected tool call(s) not made (or with wrong arguments): {', '.join(missing)}"
    elif not ans.correct:
        reason = "wrong final answer"
    return GradeResult(
        score,
        calls_ok and ans.correct,
        {
            "grader": "tool",
            "calls_ok": calls_ok,
            "answer_ok": ans.correct,
            "n_tool_calls": len(tool_calls),
            "answer_details": ans.details,
            "reason": reason,
        },
    )


def extract_tool(task: Task, text: str | None) -> str | None:
    """The final answer, extracted as `grader.answer.extract` says (else `grader.extract`, else auto)."""
    g = task["grader"]
    return extract_answer(text, g.get("answer", {}).get("extract", g.get("extract", "auto")))


def tool_answer_key(task: Task, cand: Answered) -> str | None:
    """Vote key of the final answer: by value when `grader.answer` is numeric, else normalised text."""
    if cand.answer is None:
        return None
    if task["grader"].get("answer", {}).get("type") == "numeric":
        return number_key(cand.answer)
    return normalise(cand.answer)


def _grade(task: Task, answer: str | None, tool_calls: list[dict[str, Any]]) -> GradeResult:
    return grade_tool(answer, task, tool_calls)


GRADERS = (Grader("tool", _grade, extract=extract_tool, vote_key=tool_answer_key, check_options=check_tool),)
