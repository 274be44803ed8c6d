"""Incremental compaction (ledger/segments.py) and reading a run as segments + uncompacted objects.

Real files and a real SeaweedFS; requests are counted with boto3's own event hooks, file opens with a
Python audit hook — nothing is mocked.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from pathlib import Path

import fixtures_ledger as ledger_gen
import polars as pl
import pytest
from cli_runner import run_ept

from elo_per_token.analysis.io import RunSource, read_records, read_run
from elo_per_token.ledger import FileLedger, open_ledger
from elo_per_token.ledger.segments import compact_run, segment_state

REPO = Path(__file__).resolve().parents[2]

_OPENS: list[str] = []
_COUNTING = threading.Event()


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _COUNTING.is_set() and isinstance(args[0], str) and args[0].endswith(".jsonl"):
        _OPENS.append(args[0])


sys.addaudithook(_audit)


# The CLI in this process (testkit/cli_runner.py), at a terminal width wide enough for its tables.
_ept = functools.partial(run_ept, columns=500)


def _totals(frame: pl.DataFrame) -> dict:
    calls = frame.filter(pl.col("kind") == "call")
    return {
        "rows": frame.height,
        "calls": calls.height,
        "outcomes": frame.filter(pl.col("kind") == "outcome").height,
        "tokens": int(calls["prompt_tokens"].sum() + calls["completion_tokens"].sum()),
        "distinct": frame.select(pl.struct("file", "row").n_unique()).item(),
    }


def _expected(n_jobs: int) -> dict:
    _, blobs = ledger_gen.job_lines(ledger_gen.job_frame("r", n_jobs))
    import io

    df = pl.read_ndjson(io.BytesIO(b"".join(blobs)))
    calls = df.filter(pl.col("kind") == "call")
    tokens = int(
        calls["usage"].struct.field("prompt_tokens").sum()
        + calls["usage"].struct.field("completion_tokens").sum()
    )
    return {
        "rows": df.height,
        "calls": calls.height,
        "outcomes": n_jobs,
        "tokens": tokens,
        "distinct": df.height,
    }


def test_incremental_compaction_opens_only_new_objects(tmp_path):
    root = tmp_path / "ledger"
    ledger_gen.write_local(root, "r", 1500)
    led = FileLedger(root)
    first = compact_run(led, "r", chunk_jobs=400)
    assert (first.jobs, len(first.segments)) == (1500, 1)
    ledger_gen.write_local(root, "r", 150, offset=1500)
    _OPENS.clear()
    _COUNTING.set()
    try:
        second = compact_run(led, "r", chunk_jobs=400)
    finally:
        _COUNTING.clear()
    assert (second.jobs, second.already) == (150, 1500)
    assert second.segments[0].endswith("part-00002.parquet")
    # Exactly the 150 new objects were opened, each once.
    assert len(_OPENS) == 150 and len(set(_OPENS)) == 150
    new_keys = {
        k for k, _ in zip(*ledger_gen.job_lines(ledger_gen.job_frame("r", 150, offset=1500)), strict=True)
    }
    assert {os.path.relpath(p, root / "runs" / "r" / "jobs")[: -len(".jsonl")] for p in _OPENS} == new_keys
    # Again: nothing new, nothing opened, no segment written.
    _COUNTING.set()
    try:
        third = compact_run(led, "r")
    finally:
        _COUNTING.clear()
    assert (third.jobs, third.segments, len(_OPENS)) == (0, [], 150)
    # Reading the run: the segments, then only the objects no segment holds.
    ledger_gen.write_local(root, "r", 50, offset=1650, log=True)
    _OPENS.clear()
    _COUNTING.set()
    try:
        frame, skipped, names = read_run(RunSource(str(root), "r"))
    finally:
        _COUNTING.clear()
    assert len(_OPENS) == 50 and not skipped
    assert [Path(n).name for n in names[:2]] == ["part-00001.parquet", "part-00002.parquet"]
    assert _totals(frame) == _expected(1700)


@pytest.mark.slow
def test_compaction_interleaved_with_writers_loses_and_duplicates_nothing(tmp_path):
    """Writers keep adding objects while compactions run, two of them at a time: every record read once."""
    root = tmp_path / "ledger"
    led = FileLedger(root)
    total, step = 3000, 100
    done = threading.Event()

    def writer() -> None:
        for off in range(0, total, step):
            ledger_gen.write_local(root, "r", step, offset=off)
        done.set()

    def compactor(results: list) -> None:
        while not done.is_set():
            try:
                results.append(compact_run(led, "r", chunk_jobs=97))
            except Exception as e:  # "no job results" before the first object lands
                if "no job results" not in str(e):
                    raise

    w = threading.Thread(target=writer)
    res_a: list = []
    res_b: list = []
    cs = [threading.Thread(target=compactor, args=(r,)) for r in (res_a, res_b)]
    w.start()
    for c in cs:
        c.start()
    w.join()
    for c in cs:
        c.join()
    compact_run(led, "r")
    segs = segment_state(led, "r").committed
    assert len(segs) >= 3, segs  # compactions really interleaved with the writes
    frame, _, _ = read_run(RunSource(str(root), "r"))
    objects, _, _ = read_run(RunSource(str(root), "r", objects_only=True))
    assert _totals(frame) == _totals(objects) == _expected(total)


def test_analysis_of_a_run_equals_its_objects_byte_for_byte(tmp_path):
    root = tmp_path / "ledger"
    ledger_gen.write_local(root, "r", 1200)
    compact_run(FileLedger(root), "r")
    ledger_gen.write_local(root, "r", 300, offset=1200)
    compact_run(FileLedger(root), "r")
    ledger_gen.write_local(root, "r", 150, offset=1500, log=True)  # an uncompacted tail
    a = _ept(
        "analyze", "r", "--ledger", str(root), "--rounds", "30", "--no-plots", "--out", str(tmp_path / "a")
    )
    assert a.returncode == 0, a.stderr
    b = _ept(
        "analyze",
        str(root / "runs" / "r" / "jobs"),
        "--rounds",
        "30",
        "--no-plots",
        "--out",
        str(tmp_path / "b"),
    )
    assert b.returncode == 0, b.stderr
    arms = (tmp_path / "a" / "arms.csv").read_bytes()
    assert arms == (tmp_path / "b" / "arms.csv").read_bytes()
    assert arms.count(b"\n") == 1 + len(ledger_gen.ARMS)
    # The same run as a folder, and tokens of the run id, agree too.
    c = _ept("tokens", str(root / "runs" / "r"), "--csv", "-")
    d = _ept("tokens", "r", "--ledger", str(root), "--csv", "-")
    assert c.returncode == d.returncode == 0 and c.stdout == d.stdout and "majority@4" in c.stdout


def test_corrupt_segment_is_named_and_rebuilt(tmp_path):
    root = tmp_path / "ledger"
    ledger_gen.write_local(root, "r", 600)
    compact_run(FileLedger(root), "r")
    good = _ept(
        "analyze", "r", "--ledger", str(root), "--rounds", "10", "--no-plots", "--out", str(tmp_path / "a")
    )
    assert good.returncode == 0, good.stderr
    seg = root / "runs" / "r" / "compact" / "part-00001.parquet"
    seg.write_bytes(seg.read_bytes()[: seg.stat().st_size // 2])  # truncated, as by a full disk
    bad = _ept("analyze", "r", "--ledger", str(root), "--rounds", "10")
    assert bad.returncode == 2
    assert "part-00001.parquet" in bad.stderr and "--rebuild" in bad.stderr
    rb = _ept("compact", "r", "--ledger", str(root), "--rebuild")
    assert rb.returncode == 0, rb.stderr
    assert "600 job objects" in rb.stdout and "part-00002.parquet" in rb.stdout and not seg.exists()
    again = _ept(
        "analyze", "r", "--ledger", str(root), "--rounds", "10", "--no-plots", "--out", str(tmp_path / "b")
    )
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "a" / "arms.csv").read_bytes() == (tmp_path / "b" / "arms.csv").read_bytes()


def test_bad_object_in_a_run_is_named_by_object_and_line(tmp_path):
    root = tmp_path / "ledger"
    ledger_gen.write_local(root, "r", 300)
    compact_run(FileLedger(root), "r")
    keys, _ = ledger_gen.job_lines(ledger_gen.job_frame("r", 1, offset=300))
    bad = root / "runs" / "r" / "jobs" / (keys[0] + ".jsonl")
    ledger_gen.write_local(root, "r", 1, offset=300, log=True)
    lines = bad.read_text().splitlines()
    lines[1] = lines[1].replace('"budget_n":1', '"budget_n":"one"')
    bad.write_text("\n".join(lines) + "\n")
    r = _ept("analyze", "r", "--ledger", str(root), "--rounds", "0")
    assert r.returncode == 2 and f"{bad}:2" in r.stderr and "budget_n" in r.stderr
    # Compaction leaves it out (the others fold in) and says so; analysis still names it.
    c = _ept("compact", "r", "--ledger", str(root))
    assert c.returncode == 0 and "could not be parsed" in c.stderr, c.stdout + c.stderr
    r = _ept("analyze", "r", "--ledger", str(root), "--rounds", "0")
    assert r.returncode == 2 and f"{bad}:2" in r.stderr
    kept = read_records([str(root / "runs" / "r")], skip_bad=True)
    assert kept.frame.filter(pl.col("kind") == "outcome").height == 300 and len(kept.skipped) == 1


def test_missing_run_lists_the_ledgers_runs(tmp_path):
    root = tmp_path / "ledger"
    for run in ("alpha", "beta"):
        ledger_gen.write_local(root, run, 20)
    for cmd in (["analyze"], ["tokens"], ["report"], ["status"], ["compact"], ["compare", "alpha"]):
        r = _ept(*cmd, "nope", "--ledger", str(root))
        assert r.returncode == 2, (cmd, r.stderr)
        assert "no run 'nope'" in r.stderr and "alpha, beta" in r.stderr, (cmd, r.stderr)


# ---- S3 ----------------------------------------------------------------------------------------------------


class CountingProxy:
    """A plain HTTP proxy in front of the S3 server that records every request (method, path): it counts the
    GETs whoever makes them (boto3 or polars' own S3 client). The Host header is passed through unchanged,
    so request signatures stay valid."""

    def __init__(self, upstream: str) -> None:
        import http.client
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        up = urlsplit(upstream)
        seen = self.requests = []
        full = self.full = []  # (method, path with its query): what a LIST asked for

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a) -> None:
                pass

            def _body(self) -> bytes | None:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        chunk = self.rfile.read(size + 2)[:size]
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b""):
                                pass
                            return out
                        out += chunk
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else None

            def fwd(self) -> None:
                body = self._body()
                headers = {k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"}
                if body is not None:
                    headers["Content-Length"] = str(len(body))
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
                conn.request(self.command, self.path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                conn.close()
                seen.append((self.command, self.path.split("?")[0]))
                full.append((self.command, self.path))
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = fwd

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def gets(self, suffix: str) -> list[str]:
        return [p for m, p in self.requests if m == "GET" and p.endswith(suffix)]

    def close(self) -> None:
        self.server.shutdown()


@pytest.mark.services
def test_s3_run_incremental_compaction_counts_gets(s3_bucket, s3_env, monkeypatch):
    proxy = CountingProxy(s3_env.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    try:
        _s3_incremental(s3_bucket, proxy)
    finally:
        proxy.close()


def _s3_incremental(s3_bucket: str, proxy: CountingProxy) -> None:
    led = open_ledger(f"s3://{s3_bucket}/l")
    ledger_gen.write_s3(led, "r", 800)
    first = compact_run(led, "r", chunk_jobs=300)
    assert first.jobs == 800 and len(proxy.gets(".jsonl")) == 800
    ledger_gen.write_s3(led, "r", 80, offset=800)
    proxy.requests.clear()
    second = compact_run(led, "r", chunk_jobs=300)
    assert (second.jobs, second.already) == (80, 800)
    # Only the 80 new objects were fetched, each once, plus the first segment's small index.
    new = proxy.gets(".jsonl")
    assert len(new) == len(set(new)) == 80
    assert proxy.gets(".keys") == [f"/{s3_bucket}/l/runs/r/compact/part-00001.keys"]
    assert not proxy.gets(".parquet")
    # Conditional create: the segment name cannot be taken twice.
    seg = led.blob_url("r", "compact/part-00002.parquet")
    assert seg.startswith("s3://") and led.create_blob("r", "compact/part-00002.parquet", __file__) is False
    ledger_gen.write_s3(led, "r", 20, offset=880)
    # The run declares no keys (another tool wrote it): S3 cannot tell which objects appeared after the last
    # compaction's listing (ledger/keyspace.py), so a read of them right away asks for a listing.
    os.environ["EPT_VERIFY_JOBS"] = "1"
    try:
        frame, _, names = read_run(RunSource(f"s3://{s3_bucket}/l", "r"))
    finally:
        del os.environ["EPT_VERIFY_JOBS"]
    assert names[0].endswith("compact/part-00001.parquet") and names[-1].endswith("/runs/r/jobs/")
    assert _totals(frame) == _expected(900)
    objects, _, _ = read_run(RunSource(f"s3://{s3_bucket}/l", "r", objects_only=True))
    assert _totals(objects) == _expected(900)


@pytest.mark.services
def test_s3_run_id_and_url_analysis_equal_objects(s3_bucket, s3_env, tmp_path):
    led = open_ledger(f"s3://{s3_bucket}/l")
    ledger_gen.write_s3(led, "r", 600)
    compact_run(led, "r")
    ledger_gen.write_s3(led, "r", 60, offset=600)
    # Objects another tool wrote after the compaction: on S3 read at once only with a listing (ledger/keyspace.py).
    env = {**s3_env.env(), "EPT_VERIFY_JOBS": "1"}
    outs = []
    for i, args in enumerate(
        (
            ["r", "--ledger", f"s3://{s3_bucket}/l"],
            [f"s3://{s3_bucket}/l/runs/r"],
            [f"s3://{s3_bucket}/l/runs/r/jobs"],
        )
    ):
        r = _ept("analyze", *args, "--rounds", "20", "--no-plots", "--out", str(tmp_path / str(i)), env=env)
        assert r.returncode == 0, r.stderr
        outs.append((tmp_path / str(i) / "arms.csv").read_bytes())
    assert outs[0] == outs[1] == outs[2]
    # The parallel listing by key ranges (used with a large index) finds every key exactly once.
    plain = list(led.iter_job_keys("r"))
    bounds = [*sorted(plain)[::97], "math/zzz-not-a-key", "code/code-000003/x"]
    split = list(led.iter_job_keys_split("r", bounds, threads=4))
    assert len(split) == len(plain) == 660 and set(split) == set(plain)
    st = _ept("status", f"s3://{s3_bucket}/l/runs/r", "--json", env=env)
    assert st.returncode == 0 and '"done": 660' in st.stdout, st.stderr
    r = _ept("analyze", "nope", "--ledger", f"s3://{s3_bucket}/l", env=env)
    assert r.returncode == 2 and "no run 'nope'" in r.stderr and ": r" in r.stderr


@pytest.mark.services
def test_unreachable_ledger_says_which_part_is_wrong(s3_bucket, s3_env):
    from fixtures_services import free_port

    led = open_ledger(f"s3://{s3_bucket}/l")
    ledger_gen.write_s3(led, "r", 5)
    env = s3_env.env()
    cases = [
        ({**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}, f"s3://{s3_bucket}/l", "endpoint"),
        ({**env, "AWS_SECRET_ACCESS_KEY": "wrong-secret-000"}, f"s3://{s3_bucket}/l", "credentials"),
        (env, f"s3://{s3_bucket}-missing/l", "bucket"),
    ]
    for e, url, word in cases:
        for cmd in (["analyze", "r", "--ledger", url], ["status", "r", "--ledger", url]):
            r = _ept(*cmd, env=e)
            assert r.returncode == 2, (cmd, word, r.stderr)
            assert f"cannot read the ledger — {word}" in r.stderr, (cmd, word, r.stderr)
            assert "wrong-secret" not in r.stderr


# ---- the write path and a real Celery sweep -----------------------------------------------------------------


@pytest.mark.services
def test_successful_job_costs_one_conditional_put(s3_bucket, s3_env, monkeypatch):
    """perform_job's requests to S3, counted on the wire (a proxy in front of SeaweedFS): one PUT (plus the HEAD
    when asked to check first); the failure object is deleted only when the coordinator says there is one."""
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.contracts.records import CallRecord, JobResult, Outcome
    from elo_per_token.worker.lifecycle import perform_job

    proxy = CountingProxy(s3_env.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    led = open_ledger(f"s3://{s3_bucket}/w")
    led.client  # noqa: B018 - the bucket check happens on first use, outside the count

    def run(job, _provider):
        return JobResult(job, [CallRecord(call_index=0, role="sample", model="m",
                                          usage={"prompt_tokens": 3, "completion_tokens": 4}, latency_s=0.1, attempts=1)],
                         Outcome("a", 1.0, True), 1.0, 2.0)  # fmt: skip

    task = {"task_id": "math-1", "family": "math", "prompt": "p", "reference": "1"}
    jobs = [Job("w", task, "greedy", 1, replicate=i) for i in range(4)]
    expect = {
        0: (dict(check_existing=False), ["PUT jobs"]),
        1: (dict(), ["HEAD jobs", "PUT jobs"]),
        2: (dict(check_existing=False, clear_failure=True), ["PUT jobs", "DELETE failures"]),
    }

    def sent(job) -> list[str]:
        base = f"/{s3_bucket}/w/runs/w/"
        where = {f"{base}jobs/{job.key}.jsonl": "jobs", f"{base}failures/{job.key}.json": "failures"}
        spent = f"{base}spent/"
        return [
            f"{m} {'spent' if path.startswith(spent) else where.get(path, path)}"
            for m, path in proxy.requests
        ]

    try:
        for i, (kw, want) in expect.items():
            proxy.requests.clear()
            out = perform_job(jobs[i], led, None, run=run, **kw)
            assert out["status"] == "done" and sent(jobs[i]) == want, (i, proxy.requests)
        # A duplicate (the object exists): the conditional create refuses it, nothing is overwritten; the losing
        # copy's calls were billed all the same, so they go to a spent object of their own (contracts.spent).
        proxy.requests.clear()
        assert perform_job(jobs[0], led, None, run=run, check_existing=False)["status"] == "duplicate"
        assert sent(jobs[0]) == ["PUT jobs", "PUT spent"]
    finally:
        proxy.close()


def _sim_profile(tmp_path: Path, sim_url: str, monkeypatch) -> Path:
    """A profiles file naming the simulator (`sim-test`), set for this process and its key in the env."""
    from fixtures_sim import SIM_KEY

    prof = tmp_path / "profiles.toml"
    prof.write_text(f'[profiles.sim-test]\nprotocol = "openai"\nbase_url = "{sim_url}"\napi_key_env = "EPT_SIM_API_KEY"\n'
                    'model = "ept-sim-1"\ntimeout = 20\n')  # fmt: skip
    monkeypatch.setenv("EPT_PROFILES", str(prof))
    monkeypatch.setenv("EPT_SIM_API_KEY", SIM_KEY)
    return prof


@pytest.mark.services
def test_celery_sweep_to_s3_makes_one_request_per_successful_job(tmp_path, redis_server, s3_env, s3_bucket, make_sim,
                                                                  monkeypatch):  # fmt: skip
    """Real Celery workers writing to SeaweedFS through a counting proxy. A run's first session: each job's
    object gets exactly one request, the conditional PUT (no HEAD, no DELETE, nothing under failures/). The
    next session of the run (a resume) checks each job it sends before running it: one HEAD, then the PUT."""
    import collections
    import uuid

    from fixtures_plans import plan_toml
    from fixtures_services import start_celery_workers
    from fixtures_sim import SIM_KEY

    from elo_per_token.coordinator.plan import parse_plan
    from elo_per_token.coordinator.sweep import execute, plan_jobs
    from elo_per_token.egress.profiles import get_profile

    sim = make_sim(api_key=SIM_KEY, latency_ms=5)
    prof = _sim_profile(tmp_path, sim.url, monkeypatch)
    proxy = CountingProxy(s3_env.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    queue = "q-" + uuid.uuid4().hex[:8]
    env = {
        **s3_env.env(),
        "AWS_ENDPOINT_URL": proxy.url,
        "EPT_PROFILES": str(prof),
        "EPT_SIM_API_KEY": SIM_KEY,
    }
    workers = start_celery_workers(
        2, redis_server.url, tmp_path / "workers", env=env, concurrency=4, queue=queue
    )
    plan = parse_plan(plan_toml(
        [("greedy", [1]), ("majority", [3])], {"rate_limits.sim-test": {"rpm": 1000000}},
        name="onereq", profile="sim-test", suites=["math"], tasks_per_family=6, replicates=2, seed=3,
        ledger=f"s3://{s3_bucket}/l", executor="celery", queue=queue, batch_size=5, bootstrap_rounds=0,
    ))  # fmt: skip
    jobs = plan_jobs(plan)
    first, rest = jobs[: len(jobs) // 2], jobs[len(jobs) // 2 :]
    base = f"/{s3_bucket}/l/runs/onereq/"

    def per_job() -> dict[str, list[str]]:
        out: dict[str, list[str]] = collections.defaultdict(list)
        for method, path in proxy.requests:
            if path.startswith(base + "jobs/") or path.startswith(base + "failures/"):
                out[path.removeprefix(base)].append(method)
        return out

    try:
        kw = dict(profile=get_profile("sim-test"), broker_url=redis_server.url, analyze=False, compact=False)
        proxy.requests.clear()
        one = execute(plan, first, **kw)
        assert one.ok and one.tally.done == len(first)
        seen = per_job()
        assert {k: v for k, v in seen.items() if k.startswith("jobs/")} == {
            f"jobs/{j.key}.jsonl": ["PUT"] for j in first
        }
        assert not [k for k in seen if k.startswith("failures/")] and "DELETE" not in {
            m for m, _ in proxy.requests
        }

        proxy.requests.clear()
        two = execute(plan, None, **kw)  # the second session: the first half is listed, the rest is sent
        assert two.ok and two.tally.done == len(rest)
        seen = per_job()
        assert {k: v for k, v in seen.items() if k.startswith("jobs/")} == {
            f"jobs/{j.key}.jsonl": ["HEAD", "PUT"] for j in rest
        }
    finally:
        workers.stop()
        proxy.close()


@pytest.mark.services
def test_compaction_during_a_celery_sweep_to_s3_loses_and_duplicates_nothing(tmp_path, redis_server, s3_env,
                                                                              s3_bucket, make_sim, monkeypatch):  # fmt: skip
    """Real Celery workers write job objects to SeaweedFS while compactions run: the run read through its
    segments equals the run read from its objects, and the sweep's own token count."""
    import uuid

    from fixtures_plans import plan_toml
    from fixtures_services import start_celery_workers
    from fixtures_sim import SIM_KEY

    from elo_per_token.coordinator.plan import parse_plan
    from elo_per_token.coordinator.sweep import execute
    from elo_per_token.egress.profiles import get_profile

    sim = make_sim(api_key=SIM_KEY, latency_ms=40)
    prof = _sim_profile(tmp_path, sim.url, monkeypatch)
    queue = "q-" + uuid.uuid4().hex[:8]
    env = {**s3_env.env(), "EPT_PROFILES": str(prof), "EPT_SIM_API_KEY": SIM_KEY}
    workers = start_celery_workers(
        2, redis_server.url, tmp_path / "workers", env=env, concurrency=4, queue=queue
    )
    ledger_url = f"s3://{s3_bucket}/l"
    plan = parse_plan(plan_toml(
        [("greedy", [1]), ("majority", [3]), ("best_of_n", [2])], {"rate_limits.sim-test": {"rpm": 1000000}},
        name="cc", profile="sim-test", suites=["math", "code", "tool_use"], tasks_per_family=10, replicates=2,
        seed=3, ledger=ledger_url, executor="celery", queue=queue, batch_size=5, bootstrap_rounds=0,
    ))  # fmt: skip
    led = open_ledger(ledger_url)
    out: list = []
    try:
        sweep = threading.Thread(
            target=lambda: out.append(
                execute(
                    plan,
                    None,
                    profile=get_profile("sim-test"),
                    broker_url=redis_server.url,
                    analyze=False,
                    compact=False,
                )
            )
        )
        sweep.start()
        compactions = []
        while sweep.is_alive():
            if any(True for _ in led.iter_job_keys("cc")):
                compactions.append(compact_run(led, "cc", chunk_jobs=7))
        sweep.join()
    finally:
        workers.stop()
    res = out[0]
    assert res.ok and res.tally.done == 3 * 10 * 3 * 2
    compact_run(led, "cc")
    assert sum(1 for c in compactions if c.jobs) >= 2, [c.jobs for c in compactions]  # really interleaved
    # After the first, compactions found the new objects from the sweep's declared keys, not a listing.
    assert any(c.found_by == "declared" and c.jobs for c in compactions), [
        (c.found_by, c.jobs) for c in compactions
    ]
    assert len(segment_state(led, "cc").committed) >= 3
    frame, _, _ = read_run(RunSource(ledger_url, "cc"))
    objects, _, _ = read_run(RunSource(ledger_url, "cc", objects_only=True))
    assert _totals(frame) == _totals(objects)
    t = _totals(frame)
    assert (t["outcomes"], t["calls"], t["tokens"]) == (res.tally.done, res.tally.calls, res.tally.tokens)


def test_two_segments_holding_the_same_jobs_count_once(tmp_path):
    """As after two compactions that ran at the same moment: the lowest-numbered segment holds each key."""
    root = tmp_path / "ledger"
    ledger_gen.write_local(root, "r", 400)
    led = FileLedger(root)
    compact_run(led, "r")
    idx = root / "runs" / "r" / "compact" / "part-00001.keys"
    saved = idx.read_bytes()
    idx.unlink()  # compaction B did not see A's commit yet
    ledger_gen.write_local(root, "r", 100, offset=400)
    b = compact_run(led, "r")
    assert b.jobs == 500 and b.segments[0].endswith("part-00002.parquet")
    idx.write_bytes(saved)  # A commits after all
    assert segment_state(led, "r").committed == [1, 2]
    frame, _, _ = read_run(RunSource(str(root), "r"))
    assert _totals(frame) == _expected(500)
