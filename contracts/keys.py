"""Ledger key components: one rule for every part of a job key (family, task id, arm, replicate) and for
file and S3 ledgers alike.

Task files and plans are untrusted: a family of `/tmp/x` or `../../x`, a task id of `..`, or a 300-character
id must not leave the run's prefix or exceed a file name's 255 bytes. A component that is already safe is
kept exactly as it is (so existing ledgers keep their keys); anything else becomes a readable slug plus a
short hash of the original, which stays unique and deterministic:

    math                 -> math                       (unchanged)
    ../../../../x        -> x~3f1a9c0b2d               (slug of the safe characters + 10 hex of sha256)
    /tmp/x               -> tmp_x~…
    <300 characters>     -> <first 40 of the slug>~…

Safe means: 1..MAX_COMPONENT_BYTES bytes of UTF-8, no '/', '\\', NUL or other control characters, no leading
'.' (which also rules out '.', '..' and the ledger's own '.tmp-' files) and no leading or trailing space.
"""

from __future__ import annotations

import hashlib
import re

from elo_per_token.contracts.errors import InputError

MAX_COMPONENT_BYTES = 100  # well under the 255-byte file-name limit, with room for the '.jsonl' suffix
_SLUG_CHARS = 40
_HASH_HEX = 10
_UNSAFE = re.compile(r"[/\\\x00-\x1f\x7f]")
_NOT_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


def is_safe_component(s: str) -> bool:
    """Whether `s` can be one path segment of a key as is (no separator, no dot name, within the byte bound).

    Args:
        s: The candidate segment.
    """
    return (
        bool(s)
        and len(s.encode("utf-8", "surrogatepass")) <= MAX_COMPONENT_BYTES
        and not s.startswith(".")
        and s == s.strip()
        and not _UNSAFE.search(s)
    )


def key_component(s: str) -> str:
    """`s` itself when it is safe as one path segment, else a slug plus a hash of `s` (never '.', '..', '/…').

    Args:
        s: Any text (a task id, an arm label, ...).
    """
    if is_safe_component(s):
        return s
    slug = _NOT_SLUG.sub("_", s).strip("._")[:_SLUG_CHARS].strip("._") or "x"
    digest = hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_HEX]
    return f"{slug}~{digest}"


def check_key(key: str) -> str:
    """A relative key of safe components ('a/b/c'); raises InputError otherwise. The ledgers call this before
    building a path or an S3 key, so a key that bypassed `key_component` still cannot escape the run.

    Args:
        key: The relative key to check ('family/task/arm/r0').
    """
    if not isinstance(key, str) or not key or not all(is_safe_component(p) for p in key.split("/")):
        raise InputError(
            f"unsafe ledger key {key!r} (each part: no '/', '..', leading '.', control characters; "
            f"at most {MAX_COMPONENT_BYTES} bytes)",
            field="key",
        )
    return key
