"""A run written by another tool (no key declarations) reads without a listing once `ept compact` ran: the
compaction records the keys it found (ledger/keyspace.py `record_listed`), a later compaction still lists to
find newer objects, and a reader that must list says why (`read_plan(...).why`).

Real files and a real SeaweedFS behind a counting proxy; listings are counted as in tests/ledger/test_keyspace.py.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import fixtures_ledger as ledger_gen
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_keyspace import _listings, _lists, _read, _same_as_objects
from test_segments import CountingProxy, _expected, _totals

from elo_per_token.ledger import FileLedger, open_ledger
from elo_per_token.ledger.keyspace import PLANNED_DIR, declare_open, declared_or_why, read_plan, record_listed
from elo_per_token.ledger.segments import compact_run, read_index, segment_state


def _undeclared(tmp_path: Path, n: int) -> tuple[Path, FileLedger]:
    root = tmp_path / "ledger"
    ledger_gen.write_local(root, "r", n)  # as another tool leaves a run: job objects only
    return root, FileLedger(root)


def _planned(led: FileLedger) -> list[str]:
    return led.list_blobs("r", PLANNED_DIR)


def test_compacting_an_undeclared_run_records_its_keys(tmp_path):
    root, led = _undeclared(tmp_path, 300)
    res = compact_run(led, "r")
    assert (res.found_by, res.jobs) == ("listed", 300)
    assert res.why_listed == "the run is not compacted" and res.recorded
    (listed,) = _planned(led)
    assert listed.startswith("planned/listed-")
    # Read through the segment and the recorded keys: no listing, the same records as the objects.
    assert _same_as_objects(root, "r") == {"jobs": 300, "listings": 0}


def test_objects_written_after_the_compaction_are_found_by_the_next_one(tmp_path):
    root, led = _undeclared(tmp_path, 300)
    compact_run(led, "r")
    first = _planned(led)
    ledger_gen.write_local(root, "r", 40, offset=300)  # the other tool keeps writing
    # A compaction of such a run always lists (listed- records do not hide new objects from it)…
    (res, n_lists) = _listings(lambda: compact_run(led, "r"))
    assert (res.found_by, res.jobs, res.already, n_lists) == ("listed", 40, 300, 1)
    assert "another tool" in res.why_listed
    # …and its record (a superset) replaces the older one.
    assert len(_planned(led)) == 1 and _planned(led) != first
    (frame, n_lists) = _listings(lambda: _read(root, "r"))
    assert n_lists == 0 and _totals(frame) == _totals(_read(root, "r", objects_only=True)) == _expected(340)


def test_objects_written_after_the_compaction_are_read_without_a_listing(tmp_path, monkeypatch):
    """The reader finds them in the lines the other tool appended to its change log (ledger/changelog.py)
    since the compaction's listing began."""
    root, led = _undeclared(tmp_path, 300)
    compact_run(led, "r")
    ledger_gen.write_local(root, "r", 5, offset=300)
    new = sorted(ledger_gen.job_frame("r", 5, offset=300)["job_key"].to_list())
    (root / "runs" / "r" / "changes").mkdir()
    (root / "runs" / "r" / "changes" / "tool.keys").write_text("".join(k + "\n" for k in new))
    index = read_index(led, "r", segment_state(led, "r").committed)
    (plan, n_lists) = _listings(lambda: read_plan(led, "r", index))
    assert (plan.found_by, plan.tail, n_lists) == ("declared", new, 0)
    (frame, n_lists) = _listings(lambda: _read(root, "r"))
    assert n_lists == 0 and _totals(frame) == _expected(305)
    # EPT_VERIFY_JOBS=1: listed, and the plan says why.
    monkeypatch.setenv("EPT_VERIFY_JOBS", "1")
    (plan, n_lists) = _listings(lambda: read_plan(led, "r", index))
    assert (plan.found_by, plan.tail, n_lists) == ("listed", new, 1) and "EPT_VERIFY_JOBS" in plan.why


def test_no_record_over_declarations_or_an_open_marker(tmp_path):
    root = tmp_path / "ledger"
    led = FileLedger(root)
    ledger_gen.declare(led, "r", 300)
    ledger_gen.write_local(root, "r", 300)
    res = compact_run(led, "r")  # first compaction of a swept run: listed (nothing indexed yet), not recorded
    assert res.found_by == "listed" and res.recorded is None
    assert all(n.startswith("planned/keys-") for n in _planned(led))

    led2 = FileLedger(tmp_path / "other")
    ledger_gen.write_local(tmp_path / "other", "r", 50)
    declare_open(led2, "r")
    assert compact_run(led2, "r").recorded is None
    index = read_index(led2, "r", segment_state(led2, "r").committed)
    plan = read_plan(led2, "r", index)
    assert plan.found_by == "listed" and "could not declare" in plan.why


# ---- hostile planned/ contents (another tool's bytes) --------------------------------------------------------

_NAMES = st.sampled_from(["listed-" + "a" * 32 + ".parquet", "keys-" + "b" * 32 + ".parquet", "listed-zz.parquet",
                          "open-1", "listed-" + "c" * 16 + ".parquet"])  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.tuples(_NAMES, st.binary(max_size=4096)), min_size=1, max_size=4))
def test_hostile_planned_objects_fall_back_to_a_listing(tmp_path_factory, files):
    """Whatever lies in planned/ (garbage bytes under a record's name, unknown names), a read gives the run's
    records, finds the uncompacted ones, and says why when it lists; bounded in time and memory."""
    root = tmp_path_factory.mktemp("h")
    led = FileLedger(root)
    ledger_gen.write_local(root, "r", 60)
    compact_run(led, "r")
    ledger_gen.write_local(root, "r", 3, offset=60)
    for name, data in files:
        p = root / "runs" / "r" / PLANNED_DIR / name
        p.write_bytes(data)
    index = read_index(led, "r", segment_state(led, "r").committed)
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        got = declared_or_why(led, "r")
        plan = read_plan(led, "r", index)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - t0 < 30 and peak < 64 * 2**20
    # Random bytes are never a readable key record: the reader lists, finds the 3 new objects, says why.
    assert isinstance(got, str) and got
    assert plan.found_by == "listed" and plan.why == got and len(plan.tail) == 3


_ODD = st.text(
    st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=30
)


def _is_key(name: str) -> bool:
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.contracts.keys import check_key

    try:
        return bool(check_key(name))
    except InputError:
        return False


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.tuples(st.sampled_from(["", "x/", "math/odd dir/"]), _ODD), min_size=1, max_size=6,
                      unique=True))  # fmt: skip
def test_objects_another_tool_names_oddly_after_the_compaction(tmp_path_factory, names):
    """Names no ept job key has (spaces, newlines, dots, unicode), written after the compaction by another
    tool and logged in its change log: the reader finds every one a job key can name (contracts.keys), skips
    the log lines that cannot name one, or lists and says why; never an exception, bounded time."""
    root = tmp_path_factory.mktemp("odd")
    led = FileLedger(root)
    ledger_gen.write_local(root, "r", 40)
    compact_run(led, "r")
    want = set()
    log = root / "runs" / "r" / "changes" / "tool.keys"
    log.parent.mkdir(exist_ok=True)
    for d, n in names:
        if n.startswith(".tmp-") or n in (".", ".."):
            continue
        p = root / "runs" / "r" / "jobs" / (d + n + ".jsonl")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b'{"kind": "call"}\n')
        with open(log, "ab") as f:
            f.write((d + n + "\n").encode("utf-8", "surrogatepass"))
        if "\n" not in n and _is_key(d + n):  # a name no job key has: its log line is skipped
            want.add(d + n)
    index = read_index(led, "r", segment_state(led, "r").committed)
    t0 = time.monotonic()
    plan = read_plan(led, "r", index)
    assert time.monotonic() - t0 < 30
    assert set(plan.tail) == want
    assert plan.found_by == "declared" or plan.why


def test_record_listed_refuses_runs_with_writer_declarations(tmp_path):
    import polars as pl

    _, led = _undeclared(tmp_path, 10)
    ledger_gen.declare(led, "r", 10)
    assert record_listed(led, "r", pl.Series(["x"])) is None


# ---- S3 ----------------------------------------------------------------------------------------------------


@pytest.mark.services
def test_s3_undeclared_compacted_run_reads_without_listing(s3_bucket, s3_env, monkeypatch):
    from elo_per_token.analysis.io import RunSource, read_run

    proxy = CountingProxy(s3_env.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    try:
        led = open_ledger(f"s3://{s3_bucket}/u")
        ledger_gen.write_s3(led, "r", 400)
        res = compact_run(led, "r")
        assert res.found_by == "listed" and res.recorded and res.recorded.startswith("s3://")
        proxy.requests.clear()
        proxy.full.clear()
        frame, _, _ = read_run(RunSource(f"s3://{s3_bucket}/u", "r"))
        assert _totals(frame) == _expected(400)
        assert _lists(proxy, "u/runs/r/jobs/") == 0 and not proxy.gets(".jsonl")
    finally:
        proxy.close()
        os.environ.pop("EPT_VERIFY_JOBS", None)
