"""Import limits on the bytes logs really inflate to (issue 36 item 5). An inspect_ai `.eval` whose sample
member declares 337 bytes (and the CRC of those) but inflates to 1 GiB: `ept import inspect` exit 0 at 2.24 GB
RSS on main (inspect's zstd reader inflates a member whole, then keeps the declared prefix). And four honest
logs each under the per-file cap reached 750 MB together. Now each member is inflated here as it streams and
counted, per file and across the import's files, and refused with the file and the member named."""

from __future__ import annotations

import io
import random
import struct
import zipfile
import zlib
from pathlib import Path

import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.analysis.imports.zipcap import ZIP_ZSTANDARD, TooBig, log_bytes
from elo_per_token.contracts.errors import InputError

inspect_ai = pytest.importorskip("inspect_ai")
MEMBER = "samples/1_epoch_1.json"


@pytest.fixture(scope="module")
def valid_eval(tmp_path_factory) -> Path:
    """A two-sample inspect_ai log, written by inspect itself (zstd members)."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSample, EvalSpec, write_eval_log
    from inspect_ai.model import ModelUsage
    from inspect_ai.scorer import Score

    spec = EvalSpec(created="2026-01-01T00:00:00+00:00", task="t", dataset=EvalDataset(name="d"), model="m/x",
                    config=EvalConfig())  # fmt: skip
    usage = {"m/x": ModelUsage(input_tokens=5, output_tokens=3, total_tokens=8)}
    samples = [EvalSample(id=i, epoch=1, input="q", target="1", scores={"s": Score(value="C")}, model_usage=usage)
               for i in range(2)]  # fmt: skip
    path = tmp_path_factory.mktemp("eval") / "ok.eval"
    write_eval_log(EvalLog(eval=spec, status="success", samples=samples), str(path))
    return path


def padded_eval(src: Path, dst: Path, pad_mb: int, *, lie: bool) -> Path:
    """A copy of `src` whose sample member is its JSON plus pad_mb MB of spaces (still valid JSON). lie=True
    patches the member's declared size and CRC (central directory and local header) back to the JSON's own."""
    import inspect_ai._util.zipfile  # noqa: F401  (zstd in the stdlib zipfile, as inspect reads and writes it)

    with zipfile.ZipFile(src) as z:
        items = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    real = dict(items)[MEMBER]
    with zipfile.ZipFile(dst, "w", compression=ZIP_ZSTANDARD) as out:
        for name, data in items:
            if name != MEMBER:
                out.writestr(name, data)
                continue
            with out.open(name, "w") as fh:  # streamed: the padding is never held whole
                fh.write(real)
                for _ in range(pad_mb):
                    fh.write(b" " * 2**20)
    if lie:
        _patch_sizes(dst, MEMBER, len(real), zlib.crc32(real))
    return dst


def _patch_sizes(path: Path, member: str, size: int, crc: int | None) -> None:
    buf = bytearray(path.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(buf))) as z:
        at = z.getinfo(member).header_offset
    if crc is not None:
        struct.pack_into("<I", buf, at + 14, crc)
    struct.pack_into("<I", buf, at + 22, size)
    pos = struct.unpack_from("<I", buf, buf.rfind(b"PK\x05\x06") + 16)[0]
    while buf[pos : pos + 4] == b"PK\x01\x02":
        n, m, k = struct.unpack_from("<HHH", buf, pos + 28)
        if buf[pos + 46 : pos + 46 + n].decode() == member:
            if crc is not None:
                struct.pack_into("<I", buf, pos + 16, crc)
            struct.pack_into("<I", buf, pos + 24, size)
        pos += 46 + n + m + k
    path.write_bytes(bytes(buf))


def test_a_log_whose_declared_sizes_lie_is_refused_naming_the_member(valid_eval, tmp_path, monkeypatch):
    from elo_per_token.analysis.imports.inspect_log import import_inspect

    bomb = padded_eval(valid_eval, tmp_path / "bomb.eval", 64, lie=True)
    assert zipfile.ZipFile(bomb).getinfo(MEMBER).file_size < 1000  # what the zip declares
    monkeypatch.setenv("EPT_MAX_IMPORT_MB", "16")

    def read() -> InputError:
        with pytest.raises(InputError) as e:
            import_inspect([str(bomb)])
        return e.value

    err = bounded(read, 10.0, 48)  # on main: the records, after inflating all 64 MB at once
    assert err.file == str(bomb) and err.field == MEMBER, str(err)
    assert "inflates past 16 MB" in err.message and "EPT_MAX_IMPORT_MB=16" in err.message


def test_honest_logs_are_capped_across_the_whole_import(valid_eval, tmp_path, monkeypatch):
    """Four logs of 6 MB each under an 8 MB per-file cap: the import's 16 MB cap stops at the third, naming it."""
    from elo_per_token.analysis.imports.inspect_log import import_inspect

    logs = [str(padded_eval(valid_eval, tmp_path / f"run{i}.eval", 6, lie=False)) for i in range(4)]
    monkeypatch.setenv("EPT_MAX_IMPORT_MB", "8")
    monkeypatch.setenv("EPT_MAX_IMPORT_TOTAL_MB", "16")
    with pytest.raises(InputError) as e:
        import_inspect(logs, arm_from="file")
    assert e.value.file == logs[2] and e.value.field == MEMBER
    assert "EPT_MAX_IMPORT_TOTAL_MB=16 with the 12 MB of the logs before it" in e.value.message
    monkeypatch.setenv("EPT_MAX_IMPORT_TOTAL_MB", "64")
    assert len(import_inspect(logs, arm_from="file").records) == 4 * 4  # under the caps: all imported


# ---- hostile zips: any declared sizes, any bytes ----------------------------------------------------------


def _zip(members: list[tuple[int, int, int]], rng: random.Random) -> tuple[bytes, int]:
    """A zip of members (method, size, compressibility 0..2); returns its bytes and what it inflates to."""
    import inspect_ai._util.zipfile  # noqa: F401

    buf = io.BytesIO()
    total = 0
    with zipfile.ZipFile(buf, "w") as z:
        for i, (method, size, kind) in enumerate(members):
            data = (b" " * size) if kind == 0 else rng.randbytes(size) if kind == 1 else (b"ab" * size)[:size]
            z.writestr(zipfile.ZipInfo(f"m{i}.json"), data, compress_type=method)
            total += size
    return buf.getvalue(), total


METHODS = st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, ZIP_ZSTANDARD])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    members=st.lists(
        st.tuples(METHODS, st.integers(0, 3 * 2**20), st.integers(0, 2)), min_size=1, max_size=4
    ),
    limit_kb=st.integers(0, 6 * 1024),
    lie=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_a_zip_is_counted_exactly_or_refused_whatever_it_declares(
    tmp_path_factory, members, limit_kb, lie, seed
):
    """Declared sizes patched to anything: the count is what the members really inflate to when under the
    limit, TooBig naming a member when over it; in bounded time and memory either way."""
    rng = random.Random(seed)
    data, total = _zip(members, rng)
    path = tmp_path_factory.mktemp("z") / "x.eval"
    path.write_bytes(data)
    for i in range(min(lie, len(members))):
        _patch_sizes(path, f"m{i}.json", rng.randrange(0, 2**32), None)
    limit = limit_kb * 1024

    def count() -> int | TooBig:
        try:
            return log_bytes(str(path), limit)
        except TooBig as e:
            return e

    got = bounded(count, 5.0, 24)
    if total <= limit:
        assert got == total
    else:
        assert (
            isinstance(got, TooBig) and got.field and got.field.startswith("m") and "inflates past" in got.why
        )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=8)), max_size=6),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_corrupted_zip_bytes_are_counted_or_refused_never_raised(tmp_path_factory, cuts, seed):
    rng = random.Random(seed)
    data, _ = _zip([(zipfile.ZIP_DEFLATED, 200_000, 0), (ZIP_ZSTANDARD, 100_000, 2)], rng)
    buf = bytearray(data)
    for at, junk in cuts:
        at %= len(buf)
        buf[at : at + len(junk)] = junk
    path = tmp_path_factory.mktemp("c") / "x.eval"
    path.write_bytes(bytes(buf))

    def count() -> object:
        try:
            return log_bytes(str(path), 2**20)
        except TooBig as e:
            return e

    got = bounded(count, 5.0, 24)
    assert isinstance(got, int | TooBig)
