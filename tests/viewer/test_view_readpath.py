"""`ept view` never lists a run to answer a page (issue 39): a compacted run's pages cost no listing and no walk
of jobs/ at all; a run that is not compacted is counted by the background refresher, never on a request's
thread; analyses come from a disk cache on a cold server; a request waits at most its budget; concurrent
requests share one analysis. Real files, the real server's route(); listings and walks are counted with audit
hooks (any `find` started, os.scandir / os.listdir of a jobs/ folder) and the thread that made them.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fixtures_ledger as ledger_gen
import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from walk_audit import walks

from elo_per_token.ledger import FileLedger
from elo_per_token.ledger.segments import compact_run
from elo_per_token.viewer.runstate import DiskCache
from elo_per_token.viewer.server import route
from elo_per_token.viewer.store import Store


@pytest.fixture(scope="module")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run another tool wrote (job objects only), `ept compact`ed."""
    root = tmp_path_factory.mktemp("c")
    ledger_gen.write_local(root, "r", 300)
    compact_run(FileLedger(root), "r")
    return root


PAGES = [("/run/r", ""), ("/run/r/report.json", ""), ("/run/r/arm", "arm=greedy%401"), ("/run/r/grid", ""),
         ("/run/r/task", "task=math-000000"), ("/run/r/samples", ""), ("/", "")]  # fmt: skip


def test_a_compacted_runs_pages_never_list_it(compacted: Path) -> None:
    # state_ttl_s=0: the run's state is measured again for every request, and still nothing is listed.
    store = Store(str(compacted))
    for path, query in PAGES * 2:
        ((_ctype, body), seen) = walks(lambda p=path, q=query: route(store, p, q))
        assert seen == [], f"{path}: listed or walked jobs/ ({seen})"
        assert body


def test_an_uncompacted_run_is_counted_off_the_request_thread(tmp_path: Path) -> None:
    root = tmp_path / "l"
    ledger_gen.write_local(root, "r", 120)
    store = Store(str(root), page_budget_s=30.0, state_ttl_s=3600.0)
    route(store, "/run/r", "")  # the first count and analysis
    (_, seen) = walks(lambda: [route(store, p, q) for p, q in PAGES * 3])
    assert seen == []  # 21 requests within the count's lifetime: no listing at all
    store.states.ttl = 0.0
    (_, seen) = walks(lambda: route(store, "/run/r", ""))
    assert seen and all(w.thread.startswith("ept-view-count") for w in seen)  # listed, by the refresher only


def test_a_cold_server_answers_from_the_disk_cache(compacted: Path, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    first = Store(str(compacted), cache_dir=cache)
    built = first.view("r")
    assert built.doc is not None and os.listdir(cache)
    cold = Store(str(compacted), cache_dir=cache)
    calls: list[str] = []
    real = cold._analyse
    cold._analyse = lambda run_id, token: calls.append(run_id) or real(run_id, token)  # type: ignore[method-assign]
    v = cold.view("r")
    assert calls == [] and v.doc is not None and v.doc.as_dict() == built.doc.as_dict()
    assert v.samples is not None  # the explorer's frame came from the cache too
    # A changed run (a new segment's worth of jobs) is another state: analysed again.
    ledger_gen.write_local(compacted, "r", 20, offset=300)
    compact_run(FileLedger(compacted), "r")
    try:
        assert cold.view("r").done == 320 and calls == ["r"]
    finally:
        import shutil

        for n in os.listdir(compacted / "runs" / "r" / "compact"):
            if not n.startswith("part-00001."):
                (compacted / "runs" / "r" / "compact" / n).unlink()
        shutil.rmtree(compacted / "runs" / "r" / "jobs" / "math" / "math-000100", ignore_errors=True)


def test_requests_wait_at_most_their_budget_and_share_one_analysis(tmp_path: Path) -> None:
    root = tmp_path / "l"
    ledger_gen.write_local(root, "r", 200)
    store = Store(str(root), page_budget_s=0.05)
    calls: list[str] = []
    gate = threading.Event()
    real = store._analyse

    def slow(run_id: str, token: str):  # an analysis that takes as long as the test wants
        calls.append(run_id)
        gate.wait(60)
        return real(run_id, token)

    store._analyse = slow  # type: ignore[method-assign]
    t0 = time.monotonic()
    with ThreadPoolExecutor(10) as ex:
        got = list(ex.map(lambda _: route(store, "/run/r", ""), range(10)))
    assert time.monotonic() - t0 < 20
    assert calls == ["r"]  # ten requests, one analysis
    assert all(b'http-equiv="refresh"' in body and b"being analysed" in body for _, body in got)
    gate.set()
    deadline = time.monotonic() + 120
    while store.view("r").doc is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert store.view("r").doc is not None and calls == ["r"]


def test_a_running_sweeps_counters_update_without_a_new_analysis(tmp_path: Path) -> None:
    root = tmp_path / "l"
    ledger_gen.write_local(root, "r", 150)
    m = root / "runs" / "r" / "manifest.json"
    m.write_text('{"n_jobs": 300}')
    store = Store(str(root), reanalyse_s=3600.0)
    calls: list[str] = []
    real = store._analyse
    store._analyse = lambda run_id, token: calls.append(run_id) or real(run_id, token)  # type: ignore[method-assign]
    assert store.view("r").done == 150 and calls == ["r"]
    ledger_gen.write_local(root, "r", 30, offset=150)
    v = store.view("r")
    assert (v.done, v.analysed_done, calls) == (180, 150, ["r"])
    _, body = route(store, "/run/r", "")
    assert b"180 of 300" in body and b"the table is of the first 150" in body


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=5000), mode=st.sampled_from([0o600, 0o644, 0o666, 0o622]))
def test_hostile_cache_files_are_misses(tmp_path_factory, data: bytes, mode: int) -> None:
    """Whatever lies in the cache under a key's name (garbage, a pickle another user could have written):
    a miss, never an exception, bounded."""
    folder = tmp_path_factory.mktemp("cache")
    folder.chmod(0o700)
    cache = DiskCache(folder)
    key = cache.key("x")
    (folder / f"{key}.pickle").write_bytes(data)
    (folder / f"{key}.pickle").chmod(mode)
    got = bounded(lambda: cache.load(key), time_s=5, memory_mb=64)
    if mode & 0o022:
        assert got is None  # writable by others: never unpickled
    cache.save(key, {"a": 1})
    assert cache.load(key) == {"a": 1}


def test_a_cache_folder_others_can_write_is_not_used(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    cache = DiskCache(folder)
    cache.save("k", [1, 2])
    assert cache.load("k") == [1, 2]
    folder.chmod(0o777)
    assert cache.load("k") is None


def test_a_comparison_is_built_off_the_request_thread_and_never_holds_up_other_pages(tmp_path: Path) -> None:
    """The compare page waits at most its budget (then says it is being compared and reloads); pages of the
    runs are answered meanwhile; ten compare requests share one build; its result is kept per run states."""
    root = tmp_path / "l"
    ledger_gen.write_local(root, "a", 120)
    ledger_gen.write_local(root, "b", 120)
    store = Store(str(root))
    store.view("a"), store.view("b")  # the runs' own analyses, so their pages are warm
    store.page_budget_s = 0.05
    gate = threading.Event()
    builds: list[tuple[str, ...]] = []
    real = store._build_compare

    def slow(key):  # a comparison that takes as long as the test wants
        builds.append(key[:2])
        gate.wait(60)
        return real(key)

    store._build_compare = slow  # type: ignore[method-assign]
    t0 = time.monotonic()
    with ThreadPoolExecutor(10) as ex:
        got = list(ex.map(lambda _: route(store, "/compare", "a=a&b=b"), range(10)))
        # While the comparison is held, a run page is answered at once (not queued behind it).
        t1 = time.monotonic()
        _, run_page = route(store, "/run/a", "")
        assert time.monotonic() - t1 < 5 and b"being analysed" not in run_page
    assert time.monotonic() - t0 < 20
    assert builds == [("a", "b")]  # ten requests, one build
    assert all(b'http-equiv="refresh"' in body and b"being compared" in body for _, body in got)
    gate.set()
    deadline = time.monotonic() + 120
    while store.compare("a", "b") is None and time.monotonic() < deadline:
        time.sleep(0.1)
    _, page = route(store, "/compare", "a=a&b=b")
    assert b'id="verdict"' in page and b"being compared" not in page and builds == [("a", "b")]


def test_a_compacted_runs_answers_come_from_its_segments_as_from_its_objects(compacted: Path) -> None:
    """The explorer's answers and latencies of a compacted run read from its segments equal those read from
    its job objects one by one (viewer.samples.side_frame)."""
    import polars as pl

    from elo_per_token.viewer.samples import side_frame, side_from_segments

    segs = sorted(str(p) for p in (compacted / "runs" / "r" / "compact").glob("*.parquet"))
    jobs = compacted / "runs" / "r" / "jobs"
    keys = sorted(set(pl.read_parquet(segs, columns=["job_key"])["job_key"].to_list()))  # the jobs they hold
    got, left = side_from_segments(segs, [*keys, "math/none/greedy_n1/r0"])
    assert left == ["math/none/greedy_n1/r0"]  # a key no segment holds: read from its object
    want = side_frame(keys, lambda k, cap: (jobs / f"{k}.jsonl").read_bytes()[:cap])
    assert got.height == len(keys) and got["answer"].null_count() < got.height
    from polars.testing import assert_frame_equal

    def norm(f: pl.DataFrame) -> pl.DataFrame:
        return f.select(pl.col("job_key").cast(pl.String), "answer", "latency_s").sort("job_key")

    assert_frame_equal(norm(got), norm(want), check_exact=False)  # latencies summed in another order
    assert pl.Series(keys).is_in(got["job_key"].implode()).all()
