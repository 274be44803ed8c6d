"""The task schema and its validation (loading suites, built-in or from a file, is suites/load.py).

One task per line (see docs/suites.md):

    task_id      str, unique in the suite
    family       str (tasks of one family are ranked together)
    prompt       str            -- or --   messages: [{"role", "content"}, ...]
    reference    the expected answer (str/number; for code tasks the canonical solution); may be null
                 only with grader type "none" (judge mode)
    grader       {"type": a registered grader (contracts.graders.grader_types()), ...options checked by
                 that grader's option check}
    difficulty   optional float in 0..1
    distractors  optional list of plausible wrong answers (the simulator uses them)
    tools        optional OpenAI tool specs; tool_impl {tool name: {"type": "calculator" | "lookup", ...}}
    tests, visible_tests, entry_point   code tasks: assert statements and the function name
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict, cast

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.graders import GraderOptionError, GraderSchema, get_schema, grader_types


class Task(TypedDict):
    """A task record as `validate_task` returns it (the fields above; `_KNOWN_FIELDS` are its keys).

    Only task_id, family and grader are always present. `prompt` and `messages` are both optional keys and
    either may be null: exactly one of them holds a value. `tools` may be null (no tools); `reference` may
    be absent or null only for a grader that needs none (judge mode). tests, visible_tests and entry_point
    are typed as the code grader's option check enforces them; no other grader reads them. `meta` is free
    data carried for the suite's own tools (an importer's source id, a public suite's function docs) and is
    not checked.
    """

    task_id: str
    family: str
    grader: dict[str, Any]  # {"type": a registered grader, ...that grader's options}
    prompt: NotRequired[str | None]
    messages: NotRequired[list[dict[str, Any]] | None]
    reference: NotRequired[Any]
    difficulty: NotRequired[float]
    distractors: NotRequired[list[Any]]
    tools: NotRequired[list[dict[str, Any]] | None]
    tool_impl: NotRequired[dict[str, dict[str, Any]]]
    tests: NotRequired[list[str]]
    visible_tests: NotRequired[list[str]]
    entry_point: NotRequired[str]
    meta: NotRequired[Any]


TOOL_IMPL_TYPES = ("calculator", "lookup", "record")
# The schema's fields are the Task's keys: one list, so a field added to one is known to the other.
_KNOWN_FIELDS = frozenset(Task.__annotations__)


def _fail(msg: str, file: str, line: int, field: str | None) -> InputError:
    return InputError(msg, file=file, line=line, field=field)


def validate_task(task: Any, file: str = "<task>", line: int = 1) -> Task:
    """Check one task record; returns it unchanged or raises InputError naming file, line and field.

    Args:
        task: One parsed line of a suite file (any value).
        file: The suite file, for errors.
        line: The task's line in the file (1-based), for errors.
    """
    if not isinstance(task, dict):
        raise _fail("each line must be a JSON object", file, line, None)
    unknown = sorted(set(task) - _KNOWN_FIELDS)
    if unknown:
        raise _fail(f"unknown field (known: {', '.join(sorted(_KNOWN_FIELDS))})", file, line, unknown[0])
    for f in ("task_id", "family"):
        if not isinstance(task.get(f), str) or not task[f].strip():
            raise _fail("required, a non-empty string", file, line, f)
        if any(ord(c) < 32 or ord(c) == 127 for c in task[f]):
            raise _fail("must not hold NUL or other control characters", file, line, f)
    has_prompt, has_msgs = task.get("prompt") is not None, task.get("messages") is not None
    if has_prompt == has_msgs:
        raise _fail("give exactly one of 'prompt' or 'messages'", file, line, "prompt")
    if has_prompt and (not isinstance(task["prompt"], str) or not task["prompt"].strip()):
        raise _fail("must be a non-empty string", file, line, "prompt")
    if has_msgs:
        msgs = task["messages"]
        ok = (
            isinstance(msgs, list)
            and msgs
            and all(
                isinstance(m, dict)
                and m.get("role") in ("system", "user", "assistant")
                and isinstance(m.get("content"), str)
                for m in msgs
            )
        )
        if not ok or not any(m["role"] == "user" for m in msgs):
            raise _fail(
                "must be a list of {role, content} with at least one user message", file, line, "messages"
            )
    grader = task.get("grader")
    schema = get_schema(grader.get("type")) if isinstance(grader, dict) else None
    if schema is None:
        raise _fail(f"must be an object with 'type' in {', '.join(grader_types())}", file, line, "grader")
    if task.get("reference") is None and schema.needs_reference:
        raise _fail("required unless grader type is 'none' (judge mode)", file, line, "reference")
    if "difficulty" in task:
        d = task["difficulty"]
        if isinstance(d, bool) or not isinstance(d, int | float) or not 0.0 <= d <= 1.0:
            raise _fail("must be a number in 0..1", file, line, "difficulty")
    if "distractors" in task and not isinstance(task["distractors"], list):
        raise _fail("must be a list of wrong answers", file, line, "distractors")
    _check_grader_options(task, schema, file, line)
    _check_tools(task, file, line)
    return cast(Task, task)  # every check above has passed: the record is a Task


def _check_grader_options(task: dict[str, Any], schema: GraderSchema, file: str, line: int) -> None:
    try:
        schema.check_options(task, task["grader"])
    except GraderOptionError as e:
        raise _fail(e.message, file, line, e.field) from None


def _check_tools(task: dict[str, Any], file: str, line: int) -> None:
    tools = task.get("tools")
    if tools is None:
        return
    names = []
    if not isinstance(tools, list) or not tools:
        raise _fail("must be a non-empty list of OpenAI tool specs", file, line, "tools")
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if (
            not isinstance(t, dict)
            or t.get("type") != "function"
            or not isinstance(fn, dict)
            or not fn.get("name")
        ):
            raise _fail(
                "each tool must be {type: 'function', function: {name, parameters}}", file, line, "tools"
            )
        names.append(fn["name"])
    impl = task.get("tool_impl")
    if not isinstance(impl, dict):
        raise _fail("tasks with tools need tool_impl {tool name: {type, ...}}", file, line, "tool_impl")
    for n in names:
        spec = impl.get(n)
        if not isinstance(spec, dict) or spec.get("type") not in TOOL_IMPL_TYPES:
            raise _fail(
                f"tool '{n}' needs an implementation of type {' or '.join(TOOL_IMPL_TYPES)}",
                file,
                line,
                "tool_impl",
            )
        if spec["type"] == "lookup" and not isinstance(spec.get("table"), dict):
            raise _fail(f"lookup tool '{n}' needs a 'table' object", file, line, "tool_impl")
