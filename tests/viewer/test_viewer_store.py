"""`ept view` without a browser: the store follows a running sweep (the analysis is recomputed when jobs land,
the page says how many are done and reloads), and hostile URLs get a 4xx quickly, never a crash."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_compare import write_ledger_run  # tests/ is on sys.path (rootdir conftest)

from elo_per_token.contracts.errors import InputError
from elo_per_token.viewer.server import NotFound, route
from elo_per_token.viewer.store import Store


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ledger")
    write_ledger_run(root, "full", 3, n_tasks=12)
    return root


def test_store_follows_a_running_sweep(tmp_path: Path) -> None:
    src = tmp_path / "src"
    run = Path(write_ledger_run(src, "live", 4, n_tasks=12))
    jobs = sorted((run / "jobs").rglob("*.jsonl"))
    led = tmp_path / "led"
    (led / "runs" / "live" / "jobs").mkdir(parents=True)
    shutil.copy(run / "manifest.json", led / "runs" / "live" / "manifest.json")
    import json

    m = json.loads((led / "runs" / "live" / "manifest.json").read_text())
    (led / "runs" / "live" / "manifest.json").write_text(json.dumps({**m, "n_jobs": len(jobs)}))

    def land(files: list[Path]) -> None:
        for f in files:
            dest = led / "runs" / "live" / f.relative_to(run)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, dest)

    store = Store(str(led))
    first = store.view("live")
    assert first.done == 0 and first.running and first.doc is None and first.error
    _, body = route(store, "/run/live", "")
    assert b'http-equiv="refresh"' in body and b"0 of " in body
    land(jobs[: len(jobs) // 2])
    half = store.view("live")
    assert half.done == len(jobs) // 2 and half.running
    assert store.view("live") is half  # nothing landed: the cached analysis
    land(jobs[len(jobs) // 2 :])
    done = store.view("live")
    assert done.done == len(jobs) and not done.running and done.doc is not None
    _, body = route(store, "/run/live", "")
    assert b'http-equiv="refresh"' not in body and b'id="returns-table"' in body


@pytest.mark.slow
@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.text(max_size=300), st.text(max_size=300))
def test_hostile_urls_are_refused_quickly(ledger: Path, path: str, query: str) -> None:
    store = Store(str(ledger))
    for p in (
        path,
        "/run/" + path,
        "/run/full/" + path,
        "/run/full/job",
        "/run/full/task",
        "/static/" + path,
    ):
        t0 = time.perf_counter()
        try:
            ctype, body = route(store, p, query)
        except (NotFound, InputError):
            pass
        else:
            assert ctype.startswith(("text/", "application/json"))
            assert b"<script>" not in body.replace(b'<script src="/static/view.js" defer></script>', b"")
        assert time.perf_counter() - t0 < 60  # the first visit analyses the run; later ones are cached
