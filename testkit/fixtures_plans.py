"""Sweep plan files for tests: one writer, so every test's plan is quoted the same way (paths included)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Arms = Sequence[tuple[str, Sequence[int]]]


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string (JSON escapes are valid TOML escapes)


def plan_toml(arms: Arms, tables: Mapping[str, Mapping[str, Any]] | None = None, **fields: Any) -> str:
    """The text of a plan: top-level `fields` in order, one [[arms]] per (strategy, budgets), then `tables`."""
    out = [f"{k} = {_value(v)}\n" for k, v in fields.items()]
    out += [f"\n[[arms]]\nstrategy = {_value(s)}\nbudgets = {_value(list(b))}\n" for s, b in arms]
    for name, body in (tables or {}).items():
        out += [f"\n[{name}]\n", *(f"{k} = {_value(v)}\n" for k, v in body.items())]
    return "".join(out)


def write_plan_file(
    path: Path, arms: Arms, tables: Mapping[str, Mapping[str, Any]] | None = None, **fields: Any
) -> Path:
    path.write_text(plan_toml(arms, tables, **fields))
    return path
