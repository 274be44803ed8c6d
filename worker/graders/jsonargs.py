"""Tool-call arguments as the model sent them (a JSON string, untrusted) -> a bounded plain value.

Arguments nested 100k deep made json.loads, str() and json.dumps raise RecursionError inside the tool and
BFCL graders and the vote key, and the job ended as an unscored task failure. Here a parse either returns
a value at most MAX_DEPTH deep or raises BadArguments, which the graders score as the model's miss.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64  # real tool arguments are a few levels deep


class BadArguments(ValueError):
    """The arguments are not JSON, or nested deeper than MAX_DEPTH."""


def parse_arguments(raw: Any) -> Any:
    """A call's `arguments`: a dict passes (depth-checked), a string is parsed as JSON ('' or None is {})."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as e:  # RecursionError: nested past the interpreter's limit
            raise BadArguments(f"not JSON ({type(e).__name__})") from None
    elif isinstance(raw, dict | list):
        value = raw
    else:
        raise BadArguments(f"arguments of type {type(raw).__name__}")
    if too_deep(value, MAX_DEPTH):
        raise BadArguments(f"nested more than {MAX_DEPTH} levels deep")
    return value


def too_deep(value: Any, limit: int) -> bool:
    """Whether lists/dicts nest more than `limit` levels (iterative: no recursion on hostile input)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, list | tuple):
            children = v
        else:
            continue
        if d >= limit:
            return True
        stack.extend((c, d + 1) for c in children)
    return False
