"""The one all-or-nothing write (common/atomic.py) of the ledger, the importers and `ept profiles export`."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.common.atomic import write_atomic, write_temp


def test_replaces_whole_file_and_leaves_no_temp(tmp_path):
    dest = tmp_path / "sub" / "out.jsonl"
    write_atomic(dest, "old\n")
    write_atomic(dest, b"new\n", prefix=".tmp-", suffix=".jsonl", fsync=True)
    assert dest.read_bytes() == b"new\n" and sorted(p.name for p in dest.parent.iterdir()) == ["out.jsonl"]


def test_failed_write_keeps_the_old_file_and_no_temp(tmp_path):
    dest = tmp_path / "out.jsonl"
    dest.write_text("old\n")
    with pytest.raises(TypeError):
        write_atomic(dest, 123)  # type: ignore[arg-type]
    assert dest.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
    # A rename that cannot happen (the target is a folder): the temp file is removed too.
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("")
    with pytest.raises(OSError):
        write_atomic(tmp_path / "d", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "out.jsonl"]


def test_temp_is_next_to_target_with_the_given_prefix(tmp_path):
    tmp = write_temp(tmp_path / "a" / "k.json", b"{}", prefix=".ept-tmp-", suffix=".part")
    assert tmp.parent == tmp_path / "a" and tmp.name.startswith(".ept-tmp-") and tmp.name.endswith(".part")
    assert tmp.read_bytes() == b"{}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200_000) | st.text(max_size=20_000),
       st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1,
               max_size=60).filter(lambda n: n not in (".", "..")))  # fmt: skip
def test_any_content_and_name_round_trip_quickly(tmp_path, data, name):
    dest: Path = tmp_path / "h" / name
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        write_atomic(dest, data)
    except OSError:  # a name the file system refuses (too long in bytes): refused whole, nothing left behind
        assert not dest.exists()
        return
    finally:
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert (
            elapsed < 5.0 and peak < 4 * len(data if isinstance(data, bytes) else data.encode()) + 1_000_000
        )
    assert dest.read_bytes() == (data.encode("utf-8") if isinstance(data, str) else data)
    assert [p.name for p in dest.parent.iterdir() if p.name != name and p.name.startswith(f".{name}.")] == []
