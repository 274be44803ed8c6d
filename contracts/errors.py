"""Errors users see. Each names where the problem is, so it can be fixed without a traceback."""

from __future__ import annotations

from dataclasses import dataclass

# Exit code for bad input anywhere in the tool (files, flags, plans, profiles).
EXIT_BAD_INPUT = 2


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
        return f"{where}{field}{self.message}"


# Error classes shared by the provider client, the worker, the ledger and reports.
# "credential" and "endpoint" are egress problems (fix the profile, not the evaluation);
# "task" is an evaluation-side failure (grader crash, bad task).
# "unreachable" (connection refused / DNS) is egress too; "context_overflow" is a property of the strategy
# and the task (scored as a loss, see worker.job).
ERROR_CLASSES = (
    "credential", "endpoint", "rate_limit", "unreachable", "transient", "context_overflow", "permanent", "task",
)  # fmt: skip
EGRESS_CLASSES = frozenset({"credential", "endpoint", "unreachable"})
# Exit code of a sweep stopped because the key or the endpoint does not work (the egress guard).
EXIT_EGRESS = 3
