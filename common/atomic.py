"""All-or-nothing file writes: a temp file in the target's folder, renamed (or linked) over the target once complete.

One routine for the ledger's local store, the call-log importers, the suite importer and `ept profiles`: a
reader never sees half a file, and a failed or interrupted write leaves no temp file behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_temp(
    dest: Path, data: bytes, *, prefix: str | None = None, suffix: str = "", fsync: bool = False
) -> Path:
    """Write `data` to a new temp file next to `dest` (creating the folder) and return its path; the caller
    renames or links it into place. On failure the temp file is removed. `prefix` defaults to `.<name>.`
    (hidden); `fsync` adds durability across power loss."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        dir=dest.parent, prefix=f".{dest.name}." if prefix is None else prefix, suffix=suffix
    )
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return Path(tmp)


def write_atomic(
    dest: str | Path, data: bytes | str, *, prefix: str | None = None, suffix: str = "", fsync: bool = False
) -> None:
    """Replace `dest` with `data` (str is written as UTF-8) all or nothing."""
    final = Path(dest)
    tmp = write_temp(
        final,
        data.encode("utf-8") if isinstance(data, str) else data,
        prefix=prefix,
        suffix=suffix,
        fsync=fsync,
    )
    try:
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
