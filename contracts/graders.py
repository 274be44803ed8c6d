"""The grader vocabulary of the task schema: which `grader.type` names exist and what options each accepts.

Why this half of the grader registry lives in contracts/: suites are validated where they are loaded
(coordinator, `ept suites validate`, the importers), and contracts/ must not import worker/ (data flows
coordinator -> queue -> worker -> ledger -> analysis; contracts are shared by all). So a grader's
*schema* — its name, whether the task needs a reference, and the check of its options against the task —
is data here, and its *behaviour* (grade, answer extraction, vote key) is a `worker.graders.registry.Grader`
entry (worker/graders/registry.py). The built-in schemas are listed below, so every built-in suite
validates without importing the worker. A grader added in worker/graders/ carries its own option check in
its entry; registering that entry (`register`, done for every module listed in worker/graders/__init__.py)
adds its schema here with `register_schema`, so adding a grader is still one module plus one registry line
(docs/suites.md, "Adding a grader"). The cost of injecting it this way: a process that validates a suite
using an added grader must have imported the worker's registry first (`ept suites show/validate` do, and a
sweep does through the plan's strategy check). `tests/worker/test_grader_registry.py` checks that the two halves
name the same graders and that validation imports nothing from the worker.

An option check takes (task, grader options) and raises `GraderOptionError(message, field)`; task
validation (contracts/tasks.py) turns that into an InputError naming the file, line and field.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "GraderOptionError",
    "GraderSchema",
    "OptionCheck",
    "get_schema",
    "grader_types",
    "register_schema",
]


class GraderOptionError(ValueError):
    """A task's grader options (or a field the grader needs) are wrong; `field` is the task field to name."""

    def __init__(self, message: str, field: str = "grader") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


# (task, grader options) -> None or raise. The task is a plain dict, not a contracts.tasks.Task: the check runs
# during validation, before the record is known to be one.
OptionCheck = Callable[[dict[str, Any], dict[str, Any]], None]


def no_options(task: dict[str, Any], grader: dict[str, Any]) -> None:
    """Graders whose options need no check beyond the task schema.

    Args:
        task: The task record (already checked against the task schema).
        grader: The task's grader table (`type` and its options).
    """


@dataclass(frozen=True)
class GraderSchema:
    name: str
    check_options: OptionCheck = no_options
    needs_reference: bool = True  # False: judge mode, scored later by pairwise judgments


# ---------------------------------------------------------------- built-in option checks


def check_numeric(task: dict[str, Any], grader: dict[str, Any]) -> None:
    """abs_tol and rel_tol, when given, are numbers >= 0; the reference parses as a number.

    Args:
        task: The task record (already checked against the task schema).
        grader: The task's grader table (`type` and its options).
    """
    for opt in ("abs_tol", "rel_tol"):
        v = grader.get(opt, 0.0)
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise GraderOptionError(f"grader option '{opt}' must be a number >= 0")
    try:
        float(task["reference"])
    except (TypeError, ValueError):
        raise GraderOptionError("numeric grader needs a numeric reference", "reference") from None


def check_math(task: dict[str, Any], grader: dict[str, Any]) -> None:
    """The reference is a LaTeX string or a number.

    Args:
        task: The task record (already checked against the task schema).
        grader: The task's grader table (`type` and its options).
    """
    if isinstance(task["reference"], bool) or not isinstance(task["reference"], str | int | float):
        raise GraderOptionError("math grader needs a LaTeX string or a number", "reference")


def check_regex(task: dict[str, Any], grader: dict[str, Any]) -> None:
    """The pattern (the grader's `pattern`, else the reference) compiles.

    Args:
        task: The task record (already checked against the task schema).
        grader: The task's grader table (`type` and its options).
    """
    try:
        re.compile(str(grader.get("pattern", task.get("reference", ""))))
    except re.error as e:
        raise GraderOptionError(f"bad regular expression: {e}") from None


def check_choice(task: dict[str, Any], grader: dict[str, Any]) -> None:
    """The grader's `choices`, when given, is a list.

    Args:
        task: The task record (already checked against the task schema).
        grader: The task's grader table (`type` and its options).
    """
    if "choices" in grader and not isinstance(grader["choices"], list):
        raise GraderOptionError("grader option 'choices' must be a list")


def check_code(task: dict[str, Any], grader: dict[str, Any]) -> None:
    """entry_point is an identifier; tests (and visible_tests, when given) are lists of assert strings.

    Args:
        task: The task record (already checked against the task schema).
        grader: The task's grader table (`type` and its options).
    """
    if not isinstance(task.get("entry_point"), str) or not task["entry_point"].isidentifier():
        raise GraderOptionError("code tasks need a Python identifier", "entry_point")
    for f in ("tests", "visible_tests"):
        if f in task or f == "tests":
            tests = task.get(f)
            if (
                not isinstance(tests, list)
                or (f == "tests" and not tests)
                or not all(isinstance(t, str) for t in tests)
            ):
                raise GraderOptionError("must be a list of Python assert statements (strings)", f)


def check_tool(task: dict[str, Any], grader: dict[str, Any]) -> None:
    """expect_calls is a list of {name, arguments?}; the task declares its tools.

    Args:
        task: The task record (already checked against the task schema).
        grader: The task's grader table (`type` and its options).
    """
    calls = grader.get("expect_calls", [])
    if not isinstance(calls, list) or not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls
    ):
        raise GraderOptionError("grader option 'expect_calls' must be a list of {name, arguments?}")
    if not task.get("tools"):
        raise GraderOptionError("tool grader needs the task's tools", "tools")


def check_bfcl(task: dict[str, Any], grader: dict[str, Any]) -> None:
    """The task declares its tools and its reference lists the possible answers.

    Args:
        task: The task record (already checked against the task schema).
        grader: The task's grader table (`type` and its options).
    """
    if not task.get("tools"):
        raise GraderOptionError("bfcl grader needs the task's tools", "tools")
    if not isinstance(task["reference"], list) or not all(isinstance(g, dict) for g in task["reference"]):
        raise GraderOptionError(
            "bfcl grader needs the possible answers: a list of {function: {param: [options]}}", "reference"
        )


# ---------------------------------------------------------------- the registry

# Order matters only for messages ("'type' in exact, normalised, …").
_SCHEMAS: dict[str, GraderSchema] = {
    s.name: s
    for s in (
        GraderSchema("exact"),
        GraderSchema("normalised"),
        GraderSchema("numeric", check_numeric),
        GraderSchema("math", check_math),
        GraderSchema("regex", check_regex),
        GraderSchema("choice", check_choice),
        GraderSchema("code", check_code),
        GraderSchema("tool", check_tool),
        GraderSchema("bfcl", check_bfcl),
        GraderSchema("none", needs_reference=False),
    )
}


def register_schema(schema: GraderSchema) -> None:
    """Add a grader's schema. Registering the same schema again is a no-op; a different one under a taken
    name is a programming error (two graders cannot share a name).

    Args:
        schema: The grader's name, option check and whether it needs a reference.
    """
    if not schema.name or not schema.name.isidentifier():
        raise ValueError(f"grader name {schema.name!r} must be a Python identifier")
    old = _SCHEMAS.get(schema.name)
    if old is not None and old != schema:
        raise ValueError(f"grader '{schema.name}' is already registered with other options")
    _SCHEMAS[schema.name] = schema


def unregister_schema(name: str) -> None:
    """Remove a grader's schema (tests that add a toy grader clean up with this).

    Args:
        name: The grader type to remove.
    """
    _SCHEMAS.pop(name, None)


def grader_types() -> tuple[str, ...]:
    """Every grader type a task may name, built-in first, in registration order."""
    return tuple(_SCHEMAS)


def get_schema(name: object) -> GraderSchema | None:
    """The schema registered under `name`; None for an unknown (or non-string) name.

    Args:
        name: A grader type, as read from a task (any value).
    """
    return _SCHEMAS.get(name) if isinstance(name, str) else None
