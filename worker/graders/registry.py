"""The grader registry: one `Grader` entry per grader type, like `Strategy` entries for strategies.

An entry says everything the worker needs to know about a grader, so nothing else branches on
`task["grader"]["type"]`:

    name          the task's `grader.type`
    grade         (task, answer, tool_calls) -> GradeResult, score in 0..1; `answer` is what `extract` returned
    extract       (task, reply text) -> the answer the grader and the vote see (default: extract.extract_answer
                  with the task's `grader.extract` mode)
    vote_key      (task, candidate) -> a key equal for candidates that mean the same answer (majority voting,
                  best_of_n's tie-break); None = the candidate has no answer (default: the normalised answer)
    check_options (task, grader options) -> None, raising contracts.graders.GraderOptionError: run when a suite
                  is loaded, so a bad option fails with file:line:field before any job
    needs_reference   False for judge mode (no reference; scored later by pairwise judgments)
    needs_sandbox     grading runs candidate code: the worker refuses before any call where it cannot sandbox
    run_tests     (task, answer, tests) -> score in 0..1, for graders whose tasks carry tests a candidate
                  can be checked against without tokens (best_of_n's `tests` verifier); None = no tests

Add a grader: one module with `GRADERS = (Grader(...),)` and one line in `_MODULES` of
worker/graders/__init__.py (docs/suites.md, "Adding a grader"). `register` also adds the grader's schema
(name, option check, needs_reference) to contracts.graders, where suite validation reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

from elo_per_token.contracts.graders import (
    GraderSchema,
    OptionCheck,
    no_options,
    register_schema,
    unregister_schema,
)
from elo_per_token.contracts.tasks import Task
from elo_per_token.worker.graders.extract import extract_answer, normalise

__all__ = [
    "GRADERS",
    "Answered",
    "GradeResult",
    "Grader",
    "GradingUnavailable",
    "get_grader",
    "grader_for",
    "register",
    "register_module",
    "unregister",
]


class GradingUnavailable(RuntimeError):
    """Grading could not run here (a grader queue that does not answer, a checker process that cannot start):
    says nothing about the candidate, so the job is left unscored and retried rather than scored a loss."""


@dataclass
class GradeResult:
    score: float  # 0..1
    correct: bool
    details: dict[str, Any] = field(default_factory=dict)  # grader name, reason, …


class Answered(Protocol):
    """What a vote key looks at: a strategy's candidate (worker.strategies.base.Candidate)."""

    text: str | None
    answer: str | None
    tool_calls: list[dict[str, Any]]


GradeFn = Callable[[Task, str | None, list[dict[str, Any]]], GradeResult]
ExtractFn = Callable[[Task, str | None], str | None]
VoteKeyFn = Callable[[Task, Answered], str | None]
TestRunFn = Callable[[Task, str, list[str]], float]


def extract_by_mode(task: Task, text: str | None) -> str | None:
    """The default extraction: `grader.extract` = auto | answer | boxed | last_number (extract.py)."""
    return extract_answer(text, task["grader"].get("extract", "auto"))


def vote_normalised(task: Task, cand: Answered) -> str | None:
    """The default vote key: case, accents, punctuation and articles ignored (basic.normalise)."""
    return None if cand.answer is None else normalise(cand.answer)


@dataclass(frozen=True)
class Grader:
    name: str
    grade: GradeFn
    extract: ExtractFn = extract_by_mode
    vote_key: VoteKeyFn = vote_normalised
    check_options: OptionCheck = no_options
    needs_reference: bool = True
    needs_sandbox: bool = False
    run_tests: TestRunFn | None = None

    @property
    def schema(self) -> GraderSchema:
        return GraderSchema(self.name, self.check_options, self.needs_reference)


GRADERS: dict[str, Grader] = {}


def register(grader: Grader) -> Grader:
    """Add an entry (and its schema, for suite validation). A second entry under a taken name is an error."""
    if grader.name in GRADERS and GRADERS[grader.name] != grader:
        raise ValueError(f"grader '{grader.name}' is already registered")
    register_schema(grader.schema)
    GRADERS[grader.name] = grader
    return grader


def register_module(module: ModuleType) -> None:
    """Register every entry of a grader module's `GRADERS` (what listing it in `_MODULES` does)."""
    for g in module.GRADERS:
        register(g)


def unregister(name: str) -> None:
    """Remove an entry and its schema (a test's toy grader cleans up with this)."""
    GRADERS.pop(name, None)
    unregister_schema(name)


def get_grader(name: str) -> Grader:
    if name not in GRADERS:
        raise KeyError(f"unknown grader '{name}' (known: {', '.join(GRADERS)})")
    return GRADERS[name]


def grader_for(task: Task) -> Grader:
    """The entry for a (validated) task's `grader.type`."""
    return get_grader(task["grader"]["type"])
