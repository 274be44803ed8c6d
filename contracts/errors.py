"""Errors users see. Each names where the problem is, so it can be fixed without a traceback."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

# Exit codes of every `ept` command (docs/sweep.md lists them):
#   0 done · 1 some jobs failed · 2 bad input or setup (file:line:field) · 3 a sweep stopped because the
#   provider's credentials or endpoint are broken (fix the profile, then `ept retry`) · 130 interrupted
#   (Ctrl-C / SIGTERM; rerun to resume).
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_STOPPED_EGRESS = 3
EXIT_INTERRUPTED = 130


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` safe for a terminal: control characters (ESC, so no colour codes, cursor moves or OSC 52 clipboard
    writes) and bidi overrides shown escaped (`\\x1b`), newlines and tabs kept. For names that come from user
    files or model output.

    Args:
        text: Text from outside (a provider's reply, a file's field) about to be printed.
    """
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


@dataclass
class InputError(Exception):
    """Bad user input: names the file, the 1-based line (if any) and the field (if any)."""

    message: str
    file: str | None = None
    line: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        field = f"field '{self.field}': " if self.field else ""
        return printable(f"{where}{field}{self.message}")  # names and values from user files reach a terminal


# Error classes: one vocabulary shared by the provider client, the worker, the ledger and reports.
# "credential" and "endpoint" are egress problems (fix the profile, not the evaluation);
# "unreachable" (connection refused / DNS) is egress too; "context_overflow" is a property of the strategy
# and the task (scored as a loss, see worker.job); "task" is an evaluation-side failure (grader crash, bad
# task) and is never raised by the provider client.
ProviderErrorClass = Literal[
    "credential",
    "endpoint",
    "rate_limit",
    "unreachable",
    "transient",
    "context_overflow",
    "permanent",
]
ErrorClass = Literal[ProviderErrorClass, "task"]
PROVIDER_ERROR_CLASSES: tuple[ProviderErrorClass, ...] = get_args(ProviderErrorClass)
ERROR_CLASSES: tuple[ErrorClass, ...] = (*PROVIDER_ERROR_CLASSES, "task")
EGRESS_CLASSES: frozenset[ErrorClass] = frozenset({"credential", "endpoint", "unreachable"})
# Failures worth another attempt after a backoff (the provider client's retries, then the worker's).
RETRYABLE: frozenset[ErrorClass] = frozenset({"rate_limit", "transient", "unreachable"})
