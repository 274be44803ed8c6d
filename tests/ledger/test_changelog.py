"""A compacted run written by another tool knows what changed since its compaction without a walk (issue 39):
the reader reads the change log's new lines (ledger/changelog.py), never lists or walks jobs/. Real files;
the walk and the listings are counted with audit hooks (os.scandir / os.listdir of the run's jobs/, any
`find` started), so the old reader (`find -newermt` over every job directory) fails here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import fixtures_ledger as ledger_gen
import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_segments import _expected, _totals
from walk_audit import walks

from elo_per_token.analysis.io import RunSource, read_run
from elo_per_token.ledger import FileLedger
from elo_per_token.ledger.changelog import parse_keys
from elo_per_token.ledger.keyspace import read_plan
from elo_per_token.ledger.segments import compact_run, read_index, segment_state


def _run(tmp_path: Path, n: int = 200) -> tuple[Path, FileLedger]:
    root = tmp_path / "ledger"
    ledger_gen.write_local(root, "r", n)  # as another tool leaves it: job objects only
    led = FileLedger(root)
    compact_run(led, "r")
    return root, led


def _log(root: Path, name: str, data: bytes) -> None:
    p = root / "runs" / "r" / "changes" / name
    p.parent.mkdir(exist_ok=True)
    with open(p, "ab") as f:
        f.write(data)


def _plan(led: FileLedger):
    return read_plan(led, "r", read_index(led, "r", segment_state(led, "r").committed))


def test_logged_objects_are_read_without_a_walk(tmp_path):
    root, led = _run(tmp_path)
    # Nothing new: the read touches no job directory.
    (plan, seen) = walks(lambda: _plan(led))
    assert (plan.found_by, plan.tail, seen) == ("declared", [], [])
    new = sorted(ledger_gen.job_frame("r", 7, offset=200)["job_key"].to_list())
    ledger_gen.write_local(root, "r", 7, offset=200)
    _log(root, "tool-1.keys", "".join(k + "\n" for k in new[:4]).encode())
    _log(root, "tool-2.keys", "".join(k + "\n" for k in new[4:]).encode())
    (plan, seen) = walks(lambda: _plan(led))
    assert (plan.found_by, plan.tail, seen) == ("declared", new, [])
    (frame, seen) = walks(lambda: read_run(RunSource(str(root), "r"))[0])
    assert seen == [] and _totals(frame) == _expected(207)


def test_the_compaction_notes_the_log_so_old_lines_are_not_read_again(tmp_path):
    """Lines logged before a compaction are past: the reader reads only what was appended since."""
    root, led = _run(tmp_path, 100)
    keys = sorted(ledger_gen.job_frame("r", 5, offset=100)["job_key"].to_list())
    ledger_gen.write_local(root, "r", 5, offset=100)
    _log(root, "t.keys", "".join(k + "\n" for k in keys).encode())
    compact_run(led, "r")  # folds the 5 in and notes the log's size
    _log(root, "t.keys", b"math/not-written-yet/greedy_n1/r0\n")
    (plan, seen) = walks(lambda: _plan(led))
    # The new line names no object (yet): probed, absent. The old lines: not read again (nothing to probe).
    assert (plan.tail, seen) == ([], [])


def test_an_object_nobody_logged_waits_for_the_next_compaction(tmp_path, monkeypatch):
    root, led = _run(tmp_path, 100)
    ledger_gen.write_local(root, "r", 3, offset=100)
    assert _plan(led).tail == []  # not logged: no walk finds it…
    monkeypatch.setenv("EPT_VERIFY_JOBS", "1")
    assert len(_plan(led).tail) == 3  # …a listing does
    monkeypatch.delenv("EPT_VERIFY_JOBS")
    compact_run(led, "r")
    assert _totals(read_run(RunSource(str(root), "r"))[0]) == _expected(103)


def test_parse_keys_keeps_complete_job_key_lines_only():
    data = b"a/b\n../x\n\xff\xfe\n  c/d \r\n\n/abs\ne/f"
    assert parse_keys(data) == (["a/b", "c/d"], 3)  # e/f: no newline yet, left for the next read


_LINE = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"..", b"../../etc/passwd", b"/abs", b"a//b", b".tmp-x", b"x" * 5000, b"\x00"]),
    st.just(b"math/math-000100/greedy_n1/r0"),
)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.tuples(st.sampled_from(["a.keys", "b.keys", "odd name.keys", "c.txt"]),
                                st.lists(_LINE, max_size=30)), max_size=4))  # fmt: skip
def test_hostile_change_logs(tmp_path_factory, files):
    """Whatever another tool leaves in changes/ (garbage bytes, unsafe names, huge lines, names that are not
    change files): the reader never raises, never walks, and finds exactly the logged objects that exist;
    bounded in time and memory."""
    root, led = _run(tmp_path_factory.mktemp("h"), 100)
    ledger_gen.write_local(root, "r", 1, offset=100)  # math/math-000100/greedy_n1/r0 exists
    written = ledger_gen.job_frame("r", 1, offset=100)["job_key"].to_list()[0]
    logged = False
    for name, lines in files:
        _log(root, name, b"\n".join(lines) + b"\n")
        logged |= (
            name.endswith(".keys") and " " not in name and any(ln.strip() == written.encode() for ln in lines)
        )
    (plan, seen) = walks(lambda: bounded(lambda: _plan(led), time_s=30, memory_mb=64))
    assert seen == []
    assert plan.tail == ([written] if logged else [])


def test_change_files_that_are_not_files_are_not_opened(tmp_path):
    """A link to /dev/zero or out of the ledger, a FIFO: skipped (never read), the read goes on."""
    root, led = _run(tmp_path, 50)
    d = root / "runs" / "r" / "changes"
    d.mkdir()
    os.symlink("/dev/zero", d / "zero.keys")
    (tmp_path / "outside").write_text("math/math-000050/greedy_n1/r0\n")
    os.symlink(tmp_path / "outside", d / "out.keys")
    os.mkfifo(d / "fifo.keys")
    ledger_gen.write_local(root, "r", 1, offset=50)
    t0 = time.monotonic()
    assert _plan(led).tail == [] and time.monotonic() - t0 < 10


@pytest.mark.services
def test_s3_logged_objects_are_read_without_listing_jobs(s3_bucket, s3_env, monkeypatch):
    """On S3 (which cannot append) a tool writes one change object per batch; the reader lists only changes/."""
    from test_keyspace import _lists
    from test_segments import CountingProxy

    from elo_per_token.ledger import open_ledger

    proxy = CountingProxy(s3_env.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    try:
        led = open_ledger(f"s3://{s3_bucket}/c")
        ledger_gen.write_s3(led, "r", 200)
        compact_run(led, "r")
        ledger_gen.write_s3(led, "r", 5, offset=200)
        new = sorted(ledger_gen.job_frame("r", 5, offset=200)["job_key"].to_list())
        led.put_blob("r", "changes/batch-1.keys", "".join(k + "\n" for k in new).encode())
        proxy.requests.clear()
        proxy.full.clear()
        frame, _, _ = read_run(RunSource(f"s3://{s3_bucket}/c", "r"))
        assert _totals(frame) == _expected(205)
        assert _lists(proxy, "c/runs/r/jobs/") == 0
    finally:
        proxy.close()
