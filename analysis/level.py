"""The interval level: one rule for every command and table that takes `--level` (analyze, compare,
report, the returns tables)."""

from __future__ import annotations

import math

from elo_per_token.contracts.errors import InputError

__all__ = ["LevelError", "check_level"]


class LevelError(InputError, ValueError):
    """A level outside [0.5, 1). An InputError (field `--level`, exit 2) for the CLI, and a ValueError for
    library callers of the tables, which check their arguments with ValueError."""


def check_level(level: float) -> float:
    """The level as a float, or LevelError. Below 0.5 an "interval" would hold less than half the rounds
    (not what anyone means by a confidence interval); 1 would be the whole bootstrap range.

    Args:
        level: The requested interval level.
    """
    try:
        value = float(level)
    except (TypeError, ValueError):
        raise LevelError(f"must be a number in [0.5, 1), got {level!r}", field="--level") from None
    if not (math.isfinite(value) and 0.5 <= value < 1):
        raise LevelError(f"must be in [0.5, 1), got {level}", field="--level")
    return value
