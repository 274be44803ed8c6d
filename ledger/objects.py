"""The object-store interface the one `Ledger` (ledger/store.py) is written over, and its two
implementations: a local folder (ledger/local.py) and S3 (ledger/s3.py).

Keys are `/`-separated names relative to the store's root (`runs/<run>/jobs/<key>.jsonl`); the store knows
nothing of runs or jobs. Besides the basic operations it offers two batch paths a backend may make fast
(`list_suffix`, `get_many`): listing and fetching every job object of a million-job run.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol


class ObjectStore(Protocol):
    """Objects under one root (a folder, or an S3 bucket and prefix)."""

    def url(self, key: str = "") -> str:
        """The object's URL (a path locally, s3://bucket/prefix/key on S3); the root's with no key.

        Args:
            key: The object's key ("": the root).
        """
        ...

    def get(self, key: str) -> bytes | None:
        """The object's bytes; None when there is none.

        Args:
            key: The object's key (a path under the store's root).
        """
        ...

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        """Write (replace) the object; readers never see a partial one.

        Args:
            key: The object's key (a path under the store's root).
            data: The object's bytes.
            content_type: The object's Content-Type on S3 (ignored locally).
        """
        ...

    def create(self, key: str, data: bytes) -> bool:
        """Create the object exclusively: True if this call created it, False if it already existed.

        Args:
            key: The object's key (a path under the store's root).
            data: The object's bytes.
        """
        ...

    def create_from_file(self, key: str, src: str | Path) -> bool:
        """create() with the content of the local file `src` (streamed: a segment can be hundreds of MB).

        Args:
            key: The object's key (a path under the store's root).
            src: The local file to copy from.
        """
        ...

    def exists(self, key: str) -> bool:
        """Whether the object exists.

        Args:
            key: The object's key (a path under the store's root).
        """
        ...

    def has_prefix(self, prefix: str) -> bool:
        """Whether any object's key starts with `prefix` (a folder-like prefix ending in `/`).

        Args:
            prefix: A folder-like key prefix ending in `/` ("runs/r1/jobs/").
        """
        ...

    def list(self, prefix: str) -> Iterator[str]:
        """Names (relative to `prefix`, `/`-separated, any depth, no order) of the objects under it.

        Args:
            prefix: A folder-like key prefix ending in `/` ("runs/r1/jobs/").
        """
        ...

    def list_suffix(
        self, prefix: str, suffix: str, bounds: builtins.list[str] | None = None, threads: int = 8
    ) -> Iterator[str]:
        """The names under `prefix` that end in `suffix`, without the suffix, the fastest way the store knows.
        `bounds` (names without the suffix, any order) may split the listing into ranges listed in parallel.

        Args:
            prefix: A folder-like key prefix ending in `/` ("runs/r1/jobs/").
            suffix: The name ending to match (".jsonl").
            bounds: Names (without the suffix, any order) at which the listing may be split into ranges listed
                in parallel.
            threads: Requests (or reads) in flight at once.
        """
        ...

    def get_many(self, keys: builtins.list[str], threads: int = 16) -> builtins.list[bytes]:
        """The objects' bytes in `keys` order, `threads` reads in flight; FileNotFoundError if one is missing.

        Args:
            keys: The objects' keys.
            threads: Requests (or reads) in flight at once.
        """
        ...

    def delete(self, key: str) -> None:
        """Remove the object (none there: nothing happens).

        Args:
            key: The object's key (a path under the store's root).
        """
        ...

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """The folder-like names directly under `prefix`, sorted.

        Args:
            prefix: A folder-like key prefix ending in `/` ("runs/r1/jobs/").
        """
        ...


def strip_suffix(name: str, suffix: str) -> str | None:
    """`name` without `suffix`; None when it does not end in it (or is nothing but it).

    Args:
        name: An object name.
        suffix: The ending to strip.
    """
    return name[: -len(suffix)] if name.endswith(suffix) else None
