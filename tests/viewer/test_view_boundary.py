"""`ept view` at its boundary, over real HTTP against a real `ept view` process: it answers only for its own
origin (Host allow-list, Origin, a token off loopback), bounds what one request costs (a huge job object, idle
connections, a slow analysis of another run, paged lists), refuses links out of the ledger, and lists a run it
cannot read as unreadable instead of breaking the index (issue 36, items 3, 9, 10, 11)."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_compare import write_ledger_run  # tests/ is on sys.path (rootdir conftest)
from view_server import View, request, view

NAMED_PLAN = {"name": "p", "suites": ["math", "code"]}


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ledger")
    write_ledger_run(root, "full", 3, n_tasks=12)
    return root


def _job_key(ledger: Path, run: str) -> str:
    f = sorted((ledger / "runs" / run / "jobs").rglob("*.jsonl"))[0]
    return f.relative_to(ledger / "runs" / run / "jobs").as_posix()[: -len(".jsonl")]


def test_only_its_own_origin_is_answered(ledger: Path) -> None:
    """A page on another name (DNS rebinding) or another origin reads nothing; the viewer's own names do."""
    with view(ledger) as v:
        for host in (f"127.0.0.1:{v.port}", f"localhost:{v.port}", f"LOCALHOST:{v.port}", f"[::1]:{v.port}"):
            assert request(v.port, "/", host=host).status == 200, host
        for host in ("attacker.example", f"attacker.example:{v.port}", "127.0.0.1", f"127.0.0.1:{v.port + 1}",
                     f"localhost.:{v.port}", f"127.0.0.1:{v.port}.attacker.example"):  # fmt: skip
            for path in ("/", "/run/full/report.json", f"/run/full/job?key={_job_key(ledger, 'full')}"):
                r = request(v.port, path, host=host)
                assert r.status == 421, (host, path, r.status)
                assert b"full" not in r.body and b"Elo" not in r.body
        ok = f"http://127.0.0.1:{v.port}"
        assert request(v.port, "/", headers=[("Origin", ok)]).status == 200
        for origin in ("http://attacker.example", "null", f"https://127.0.0.1:{v.port}", ok + ".evil"):
            assert request(v.port, "/run/full/report.json", headers=[("Origin", origin)]).status == 403, (
                origin
            )
            r = request(v.port, "/run/full", method="POST", headers=[("Origin", origin)])
            assert r.status == 403, origin
        assert request(v.port, "/", headers=[("Host", "attacker.example")]).status == 400  # two Host headers
        assert request(v.port, "http://attacker.example/").status == 400  # absolute-form target
        assert request(v.port, "/run/full", method="POST").status == 405


def test_non_loopback_host_warns_and_requires_a_token(ledger: Path) -> None:
    with view(ledger, "--host", "0.0.0.0") as v:
        m = re.search(r"\?token=([A-Za-z0-9_-]{16,})", v.url)
        assert m, v.url
        token = m.group(1)
        assert request(v.port, "/").status == 403
        assert request(v.port, "/run/full/report.json?token=" + "x" * len(token)).status == 403
        assert request(v.port, "/", headers=[("Cookie", "ept_view_token=wrong")]).status == 403
        first = request(v.port, "/?token=" + token)
        assert first.status == 200 and b"full" in first.body
        assert first.headers["set-cookie"].startswith(f"ept_view_token={token};")
        assert "HttpOnly" in first.headers["set-cookie"] and "SameSite=Strict" in first.headers["set-cookie"]
        assert (
            request(v.port, "/run/full", headers=[("Cookie", f"a=b; ept_view_token={token}")]).status == 200
        )
        r = request(v.port, "/", host="attacker.example", headers=[("Origin", "http://evil.example")])
        assert r.status == 403  # a wildcard address answers any name, but never another origin
        v.proc.terminate()
        v.proc.wait(timeout=30)
        err = v.stderr()
    assert "warning" in err and "0.0.0.0" in err and "token" in err
    assert token not in err  # the access log masks it
    with view(ledger, "--host", "127.0.0.1") as v:
        assert "token" not in v.url  # loopback: no token asked


def test_a_bad_token_option_is_refused(ledger: Path) -> None:
    from cli_runner import run_ept

    r = run_ept("view", str(ledger), "--port", "0", "--token", "short")
    assert r.returncode == 2 and "--token" in r.stderr and "16 or more" in r.stderr


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
def test_idle_connections_are_closed(ledger: Path) -> None:
    """400 connections that never send a request: those over the cap are closed at once, the rest after the
    idle timeout, and the viewer answers again."""
    with view(ledger) as v:
        socks = [socket.create_connection(("127.0.0.1", v.port), timeout=30) for _ in range(400)]
        try:
            deadline = time.monotonic() + 25  # the idle timeout (viewer.server.IDLE_S, 10 s) and slack
            closed = 0
            for s in socks:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    closed += s.recv(1) == b""
                except ConnectionResetError:
                    closed += 1
                except TimeoutError:
                    pass
            assert closed == 400, f"{closed} of 400 idle connections closed"
        finally:
            for s in socks:
                s.close()
        t0 = time.monotonic()
        assert request(v.port, "/").status == 200
        assert time.monotonic() - t0 < 30


def test_a_huge_job_object_costs_the_viewer_its_cap(tmp_path: Path) -> None:
    """A job object of ~200 MB (its outcome a 200 MB answer of '<', each escaped to 4 bytes of HTML): the page
    shows the records in the first MAX_JOB_BYTES and says so; the server's peak memory stays bounded."""
    write_ledger_run(tmp_path, "big", 3, n_tasks=12)
    key = _job_key(tmp_path, "big")
    path = tmp_path / "runs" / "big" / "jobs" / f"{key}.jsonl"
    calls = [x for x in path.read_text().splitlines() if json.loads(x)["kind"] == "call"]
    outcome = json.loads(next(x for x in path.read_text().splitlines() if json.loads(x)["kind"] == "outcome"))
    head, _, tail = json.dumps({**outcome, "answer": "@@"}).partition("@@")
    with path.open("w") as f:
        f.write("\n".join(calls) + "\n" + head)
        for _ in range(200):
            f.write("<" * 2**20)
        f.write(tail + "\n")
    assert path.stat().st_size > 200 * 2**20
    with view(tmp_path) as v:
        before = v.kib()
        t0 = time.monotonic()
        r = request(v.port, f"/run/big/job?key={key}")
        took = time.monotonic() - t0
        grew_mb = (v.kib() - before) / 1024
    assert r.status == 200 and b'id="calls-table"' in r.body
    assert re.search(rb"the viewer reads at most [0-9,]+", r.body)
    assert len(r.body) < 40 * 2**20  # viewer.store.MAX_JOB_BYTES is 8 MB
    assert grew_mb < 150, f"the server grew by {grew_mb:.0f} MB for one page"
    assert took < 30, f"{took:.1f} s"


def test_links_out_of_the_ledger_are_refused(tmp_path: Path) -> None:
    led = tmp_path / "led"
    write_ledger_run(led, "full", 3, n_tasks=12)
    write_ledger_run(led, "linked", 4, n_tasks=12)
    outside = tmp_path / "outside.jsonl"
    key = _job_key(led, "full")
    job = led / "runs" / "full" / "jobs" / f"{key}.jsonl"
    outside.write_text(
        job.read_text().replace('"kind": "outcome"', '"kind": "outcome", "secret": "S3CRET-MARK"')
    )
    assert "S3CRET-MARK" in outside.read_text()
    job.unlink()
    job.symlink_to(outside)
    (tmp_path / "m.json").write_text(json.dumps({"run_id": "linked", "note": "S3CRET-MARK"}))
    (led / "runs" / "linked" / "manifest.json").unlink()
    (led / "runs" / "linked" / "manifest.json").symlink_to(tmp_path / "m.json")
    with view(led) as v:
        r = request(v.port, f"/run/full/job?key={key}")
        assert r.status == 403 and b"outside the ledger" in r.body and b"S3CRET" not in r.body
        index = request(v.port, "/")
        assert index.status == 200 and b"S3CRET" not in index.body
        assert re.search(rb'data-run="linked" class="unreadable".*outside the ledger', index.body)
        assert request(v.port, "/run/linked").status == 403


def _bad_runs(led: Path) -> None:
    """A shared ledger with one good run and one of each kind of bad file (issue 36 item 10)."""
    write_ledger_run(led, "good", 3, n_tasks=12)
    write_ledger_run(
        led, "text-njobs", 3, n_tasks=12, manifest={"run_id": "x", "plan": NAMED_PLAN, "n_jobs": "72"}
    )
    write_ledger_run(led, "bad-identity", 3, n_tasks=12,
                     manifest={"run_id": "y", "plan": NAMED_PLAN, "identity": {"tasks_blob": "identity/tasks-1.json"}})  # fmt: skip
    (led / "runs" / "bad-identity" / "identity").mkdir()
    (led / "runs" / "bad-identity" / "identity" / "tasks-1.json").write_text("\x00garbage{")
    (led / "runs" / "has space").mkdir()
    (led / "runs" / ".DS_Store").mkdir()
    (led / "runs" / "not-json").mkdir()
    (led / "runs" / "not-json" / "manifest.json").write_text("{oops")


def test_one_bad_run_does_not_hide_the_others(tmp_path: Path) -> None:
    _bad_runs(tmp_path)
    with view(tmp_path) as v:
        r = request(v.port, "/")
        assert r.status == 200, r.body[:400]
        page = r.body.decode()
        good = re.search(r'<tr data-run="good">(.*?)</tr>', page)
        assert good and "/run/good" in good.group(1) and ">done<" in good.group(1)
        want = {"text-njobs": r"text-njobs/manifest\.json: field &#x27;n_jobs&#x27;: must be an integer",
                "bad-identity": r"bad-identity/identity/tasks-1\.json: not JSON",
                "has space": r"runs/has space: field &#x27;run_id&#x27;: invalid run id",
                ".DS_Store": r"runs/\.DS_Store: field &#x27;run_id&#x27;",
                "not-json": r"not-json/manifest\.json: not JSON"}  # fmt: skip
        for run, why in want.items():
            row = re.search(rf'<tr data-run="{re.escape(run)}" class="unreadable">(.*?)</tr>', page)
            assert row and re.search(why, row.group(1)) and "unreadable" in row.group(1), (run, page[-3000:])
        assert request(v.port, "/run/good").status == 200
        for run in ("text-njobs", "not-json"):
            r = request(v.port, f"/run/{run}")
            assert r.status == 200 and b"No analysis yet" in r.body and b"manifest.json" in r.body, run
        assert request(v.port, "/run/has%20space").status in (400, 404)


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
def test_a_slow_analysis_holds_up_only_its_own_run(tmp_path: Path) -> None:
    """A plan asking for 100,000 bootstrap rounds (the plan's limit) analyses for a while; another run's page
    is served meanwhile. A manifest asking for 5,000,000 is analysed with the defaults and says so."""
    write_ledger_run(tmp_path, "slow", 3, n_tasks=40,
                     manifest={"run_id": "slow", "plan": NAMED_PLAN, "analysis": {"rounds": 100_000, "seed": 0}})  # fmt: skip
    write_ledger_run(tmp_path, "quick", 4, n_tasks=12,
                     manifest={"run_id": "quick", "plan": NAMED_PLAN, "analysis": {"rounds": 0, "seed": 0}})  # fmt: skip
    write_ledger_run(tmp_path, "huge", 5, n_tasks=12,
                     manifest={"run_id": "huge", "plan": NAMED_PLAN, "analysis": {"rounds": 5_000_000, "seed": 0}})  # fmt: skip
    with view(tmp_path, page_budget_s=2.0) as v:
        assert request(v.port, "/").status == 200  # imports warmed
        # The slow run's page answers within the page budget (viewer.store.PAGE_BUDGET_S), saying it is being
        # analysed and reloading; the analysis goes on off the request thread.
        t0 = time.monotonic()
        s = request(v.port, "/run/slow", timeout=600)
        assert s.status == 200 and b"being analysed" in s.body and b'http-equiv="refresh"' in s.body
        assert time.monotonic() - t0 < 30
        r = request(v.port, "/run/quick")
        assert r.status == 200 and b'id="returns-table"' in r.body
        deadline = time.monotonic() + 600
        while b'id="returns-table"' not in s.body and time.monotonic() < deadline:
            time.sleep(1)
            s = request(v.port, "/run/slow", timeout=600)
        assert s.status == 200 and b'id="returns-table"' in s.body
        h = request(v.port, "/run/huge")
        assert h.status == 200 and b'id="options-from"' in h.body and b"0..100000" in h.body


def test_lists_are_paged(ledger: Path) -> None:
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.viewer.grids import arm_rows
    from elo_per_token.viewer.server import NotFound, route
    from elo_per_token.viewer.store import Store

    store = Store(str(ledger), page_rows=5)
    result = store.view("full").result
    assert result is not None
    arm = result.arms[0]
    n = len(arm_rows(result, arm))
    last, rest = -(-n // 5), n % 5 or 5
    assert n > 10
    _, body = route(store, "/run/full/arm", f"arm={arm}")
    assert body.count(b"<tr data-task=") == 5 and b'id="next-page"' in body and f"{n} tasks".encode() in body
    _, body = route(store, "/run/full/arm", f"arm={arm}&page={last}")
    assert (
        body.count(b"<tr data-task=") == rest and b'id="prev-page"' in body and b'id="next-page"' not in body
    )
    with pytest.raises(NotFound):
        route(store, "/run/full/arm", f"arm={arm}&page={last + 1}")
    for bad in ("0", "-1", "x", "1e9", "99999999999"):
        with pytest.raises(InputError):
            route(store, "/run/full/arm", f"arm={arm}&page={bad}")


@pytest.mark.parametrize(
    ("bad_value", "named"),
    [("NaN", "NaN"), ("1000000000000000", "absurd")],  # 10^15 tokens: was billed as "$3,000,000,000"
)
def test_skip_bad_skips_a_bad_spent_object(tmp_path: Path, bad_value: str, named: str) -> None:
    """A NaN, or an implausible count, in one spent/ object: `ept analyze --skip-bad` reports and skips it (exit
    0); without, exit 2 naming it."""
    from cli_runner import run_ept

    from elo_per_token.contracts.spent import spent_bytes

    run = Path(write_ledger_run(tmp_path / "led", "r", 3, n_tasks=12))
    (run / "spent").mkdir()
    call = {
        "kind": "call",
        "arm": "x",
        "role": "sample",
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }
    good = spent_bytes([call], reason="failed", error_class="transient", attempt=1, at=0.0)
    (run / "spent" / "a.jsonl").write_bytes(good)
    bad = good.decode().replace('"prompt_tokens": 10', f'"prompt_tokens": {bad_value}')
    assert bad_value in bad
    (run / "spent" / "b.jsonl").write_text(bad)
    r = run_ept("analyze", str(run), "--out", str(tmp_path / "o1"), "--no-plots", "--rounds", "0")
    assert r.returncode == 2 and "spent/b.jsonl" in r.stderr and named in r.stderr, r.stderr
    r = run_ept(
        "analyze", str(run), "--out", str(tmp_path / "o2"), "--no-plots", "--rounds", "0", "--skip-bad"
    )
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "o2" / "report.json").read_text())
    assert any("spent/b.jsonl" in w and "--skip-bad" in w for w in rep["warnings"]), rep["warnings"]
    assert any(s["file"].endswith("spent/b.jsonl") and s["line"] == 2 for s in rep["skipped"])
    assert [r["failed_attempt_calls"] for r in rep["spent_on_failed_attempts"]] == [
        1
    ]  # a.jsonl still counted
    assert not os.path.exists(tmp_path / "o1")


@pytest.fixture(scope="module")
def served(ledger: Path) -> Iterator[View]:
    with view(ledger) as v:
        assert request(v.port, "/run/full").status == 200  # the analysis made once, before the timed requests
        yield v


_HEADER = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=80
)
_URL = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=200)
_PATHS = st.sampled_from(["/", "/run/full", "/run/full/report.json", "/run/full/grid", "/run/full/arm",
                          "/run/full/task", "/run/full/job", "/compare", "/static/view.js", "/run/", "/run/full/x/y"])  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    host=st.one_of(st.sampled_from(["127.0.0.1", "localhost", "[::1]", "attacker.example"]), _HEADER),
    with_port=st.booleans(),
    origin=st.one_of(st.none(), st.just("same"), _HEADER),
    path=st.one_of(_PATHS, _URL, _PATHS.flatmap(lambda p: _URL.map(lambda u: p + u))),
    query=st.one_of(st.just(""), _URL),
)
def test_hostile_requests_get_4xx_fast_and_bounded(
    served: View, host: str, with_port: bool, origin: str | None, path: str, query: str
) -> None:
    """Any Host, Origin, path and query: a page (2xx) only for the viewer's own origin, else 4xx, never a 5xx
    or a hang; each request bounded in time (client and server) and memory (client peak, server growth)."""
    v = served
    host_h = f"{host}:{v.port}" if with_port else host
    origin_h = f"http://{host_h}" if origin == "same" else origin
    own = host_h.strip().lower() in {f"{n}:{v.port}" for n in ("127.0.0.1", "localhost", "[::1]")}
    same_origin = origin_h is None or origin_h.strip().lower() == f"http://{host_h.strip().lower()}"
    target = path + ("?" + query if query else "")
    before = v.kib("VmRSS")
    t0 = time.monotonic()
    hdrs = [("Origin", origin_h)] if origin_h is not None else []
    r = bounded(
        lambda: request(v.port, target, host=host_h, headers=hdrs, timeout=30), time_s=5, memory_mb=64
    )
    took = time.monotonic() - t0
    assert took < 20, f"{took:.1f} s for {target!r}"
    if r.status == 0:  # a request line without a version: answered as HTTP/0.9, an error page only
        assert b'id="error"' in r.body and b"Elo" not in r.body
        return
    assert 200 <= r.status < 500, (r.status, host_h, origin_h, target, r.body[:300])
    if not (own and same_origin):
        assert r.status >= 400 and b"Elo" not in r.body, (r.status, host_h, origin_h, target)
    assert (v.kib("VmRSS") - before) / 1024 < 100
