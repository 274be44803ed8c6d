"""How `ept view` reads a ledger it does not trust: bounded reads, symlinks out of the ledger refused, and a run's
manifest (and identity file) checked field by field, so one bad file marks one run unreadable instead of
breaking a page.

Every object the viewer opens goes through `read_capped`: at most `cap` bytes are read whatever the object's
size (a 285 MB job object costs the viewer its cap, not its size), and on a local ledger the path is resolved
first and refused unless it stays inside the ledger and is a regular file (a link to /etc/passwd, /dev/zero or
a FIFO is never opened).
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger import Ledger
from elo_per_token.ledger.local import LocalStore
from elo_per_token.ledger.s3 import S3Store, s3_status

MAX_MANIFEST_BYTES = 4 * 2**20  # a manifest is a few KB; anything this large is not one
MAX_IDENTITY_BYTES = 16 * 2**20  # one digest per task: ~60 bytes a task, 250k tasks


class Forbidden(Exception):
    """An object the viewer refuses to open (a link out of the ledger, not a regular file): 403."""


def read_capped(ledger: Ledger, key: str, cap: int) -> tuple[bytes, int] | None:
    """(at most `cap` bytes from the start of object `key`, its full size); None when there is none.

    Local ledgers: Forbidden when the path resolves outside the ledger's root or is not a regular file."""
    store = ledger.store
    if isinstance(store, LocalStore):
        return _read_local(store, key, cap)
    if isinstance(store, S3Store):
        return _read_s3(store, key, cap)
    data = store.get(key)  # another store: no ranged read to use
    return None if data is None else (data[:cap], len(data))


def inside(store: LocalStore, key: str) -> str:
    """The resolved path of `key`, Forbidden when it leaves the ledger (a symlink, at any level, pointing out)."""
    try:
        real = (store.root / key).resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise Forbidden(f"{key}: cannot be resolved ({type(e).__name__})") from None
    if not real.is_relative_to(store.root):
        raise Forbidden(f"{key}: a link to a file outside the ledger; not read")
    return str(real)


def _read_local(store: LocalStore, key: str, cap: int) -> tuple[bytes, int] | None:
    real = inside(store, key)
    if not os.path.lexists(real):
        return None
    if not os.path.isfile(real):
        raise Forbidden(f"{key}: not a regular file; not read")
    # O_NOFOLLOW: the resolved path has no link left in its last part; if one appeared since, do not follow it.
    fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        return f.read(cap), os.fstat(fd).st_size


class BatchReader:
    """read_capped for many objects of one ledger in a row (a search over transcripts, the answers of a run):
    on a local ledger each folder is resolved once (inside the ledger, else Forbidden) and each file is
    checked with one lstat, then opened without following links. A file that is itself a link is resolved
    in full, as read_capped does; other stores read as read_capped."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._dirs: dict[str, str] = {}

    def read(self, key: str, cap: int) -> tuple[bytes, int] | None:
        store = self.ledger.store
        if not isinstance(store, LocalStore):
            return read_capped(self.ledger, key, cap)
        parent, _, name = key.rpartition("/")
        real = self._dirs.get(parent)
        if real is None:
            real = self._dirs[parent] = inside(store, parent)
        path = os.path.join(real, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):  # a link (resolved in full) or not a regular file (refused there)
            return _read_local(store, key, cap)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            return f.read(cap), os.fstat(fd).st_size


def _read_s3(store: S3Store, key: str, cap: int) -> tuple[bytes, int] | None:
    full = f"{store.prefix}/{key}" if store.prefix else key
    try:
        r = store.client.get_object(Bucket=store.bucket, Key=full, Range=f"bytes=0-{max(cap, 1) - 1}")
    except Exception as e:
        code = s3_status(e)
        if code == 404 or getattr(e, "response", {}).get("Error", {}).get("Code") == "NoSuchKey":
            return None
        if code == 416:  # an empty object has no byte 0
            return b"", 0
        raise
    body: bytes = r["Body"].read(cap)
    total = str(r.get("ContentRange") or "").rpartition("/")[2]
    return body, int(total) if total.isdigit() else int(r.get("ContentLength") or len(body))


def _problem(key: str, field: str | None, message: str) -> InputError:
    return InputError(message, key, None, field)


def read_manifest(ledger: Ledger, run_id: str) -> dict[str, Any]:
    """The run's manifest with the fields the viewer shows checked; InputError naming the file and field of
    the first bad one ({} when the run has no manifest yet). Forbidden for a link out of the ledger."""
    key = f"{_run_key(ledger, run_id)}/manifest.json"
    got = read_capped(ledger, key, MAX_MANIFEST_BYTES + 1)
    if got is None:
        return {}
    data, size = got
    if size > MAX_MANIFEST_BYTES:
        raise _problem(key, None, f"{size:,} bytes, over the viewer's {MAX_MANIFEST_BYTES:,}-byte bound")
    try:
        m = json.loads(data, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise _problem(key, None, f"not JSON ({str(e)[:120]})") from None
    if not isinstance(m, dict):
        raise _problem(key, None, f"must be a JSON object, got {type(m).__name__}")
    n = m.get("n_jobs")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise _problem(key, "n_jobs", f"must be an integer >= 0, got {_short(n)}")
    for name, kind in (("started_at", str), ("profile", dict), ("identity", dict), ("plan", dict)):
        if m.get(name) is not None and not isinstance(m[name], kind):
            raise _problem(
                key, name, f"must be a {'string' if kind is str else 'table'}, got {_short(m[name])}"
            )
    _check_identity(ledger, run_id, m.get("identity") or {})
    return m


def _check_identity(ledger: Ledger, run_id: str, identity: dict[str, Any]) -> None:
    """The identity file the manifest names (task digests: coordinator.identity) must be a table of strings."""
    blob = identity.get("tasks_blob")
    if blob is None:
        return
    key = f"{_run_key(ledger, run_id)}/{blob}"
    if not isinstance(blob, str) or not blob.startswith("identity/") or ".." in blob.split("/"):
        raise _problem(
            f"{_run_key(ledger, run_id)}/manifest.json", "identity.tasks_blob", f"bad name {_short(blob)}"
        )
    got = read_capped(ledger, key, MAX_IDENTITY_BYTES + 1)
    if got is None:
        raise _problem(key, None, "named by the manifest's identity.tasks_blob, but missing")
    data, size = got
    if size > MAX_IDENTITY_BYTES:
        raise _problem(key, None, f"{size:,} bytes, over the viewer's {MAX_IDENTITY_BYTES:,}-byte bound")
    try:
        d = json.loads(data, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise _problem(key, None, f"not JSON ({str(e)[:120]})") from None
    if not isinstance(d, dict) or not all(isinstance(v, str) for v in d.values()):
        raise _problem(key, None, "must be a JSON object of task -> digest strings")


def _run_key(ledger: Ledger, run_id: str) -> str:
    ledger.run_url(run_id)  # InputError for a name that is not a run id (slashes, spaces, leading dot)
    return f"runs/{run_id}"


def _no_constant(c: str) -> float:
    raise ValueError(f"non-finite number {c}")


def _short(x: Any) -> str:
    s = repr(x)
    return s if len(s) <= 60 else s[:57] + "..."
