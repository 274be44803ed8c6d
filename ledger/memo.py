"""Reads of immutable ledger objects shared by the steps of one command (issue 39).

`ept analyze RUN` measures a compacted run's state before it reads the run (the viewer's cache key), reads
it, then measures it again before it stores the analysis: three reads of the same segment indexes and key
declarations, each a million keys at 1M jobs (about a tenth of the command's CPU). The objects those reads
parse never change under their name: a segment index is created exclusively and numbers are never reused (a
rebuild deletes and takes new numbers), a declaration is named by a digest of its content. So within a
`read_once()` scope the parsed result of such an object, or a value computed only from such objects, is
kept under a key naming them, and reused. What can change (the manifest, failures, the change log, which
objects exist) is still read each time. Outside a scope nothing is kept: a long-lived process (the viewer)
holds no memory for it, and a file edited in place (a test corrupting an index) is always read afresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_memo: dict[Hashable, Any] | None = None


@contextmanager
def read_once() -> Iterator[None]:
    """A scope in which remember() keeps what it computes (nested scopes share the outermost one)."""
    global _memo
    with _lock:
        outer = _memo is not None
        if not outer:
            _memo = {}
    try:
        yield
    finally:
        if not outer:
            with _lock:
                _memo = None


def remember(key: Hashable, compute: Callable[[], T]) -> T:
    """compute(), kept under `key` while a read_once() scope is open (else computed each call). `key` must
    name only objects that never change under their name (see the module docstring).

    Args:
        key: what the value depends on (ledger URL, run, object names...).
        compute: computes the value (exceptions propagate and nothing is kept).
    """
    memo = _memo
    if memo is None:
        return compute()
    if key in memo:
        return memo[key]  # type: ignore[no-any-return]
    value = compute()
    memo[key] = value
    return value
