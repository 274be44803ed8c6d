"""How many bytes an import's logs really inflate to, counted as they stream, never trusting declared sizes.

An `.eval` log is a zip. Its central directory declares each member's sizes, and an attacker writes whatever
he likes there: a member declared 18 KB inflated to 1 GiB (`ept import inspect` exit 0 at 2.2 GB RSS). So each
member's compressed bytes are read from its local header and inflated here, 64 KB in and at most 1 MB out at
a time, counting what comes out; the count stops at the cap, so a bomb costs the cap's worth of CPU and a few
MB of memory. Every file's bytes also count toward a cap across all files of one import (four honest logs each
under the per-file cap reached 750 MB together, as inspect holds every log it reads).

Caps (MB): EPT_MAX_IMPORT_MB per file (default 512), EPT_MAX_IMPORT_TOTAL_MB per import (default 1024).
Stored, deflated and zstd members (inspect_ai writes zstd) are counted; other methods are refused: their
size cannot be counted here.
"""

from __future__ import annotations

import os
import struct
import zipfile
import zlib
from typing import BinaryIO

from elo_per_token.contracts.settings import read_float

MAX_MEMBERS = 200_000  # a central directory of millions of tiny entries costs memory just to list
_IN = 64 * 1024
_OUT = 1024 * 1024


class TooBig(Exception):
    """A log refused for its size: `field` is the zip member (or None for the file as a whole)."""

    def __init__(self, field: str | None, why: str) -> None:
        super().__init__(why)
        self.field, self.why = field, why


def _mb(name: str) -> float:
    """A declared size cap in MB (contracts/settings.py), in bytes; a bad value is an InputError naming it."""
    return max(read_float(name), 0.0) * 2**20


def caps() -> tuple[float, float]:
    """(per-file cap, per-import cap) in bytes."""
    return _mb("EPT_MAX_IMPORT_MB"), _mb("EPT_MAX_IMPORT_TOTAL_MB")


def _members(fh: BinaryIO, path: str) -> list[zipfile.ZipInfo]:
    end = getattr(zipfile, "_EndRecData", None)  # the end record alone: how many members, before listing them
    try:
        rec = end(fh) if end is not None else None
        if rec is not None and rec[4] > MAX_MEMBERS:  # _ECD_ENTRIES_TOTAL
            raise TooBig(None, f"declares {rec[4]:,} members, over {MAX_MEMBERS:,}")
        return list(zipfile.ZipFile(fh).infolist())
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError) as e:
        raise TooBig(None, f"not a readable inspect_ai eval log (not a zip: {str(e)[:120]})") from None


def _data_start(fh: BinaryIO, info: zipfile.ZipInfo) -> int:
    fh.seek(info.header_offset)
    hdr = fh.read(30)
    if len(hdr) < 30 or hdr[:4] != b"PK\x03\x04":
        raise TooBig(info.filename[:200], "bad local header (not where the central directory says)")
    name_len, extra_len = struct.unpack("<HH", hdr[26:30])
    return int(info.header_offset) + 30 + int(name_len) + int(extra_len)


ZIP_ZSTANDARD = 93  # what inspect_ai writes (.eval logs are zstd-compressed zips)


class _Limited:
    """The member's compressed bytes only (a file object over [start, start + size))."""

    def __init__(self, fh: BinaryIO, size: int) -> None:
        self.fh, self.left = fh, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data: bytes = self.fh.read(n) if n > 0 else b""
        self.left -= len(data)
        return data


def _inflate_count(fh: BinaryIO, info: zipfile.ZipInfo, limit: float) -> int:
    """Bytes the member really inflates to, counted up to just past `limit` (then the count stops)."""
    fh.seek(_data_start(fh, info))
    src = _Limited(fh, int(info.compress_size))
    method = info.compress_type
    if method == zipfile.ZIP_STORED:
        return int(src.left)
    try:
        if method == zipfile.ZIP_DEFLATED:
            return _count_deflate(src, limit)
        if method == ZIP_ZSTANDARD:
            return _count_zstd(src, limit)
    except Exception as e:  # zlib.error, zstandard.ZstdError: the data is not what the method says
        raise TooBig(
            info.filename[:200], f"corrupt compressed data ({type(e).__name__}: {str(e)[:120]})"
        ) from None
    raise TooBig(info.filename[:200], f"compression method {method} cannot be size-checked")


def _count_deflate(src: _Limited, limit: float) -> int:
    d = zlib.decompressobj(-15)
    n = 0
    while not d.eof and n <= limit and (chunk := src.read(_IN)):
        n += len(d.decompress(chunk, _OUT))  # at most _OUT bytes out per call: the rest waits in the tail
        while d.unconsumed_tail and n <= limit:
            n += len(d.decompress(d.unconsumed_tail, _OUT))
    return n


def _count_zstd(src: _Limited, limit: float) -> int:
    try:
        import zstandard
    except ImportError:
        raise TooBig(
            None, "a zstd-compressed log needs the optional extra: pip install 'elo-per-token[inspect]'"
        ) from None
    # stream_reader hands out at most _OUT bytes a read, whatever one frame claims or holds.
    reader = zstandard.ZstdDecompressor().stream_reader(src, read_size=_IN, read_across_frames=True)  # type: ignore[arg-type]
    n = 0
    while n <= limit and (out := reader.read(_OUT)):
        n += len(out)
    return n


def log_bytes(path: str, limit: float) -> int:
    """The bytes a log inflates to (a `.json` log: its size), counted up to just past `limit`; TooBig naming the
    member that crossed it (with what it declared), or why the zip cannot be read.

    Args:
        path: The log file.
        limit: The byte cap.
    """
    if not path.endswith(".eval"):
        return os.path.getsize(path)
    total = 0
    with open(path, "rb") as fh:
        for info in _members(fh, path):
            try:
                total += _inflate_count(fh, info, limit - total)
            except (OSError, ValueError, EOFError, struct.error) as e:  # offsets pointing outside the file
                raise TooBig(
                    info.filename[:200], f"unreadable member ({type(e).__name__}: {str(e)[:120]})"
                ) from None
            if total > limit:
                raise TooBig(
                    info.filename[:200],
                    f"inflates past {limit / 2**20:g} MB (it declares {info.file_size:,} bytes): over the cap",
                )
    return total
