"""Where a key sits in a TOML file, for error messages that name the file, line and field.

tomllib parses without positions; this finds them again in the text, best effort (a line number is a hint for
the reader, never used to decide anything). Used by the plan loader and the profiles loader.
"""

from __future__ import annotations

import re


def _header(table: str | tuple[str, ...]) -> re.Pattern[str]:
    """`[table]` / `[[table]]`, spaces around the dots allowed, each dotted part optionally quoted. A tuple
    names the parts itself (a profile name may hold a dot: `[profiles."gpt-4.1"]`)."""
    names = table.split(".") if isinstance(table, str) else table
    parts = [r"\"?" + re.escape(p.strip()) + r"\"?" for p in names]
    return re.compile(r"^\s*\[+\s*" + r"\s*\.\s*".join(parts) + r"\s*\]+")


def toml_line(
    text: str, key: str | None, table: str | tuple[str, ...] | None = None, nth: int = 0
) -> int | None:
    """1-based line of `key = …` (optionally quoted), or None when not found.

    With `table`, the search runs inside the nth `[table]` / `[[table]]` section only (up to the next header);
    a key missing there gives the header's line, and `key=None` asks for the header itself. Without `table`,
    the first `key = …` anywhere in the file."""
    lines = text.splitlines()
    start = 0
    if table:
        hdr = _header(table)
        found = [i for i, ln in enumerate(lines) if hdr.match(ln)]
        if len(found) <= nth:
            return None
        start = found[nth]
        if key is None:
            return start + 1
    elif key is None:
        return None
    pat = re.compile(r"^\s*\"?" + re.escape(key) + r"\"?\s*=")
    for i in range(start + 1 if table else 0, len(lines)):
        if table and lines[i].lstrip().startswith("["):
            break
        if pat.match(lines[i]):
            return i + 1
    return start + 1 if table else None
