"""Benchmark: `ept view` on a compacted run of N jobs (issue 39: every page <= 1 s warm and <= 5 s cold, 10
concurrent requests <= 2 s each; 1M jobs <= 2 s warm).

Generates (or reuses, in --dir) a run written the way another tool writes one (testkit/fixtures_ledger.py: job
objects only), compacts it with `ept compact`'s code, then measures, in CPU seconds (the machine is shared:
wall time is printed beside it):

* analysis: the viewer's first analysis of the run (off the request thread; then cached on disk),
* cold: each page type as the first request of a NEW process (imports, the run's state, the analysis loaded
  from the disk cache), one process per page type,
* warm: each page type again in one process, best of --repeat,
* cold after `ept analyze`: a new, empty cache; one `ept analyze RUN` (CPU printed) fills it; then each page
  type as the first request of a new process (the cache holds only what analyze left),
* concurrent: 10 requests at once to the real HTTP server (mixed page types), wall seconds each,
* the floor: the job page (one object read), and each page's ratio to it.

    python benchmarks/bench_viewer_scale.py [--jobs 100000] [--dir DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "testkit"))


def pages(job_key: str) -> list[tuple[str, str, str]]:
    """(name, path, query) of every page type; the job page is the floor."""
    return [("runs index", "/", ""), ("run", "/run/r", ""), ("report.json", "/run/r/report.json", ""),
            ("arm", "/run/r/arm", "arm=best_of_n%404"), ("grid", "/run/r/grid", ""),
            ("task", "/run/r/task", "task=code-000001"), ("samples", "/run/r/samples", "sort=tokens&desc=1"),
            ("job (floor)", "/run/r/job", f"key={job_key}")]  # fmt: skip


def ensure_run(root: Path, n: int) -> None:
    import fixtures_ledger as ledger_gen

    from elo_per_token.ledger import FileLedger
    from elo_per_token.ledger.segments import compact_run

    if not (root / "runs" / "r" / "compact").exists():
        ledger_gen.write_local(root, "r", n)
        compact_run(FileLedger(root), "r")


COLD = """
import sys, time, json
c0, w0 = time.process_time(), time.perf_counter()
from elo_per_token.viewer.store import Store
from elo_per_token.viewer import server
s = Store(sys.argv[1], cache_dir=sys.argv[2], page_budget_s=60.0)
server.route(s, sys.argv[3], sys.argv[4])
print(json.dumps([time.process_time() - c0, time.perf_counter() - w0]))
"""


def cold(root: Path, cache: Path, path: str, query: str) -> tuple[float, float]:
    """(CPU, wall) seconds of a new process answering its first request (start-up included)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", COLD, str(root), str(cache), path, query], env=env,
                         capture_output=True, check=True, text=True)  # fmt: skip
    cpu, wall = json.loads(out.stdout.strip().splitlines()[-1])
    return cpu, wall


def analyze_into(root: Path, cache: Path) -> float:
    """CPU seconds of one `ept analyze RUN` process whose analysis cache is `cache`."""
    import resource

    env = {**os.environ, "PYTHONPATH": str(REPO), "EPT_VIEW_CACHE": str(cache)}
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "elo_per_token", "analyze", str(root / "runs" / "r")], env=env,
                   capture_output=True, check=True)  # fmt: skip
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def timed(fn) -> tuple[float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def concurrent(store, reqs: list[tuple[str, str, str]], n: int = 10) -> list[float]:
    """Wall seconds of each of `n` requests sent at once to the real server (page types in turn)."""
    from elo_per_token.viewer.server import serve

    srv = serve(store, "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    took = [0.0] * n
    go = threading.Barrier(n)

    def one(i: int) -> None:
        _, path, query = reqs[i % len(reqs)]
        go.wait()
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}?{query}", timeout=120) as r:
            r.read()
        took[i] = time.perf_counter() - t0

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    srv.shutdown()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--dir", default=None, help="Work folder (the generated run is reused).")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    from elo_per_token.viewer import server
    from elo_per_token.viewer.store import Store

    work = Path(a.dir or tempfile.mkdtemp(prefix="bench-view-"))
    root, cache = work / f"ledger-{a.jobs}", Path(tempfile.mkdtemp(prefix="view-cache-"))
    ensure_run(root, a.jobs)
    job_key = next((root / "runs" / "r" / "jobs").rglob("*.jsonl")).relative_to(root / "runs" / "r" / "jobs")
    reqs = pages(str(job_key)[: -len(".jsonl")])
    store = Store(str(root), cache_dir=str(cache), page_budget_s=600.0)
    first = timed(lambda: store.view("r"))
    print(f"{a.jobs:,} jobs, compacted. First analysis (off the request thread, then cached on disk): "
          f"{first[0]:.1f} s CPU ({first[1]:.1f} s wall)\n")  # fmt: skip
    warm: dict[str, tuple[float, float]] = {}
    for name, path, query in reqs:
        for _ in range(a.repeat):
            got = timed(lambda p=path, q=query: server.route(store, p, q))
            warm[name] = min(warm.get(name, got), got)
    floor = max(warm["job (floor)"][0], 1e-3)
    after: dict[str, tuple[float, float]] = {}
    for name, path, query in reqs:  # each page the first request of a new process, after one `ept analyze`
        fresh_cache = Path(tempfile.mkdtemp(prefix="view-cache-an-"))
        cpu_an = analyze_into(root, fresh_cache)
        after[name] = cold(root, fresh_cache, path, query)
    print(f"`ept analyze` of the run (fills the cache): {cpu_an:.1f} s CPU\n")
    print("| page | warm CPU (wall) | ÷ job page | cold CPU (wall), new process | cold after one `ept analyze` |\n"
          "|---|---|---|---|---|")  # fmt: skip
    for name, path, query in reqs:
        c = cold(root, cache, path, query)
        w, a2 = warm[name], after[name]
        print(f"| {name} | {w[0]:.3f} s ({w[1]:.2f} s) | {w[0] / floor:.0f}× | {c[0]:.2f} s ({c[1]:.2f} s) "
              f"| {a2[0]:.2f} s ({a2[1]:.2f} s) |", flush=True)  # fmt: skip
    fresh = Store(str(root), cache_dir=str(cache), page_budget_s=2.0, state_ttl_s=2.0)
    fresh.view("r")  # the server's state: analysis loaded from the disk cache
    took = concurrent(fresh, [r for r in reqs if r[0] != "job (floor)"])
    print(f"\n10 concurrent requests (mixed pages, real HTTP server): wall each {min(took):.2f}–{max(took):.2f} s, "
          f"median {sorted(took)[5]:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
