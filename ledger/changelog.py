"""A run's change log: how a reader of a compacted run learns which job objects were written since the last
compaction WITHOUT walking or listing the run's jobs/ (issue 39).

Layout under runs/<run>/ (see ledger/store.py):

    changes/<name>.keys   job keys, one per line (UTF-8, `\\n`-terminated), appended by a writer AFTER the
                          job object a line names exists. Any number of files (one per writer or session;
                          on S3, which cannot append, one object per batch). Written by ept's compaction
                          only to read them; another tool that keeps writing a compacted run writes them.

`ept compact` records, with the keys it listed (ledger/keyspace.py `record_listed`), the size of every change
file as it stood when its listing began. A reader then reads only the bytes past those sizes (and whole any
file that appeared since): the cost of a read is the segments plus what is new, not the number of job
directories. Readers trust nothing in these files: a line that is not a job key (contracts.keys.check_key)
is skipped, a partial last line is left for the next read, a link or a non-regular file is not opened, and
more than MAX_NEW_BYTES of new lines means "list the run instead" (always correct).
"""

from __future__ import annotations

import os
import re
import stat
from typing import TYPE_CHECKING

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.keys import check_key

if TYPE_CHECKING:
    from elo_per_token.ledger.s3 import S3Store
    from elo_per_token.ledger.store import Ledger

CHANGES_DIR = "changes/"
_NAME = re.compile(r"^changes/[A-Za-z0-9._-]{1,128}\.keys$")
# New change-log bytes a reader parses at most (~400k keys): beyond that a listing is the cheaper read.
MAX_NEW_BYTES = 16 * 2**20
MAX_FILES = 10_000  # change files a reader looks at; more is not a log a tool keeps but garbage


def change_files(ledger: Ledger, run_id: str) -> list[str]:
    """The run's change files (names relative to the run, sorted); names that do not fit the layout are
    ignored. One listing of the small changes/ folder (never of jobs/).

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
    """
    names = ledger.list_blobs(run_id, CHANGES_DIR)
    return [n for n in names if _NAME.match(n)][:MAX_FILES]


def change_sizes(ledger: Ledger, run_id: str) -> dict[str, int]:
    """Each change file's size now (recorded by a compaction before it lists the run).

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
    """
    out: dict[str, int] = {}
    for name in change_files(ledger, run_id):
        got = read_from(ledger, f"runs/{run_id}/{name}", 0, 0)
        if got is not None:
            out[name] = got[1]
    return out


def read_from(ledger: Ledger, key: str, offset: int, cap: int) -> tuple[bytes, int] | None:
    """(at most `cap` bytes of object `key` from byte `offset`, its size); None when there is none or it
    is not a regular file inside the ledger (a link out, a FIFO, a device: never opened).

    Args:
        ledger: The run's ledger.
        key: The change file's key relative to the ledger root.
        offset: The byte to start at.
        cap: The most bytes read.
    """
    from elo_per_token.ledger.local import LocalStore
    from elo_per_token.ledger.s3 import S3Store

    store = ledger.store
    if isinstance(store, LocalStore):
        path = store.root / key
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                return None
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(fd).st_size
            f.seek(min(offset, size))
            return f.read(cap) if cap else b"", size
    if isinstance(store, S3Store):
        return _read_s3(store, key, offset, cap)
    data = store.get(key)
    return None if data is None else (data[offset : offset + cap], len(data))


def _read_s3(store: S3Store, key: str, offset: int, cap: int) -> tuple[bytes, int] | None:
    from elo_per_token.ledger.s3 import s3_status

    full = f"{store.prefix}/{key}" if store.prefix else key
    client, bucket = store.client, store.bucket
    try:
        if cap <= 0:
            head = client.head_object(Bucket=bucket, Key=full)
            return b"", int(head.get("ContentLength") or 0)
        r = client.get_object(Bucket=bucket, Key=full, Range=f"bytes={offset}-{offset + cap - 1}")
    except Exception as e:
        code = s3_status(e)
        if code == 404:
            return None
        if code == 416:  # nothing past `offset`
            head = client.head_object(Bucket=bucket, Key=full)
            return b"", int(head.get("ContentLength") or 0)
        raise
    body: bytes = r["Body"].read(cap)
    total = str(r.get("ContentRange") or "").rpartition("/")[2]
    return body, int(total) if total.isdigit() else offset + len(body)


def parse_keys(data: bytes) -> tuple[list[str], int]:
    """(the job keys of the complete lines of `data`, lines skipped as not job keys). A last line without its
    newline is a writer's append in progress: left for the next read, not counted.

    Args:
        data: A change file's bytes (or the part past an offset).
    """
    end = data.rfind(b"\n")
    keys: list[str] = []
    bad = 0
    for raw in data[: end + 1].split(b"\n")[:-1]:
        line = raw.strip(b" \t\r")
        if not line:
            continue
        try:
            keys.append(check_key(line.decode("utf-8")))
        except (UnicodeDecodeError, InputError):
            bad += 1
    return keys, bad


def new_keys(ledger: Ledger, run_id: str, seen: dict[str, int]) -> list[str] | str:
    """Job keys the change files name past the sizes in `seen` (whole files that `seen` does not name), or
    why the reader must list instead (more than MAX_NEW_BYTES of new lines).

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        seen: Change file name -> the size already read (recorded by a compaction).
    """
    out: list[str] = []
    budget = MAX_NEW_BYTES
    for name in change_files(ledger, run_id):
        start = seen.get(name, 0)
        got = read_from(ledger, f"runs/{run_id}/{name}", start, budget + 1)
        if got is None:
            continue
        data, size = got
        if size < start:  # shorter than when the compaction saw it: rewritten, so read it whole
            got = read_from(ledger, f"runs/{run_id}/{name}", 0, budget + 1)
            data = got[0] if got else b""
        if len(data) > budget:
            return f"the change log holds more than {MAX_NEW_BYTES:,} new bytes (a listing is cheaper)"
        budget -= len(data)
        out += parse_keys(data)[0]
    return out
