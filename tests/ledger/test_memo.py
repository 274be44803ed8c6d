"""ledger/memo.py: within one `ept analyze` (a read_once() scope) a compacted run's segment indexes and key
records are parsed once, however often its state is measured and the run read; outside a scope, and for
anything damaged, every read is afresh (issue 39)."""

from __future__ import annotations

from pathlib import Path

import fixtures_ledger as ledger_gen
import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.analysis.runcache import measure
from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger import FileLedger
from elo_per_token.ledger.keyspace import tail_or_why
from elo_per_token.ledger.memo import read_once, remember
from elo_per_token.ledger.segments import compact_run, index_name, read_index, segment_state


class CountingLedger(FileLedger):
    """A real FileLedger that counts the objects it reads under compact/ and planned/."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    def get_blob(self, run_id: str, name: str) -> bytes | None:
        self.reads.append(name)
        return super().get_blob(run_id, name)


@pytest.fixture
def undeclared(tmp_path: Path) -> Path:
    """A run written as another tool writes it (no declarations), compacted in two segments."""
    root = tmp_path / "ledger"
    ledger_gen.write_local(root, "r", 120)
    compact_run(FileLedger(root), "r", max_segment_jobs=70)
    return root


def _state_read_state(led: FileLedger) -> tuple[str, list[str], str]:
    """What `ept analyze` does: measure, read the index and the keys no segment holds, measure again."""
    a = measure(led, "r", list_ok=False)
    committed = segment_state(led, "r").committed
    tail = tail_or_why(led, "r", read_index(led, "r", committed))
    b = measure(led, "r", list_ok=False)
    assert a is not None and b is not None and not isinstance(tail, str)
    return a.token, tail, b.token


def test_a_scope_parses_each_index_and_record_once_with_the_same_answers(undeclared: Path) -> None:
    led = CountingLedger(undeclared)
    outside = _state_read_state(led)
    per_pass = len(led.reads) // 3
    assert per_pass == 3  # two indexes and the listed- record, read by each of the three steps
    led.reads.clear()
    with read_once():
        inside = _state_read_state(led)
    assert inside == outside
    assert sorted(led.reads) == sorted(set(led.reads)) and len(led.reads) == per_pass
    led.reads.clear()
    _state_read_state(led)  # the scope closed: nothing kept
    assert len(led.reads) == 3 * per_pass


def test_a_new_segment_or_change_inside_a_scope_is_seen(undeclared: Path) -> None:
    led = FileLedger(undeclared)
    with read_once():
        before = measure(led, "r", list_ok=False)
        ledger_gen.write_local(undeclared, "r", 10, offset=120)
        compact_run(led, "r")  # a third segment, a new listed- record: other names, read afresh
        after = measure(led, "r", list_ok=False)
    assert before is not None and after is not None
    assert (before.done, after.done) == (120, 130) and before.token != after.token


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2000), cut=st.integers(min_value=0, max_value=3000))
def test_a_damaged_index_is_never_remembered(undeclared: Path, data: bytes, cut: int) -> None:
    """Hostile bytes under an index's name: an InputError naming it on every read, in a scope or not, and
    bounded; an exception is not kept, so the intact index read after a repair is the right one."""
    led = FileLedger(undeclared)
    committed = segment_state(led, "r").committed
    path = undeclared / "runs" / "r" / index_name(committed[0])
    good = path.read_bytes()
    try:
        path.write_bytes(data if cut % 2 else good[: min(cut, len(good) - 1)])
        with read_once():
            for _ in range(2):
                with pytest.raises(InputError) as e:
                    bounded(lambda: read_index(led, "r", committed), time_s=5, memory_mb=64)
                assert index_name(committed[0]) in str(e.value.file)
            path.write_bytes(good)
            assert read_index(led, "r", committed).height == 120
    finally:
        path.write_bytes(good)


def test_remember_outside_a_scope_computes_each_time() -> None:
    calls: list[int] = []
    assert remember("k", lambda: calls.append(1) or len(calls)) == 1
    assert remember("k", lambda: calls.append(1) or len(calls)) == 2
    with read_once():
        with read_once():  # nested: one memo
            assert remember("k", lambda: 7) == 7
        assert remember("k", lambda: 8) == 7


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(
        st.one_of(
            st.none(), st.sampled_from(["", "a", "a/b", "b", "é", "\uffff", "a\x00"]), st.text(max_size=6)
        ),
        max_size=60,
    ),
    sort=st.booleans(),
)
def test_the_first_of_each_key_is_what_unique_keeps(keys: list[str | None], sort: bool) -> None:
    """Whatever an index holds (duplicates, nulls, empty or odd keys, sorted or not): the rows kept are those
    unique(keep="first", maintain_order=True) keeps, in bounded time and memory."""
    import polars as pl

    from elo_per_token.ledger.segments import _first_of_each

    if sort:
        keys = sorted(keys, key=lambda k: (k is None, k or ""))
    raw = pl.DataFrame({"job_key": pl.Series(keys, dtype=pl.String), "rows": list(range(len(keys)))})
    got = bounded(lambda: _first_of_each(raw), time_s=2, memory_mb=16)
    assert got.equals(raw.unique("job_key", keep="first", maintain_order=True))
