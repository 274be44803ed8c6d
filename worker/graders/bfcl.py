"""BFCL grader: the calls a model made, checked by BFCL's own AST checker from the `bfcl-eval` package.

Reused from bfcl-eval as is: `bfcl_eval.eval_checker.ast_eval.ast_checker.ast_checker` (simple, multiple,
parallel and parallel_multiple checking: function names, required/optional parameters, types, values
against the possible answers, order-free matching of parallel calls) and its `Language` enum.
Not reused: its model registry (`bfcl_eval.constants.model_config`), which imports every vendor handler
and so the package's full dependency set (tree-sitter, torch via sentence-transformers, …). The checker
only asks that registry whether a model's function names have '.' replaced by '_'; for OpenAI-style tools
the answer is yes, so when the real registry cannot be imported a one-entry stand-in is installed before
the checker is imported, and the checker is always given that answer.
Irrelevance (BFCL's rule): correct when the model made no function call.

score 1 / 0; details carry BFCL's error messages and error type.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import types
from typing import Any

from elo_per_token.contracts.graders import check_bfcl
from elo_per_token.contracts.tasks import Task
from elo_per_token.worker.graders.jsonargs import BadArguments, parse_arguments
from elo_per_token.worker.graders.registry import Answered, Grader, GradeResult

MODEL_NAME = "ept-openai-fc"


class _UnderscoreNames:
    underscore_to_dot = True  # OpenAI function calling: 'math.factorial' is offered as 'math_factorial'


class _Registry(dict[str, _UnderscoreNames]):
    def __missing__(self, key: str) -> _UnderscoreNames:
        return _UnderscoreNames()


_LOCK = threading.Lock()


def _checker() -> tuple[Any, Any]:
    # Graders run in worker threads: the import (and the stand-in's sys.modules surgery) happens once.
    with _LOCK:
        return _load_checker()


@functools.cache
def _load_checker() -> tuple[Any, Any]:
    name = "bfcl_eval.constants.model_config"
    try:
        from bfcl_eval.eval_checker.ast_eval import ast_checker as mod
    except ImportError:
        for k in [k for k in sys.modules if k.startswith("bfcl_eval")]:
            del sys.modules[k]  # drop the half-imported package before retrying with the stand-in
        stub = types.ModuleType(name)
        stub.MODEL_CONFIG_MAPPING = _Registry()  # type: ignore[attr-defined]
        sys.modules[name] = stub
        from bfcl_eval.eval_checker.ast_eval import ast_checker as mod
    mod.MODEL_CONFIG_MAPPING = _Registry()
    from bfcl_eval.constants.enums import Language

    return mod.ast_checker, Language.PYTHON


def _args(a: Any) -> Any:
    try:
        return parse_arguments(a)
    except BadArguments:  # not JSON, or nested past MAX_DEPTH: graded as not a JSON object
        return None


def grade_bfcl(task: Task, tool_calls: list[dict[str, Any]]) -> GradeResult:
    category = task["grader"].get("category", "simple_python")
    if category == "irrelevance" or not task["reference"]:
        ok = not tool_calls
        return GradeResult(
            float(ok),
            ok,
            {
                "grader": "bfcl",
                "category": category,
                "n_calls": len(tool_calls),
                "reason": None if ok else "called a function for an irrelevant question",
            },
        )
    output = []
    for c in tool_calls:
        args = _args(c.get("arguments"))
        if not isinstance(args, dict):
            return GradeResult(
                0.0,
                False,
                {
                    "grader": "bfcl",
                    "category": category,
                    "reason": f"arguments of {c.get('name')} are not a JSON object",
                },
            )
        output.append({c.get("name"): args})
    if not output:
        return GradeResult(
            0.0, False, {"grader": "bfcl", "category": category, "reason": "no function call made"}
        )
    check, python = _checker()
    meta: Any = task.get("meta", {})  # free data: a BFCL suite's own function docs, when it carries them
    functions = meta.get("functions") or [t["function"] for t in task.get("tools") or []]
    try:
        res = check(functions, output, task["reference"], python, category, MODEL_NAME)
    except Exception as e:  # the checker assumes well-formed calls; a malformed one is the model's miss
        return GradeResult(
            0.0,
            False,
            {
                "grader": "bfcl",
                "category": category,
                "reason": f"checker rejected the calls: {type(e).__name__}: {str(e)[:200]}",
            },
        )
    ok = bool(res.get("valid"))
    details = {
        "grader": "bfcl",
        "category": category,
        "n_calls": len(output),
        "reason": None if ok else "; ".join(map(str, res.get("error", [])))[:300] or "invalid",
        "error_type": res.get("error_type"),
    }
    return GradeResult(float(ok), ok, details)


def calls_key(task: Task, cand: Answered) -> str | None:
    """BFCL tasks are answered by the calls made, not the reply text: vote on the calls (arguments parsed,
    key order and call order ignored; no call at all is an answer too, unless the episode gave no reply)."""
    if cand.text is None and not cand.tool_calls:
        return None
    calls = []
    for c in cand.tool_calls:
        args = c.get("arguments")
        try:
            args = parse_arguments(args)
        except BadArguments:  # unparsable arguments vote as their text; too deep ones all alike
            args = args if isinstance(args, str) else "<arguments nested too deeply>"
        calls.append(json.dumps([str(c.get("name")), args], sort_keys=True, default=str))
    return json.dumps(sorted(calls))


def _grade(task: Task, answer: str | None, tool_calls: list[dict[str, Any]]) -> GradeResult:
    return grade_bfcl(task, tool_calls)


GRADERS = (Grader("bfcl", _grade, vote_key=calls_key, check_options=check_bfcl),)
