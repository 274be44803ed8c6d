"""The analysis cache `ept analyze` fills and `ept view` reads (analysis/runcache.py, issue 39): a cold viewer
serves a compacted run from what one `ept analyze` left, only for the same run state and options; the report's
failures of a compacted run come from its segments, not a read of every job object; hostile cache files
(garbage, truncated, links, FIFOs, huge) are misses, bounded."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from bounds import bounded
from cli_runner import run_ept
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_compare import write_ledger_run

from elo_per_token.analysis.html_gather import failures_by_class
from elo_per_token.analysis.runcache import FRAME_IPC_BYTES, MAX_ENTRY_BYTES, AnalysisEntry, DiskCache
from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger import FileLedger
from elo_per_token.ledger.segments import compact_run
from elo_per_token.viewer.store import Store

MARK = "planted in the entry ept analyze stored"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A compacted run with failed jobs; its ledger root."""
    root = tmp_path / "ledger"
    write_ledger_run(root, "r", 3, n_tasks=12, fail_jobs=3)
    compact_run(FileLedger(root), "r")
    return root


def _entries(cache: Path) -> list[Path]:
    return [p for p in cache.glob("*.pickle") if isinstance(pickle.loads(p.read_bytes()), AnalysisEntry)]


def _drop_views(cache: Path) -> None:
    """Forget the viewer's own cached pages (a new viewer then looks for what `ept analyze` stored)."""
    for p in cache.glob("*.pickle"):
        if not isinstance(pickle.loads(p.read_bytes()), AnalysisEntry):
            p.unlink()


def _plant(entry_file: Path) -> None:
    """Mark the stored result, so a page built from it can be told apart from one analysed afresh."""
    entry = pickle.loads(entry_file.read_bytes())
    entry.result.warnings.append(MARK)
    entry_file.write_bytes(pickle.dumps(entry))


def test_a_cold_viewer_serves_the_analysis_ept_analyze_stored(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("EPT_VIEW_CACHE", str(cache))
    res = run_ept("analyze", str(run / "runs" / "r"), "--rounds", "20")
    assert res.returncode == 0, res.stderr
    [entry] = _entries(cache)
    _plant(entry)
    # A new viewer (nothing in memory) whose options are the run's: the stored analysis is used. The
    # manifest names no plan options, so the viewer's are the analyze defaults; --rounds 20 differs.
    assert MARK not in (Store(str(run), cache_dir=str(cache)).view("r").result.warnings)
    res = run_ept("analyze", str(run / "runs" / "r"))
    assert res.returncode == 0, res.stderr
    [fresh] = [p for p in _entries(cache) if p != entry]
    _plant(fresh)
    # Analysed again at the same state with the same options: the stored entry is kept, not rewritten.
    assert run_ept("analyze", str(run / "runs" / "r")).returncode == 0
    _drop_views(cache)
    v = Store(str(run), cache_dir=str(cache)).view("r")
    assert MARK in v.result.warnings and v.error is None
    # Another state of the run (its manifest changed): the stored analysis is not used for it.
    led = FileLedger(run)
    led.put_manifest("r", {**led.get_manifest("r"), "note": "changed"})
    _drop_views(cache)
    v = Store(str(run), cache_dir=str(cache)).view("r")
    assert MARK not in v.result.warnings


def test_analyze_of_plain_logs_or_a_run_that_is_not_compacted_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("EPT_VIEW_CACHE", str(cache))
    root = tmp_path / "ledger"
    write_ledger_run(root, "r", 3, n_tasks=12)
    assert run_ept("analyze", str(root / "runs" / "r"), "--rounds", "0").returncode == 0
    assert not cache.exists() or _entries(cache) == []


def test_failures_of_a_compacted_run_equal_those_of_its_objects(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failed job's object copied under a new key after the compaction: in no segment (found by listing,
    # EPT_VERIFY_JOBS), still counted.
    monkeypatch.setenv("EPT_VERIFY_JOBS", "1")
    failed = next(
        p for p in (run / "runs" / "r" / "jobs").rglob("*.jsonl") if b'"credential"' in p.read_bytes()
    )
    (failed.parent / "r9.jsonl").write_bytes(failed.read_bytes())
    jobs = str(run / "runs" / "r" / "jobs") + "/"
    segments = sorted(str(p) for p in (run / "runs" / "r" / "compact").glob("*.parquet"))
    from_objects = failures_by_class([jobs])  # the run's objects read one by one
    # The objects a segment holds are not read again: emptied, they change nothing (the copy under the new
    # key, in no segment, is read).
    for p in (run / "runs" / "r" / "jobs").rglob("*.jsonl"):
        if p.name != "r9.jsonl":
            p.write_bytes(b"")
    got = failures_by_class([*segments, jobs])  # as a compacted run's analysis lists its inputs
    assert got == from_objects and sum(r["count"] for r in got) == 4


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(max_size=4000),
    cut=st.integers(min_value=0, max_value=400),
    kind=st.sampled_from(["garbage", "truncated", "link", "fifo", "dir", "huge", "wrong type"]),
)
def test_hostile_cache_entries_are_misses(tmp_path_factory, data: bytes, cut: int, kind: str) -> None:
    """Whatever lies under an entry's name: a miss (None), never an exception; bounded in time and memory,
    a huge file never read."""
    folder = tmp_path_factory.mktemp("cache")
    folder.chmod(0o700)
    cache = DiskCache(folder)
    key = cache.key("analysis", kind)
    path = folder / f"{key}.pickle"
    good = pickle.dumps({"result": list(range(200))})
    if kind == "garbage":
        path.write_bytes(data)
    elif kind == "truncated":
        path.write_bytes(good[: min(cut, len(good) - 1)])
    elif kind == "link":
        target = folder / "elsewhere"
        target.write_bytes(good)
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "huge":
        with open(path, "wb") as f:  # sparse: no disk used, but over the bound
            f.truncate(MAX_ENTRY_BYTES + 1)
    else:
        path.write_bytes(pickle.dumps(["not", "an", "entry"]))
    got = bounded(lambda: cache.load(key), time_s=5, memory_mb=64)
    if kind == "wrong type":
        assert not isinstance(got, AnalysisEntry)
    elif kind != "garbage" or got is None:
        assert got is None


@pytest.mark.parametrize("how", [("--no-cache",), ("EPT_ANALYZE_CACHE", "0"), ("EPT_ANALYZE_CACHE", "off")])
def test_the_opt_out_stores_no_entry(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: tuple[str, ...]
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("EPT_VIEW_CACHE", str(cache))
    args = ["analyze", str(run / "runs" / "r"), "--rounds", "0", "--out", str(tmp_path / "o")]
    if how[0].startswith("EPT_"):
        monkeypatch.setenv(how[0], how[1])
    else:
        args.append(how[0])
    res = run_ept(*args)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "o" / "arms.csv").is_file()
    assert not cache.exists() or list(cache.iterdir()) == []
    monkeypatch.delenv("EPT_ANALYZE_CACHE", raising=False)
    assert run_ept("analyze", str(run / "runs" / "r"), "--rounds", "0").returncode == 0
    assert len(_entries(cache)) == 1  # the same command without the opt-out stores one


@settings(max_examples=10, deadline=None)
@given(value=st.text(min_size=1, max_size=40).filter(lambda v: v.strip().lower() not in _BOOL_WORDS))
def test_a_bad_opt_out_value_is_a_named_error(value: str) -> None:
    """EPT_ANALYZE_CACHE set to anything but a boolean word: an error naming the variable, no traceback."""
    if "\0" in value:
        return  # an environment value cannot hold NUL
    from elo_per_token.contracts.settings import read_bool

    with pytest.raises(InputError) as e:
        bounded(lambda: read_bool("EPT_ANALYZE_CACHE", {"EPT_ANALYZE_CACHE": value}), time_s=1, memory_mb=8)
    assert e.value.field == "EPT_ANALYZE_CACHE"


_BOOL_WORDS = ("", "1", "true", "yes", "on", "0", "false", "no", "off")

_CELLS = st.one_of(st.none(), st.text(max_size=12), st.sampled_from(["", "\u2028", "é", "\x00", "a" * 300]))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cells=st.lists(_CELLS, max_size=40),
    nums=st.lists(st.one_of(st.none(), st.floats(allow_nan=True)), max_size=40),
    big=st.booleans(),
)
def test_frames_in_an_entry_come_back_exact_and_small(tmp_path_factory, cells, nums, big: bool) -> None:
    """A stored entry's frames, degenerate (empty, nulls, NaN, odd text) or large, load back equal with
    their dtypes (categoricals included); a large one is stored compressed (the 1M-job records frame was
    830 MB as polars pickles it), in bounded time and memory."""
    import polars as pl

    folder = tmp_path_factory.mktemp("cache")
    cache = DiskCache(folder)
    n = max(len(cells), len(nums))
    small = pl.DataFrame(
        {
            "c": pl.Series(cells + [None] * (n - len(cells)), dtype=pl.String).cast(pl.Categorical),
            "x": pl.Series(nums + [None] * (n - len(nums)), dtype=pl.Float64),
        }
    )
    frame = pl.concat([small] * (1 + 40_000 // max(n, 1))) if big and n else small
    value = {"frames": [frame, frame.head(0)], "other": [1, "two"]}
    bounded(lambda: cache.save("k", value), time_s=10, memory_mb=64)
    back = bounded(lambda: cache.load("k"), time_s=10, memory_mb=64)
    assert back["other"] == [1, "two"]
    for got, want in zip(back["frames"], value["frames"], strict=True):
        assert got.schema == want.schema and got.equals(want)
    if frame.estimated_size() > FRAME_IPC_BYTES:
        assert (folder / "k.pickle").stat().st_size < frame.estimated_size() / 4
