"""Python values written as TOML text, for the property tests of the TOML readers (plans, profiles, settings)."""

from __future__ import annotations

import json
import math
from typing import Any


def toml_string(s: str, *, ascii_only: bool = False) -> str:
    """`s` as a TOML basic string. JSON's escapes are TOML's, except that TOML also forbids a raw DEL (U+007F),
    which JSON leaves as it is."""
    return json.dumps(s, ensure_ascii=ascii_only).replace("\x7f", "\\u007f")


def toml_value(v: Any, *, ascii_only: bool = False) -> str:
    """A Python value as a TOML value (inline tables and arrays; nan and inf as TOML writes them). ascii_only:
    every non-ASCII character of a string or key escaped (\\uXXXX)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return toml_string(v, ascii_only=ascii_only)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x, ascii_only=ascii_only) for x in v) + "]"
    pairs = (
        f"{toml_string(str(k), ascii_only=ascii_only)} = {toml_value(x, ascii_only=ascii_only)}"
        for k, x in v.items()
    )
    return "{" + ", ".join(pairs) + "}"
