"""Benchmark: how long one sample-explorer request takes on the server (issue 40: each <= 1 s on a 2,000-job run).

Generates a local run of N jobs with a transcript per job (testkit/fixtures_samples.py), opens it with the
viewer's Store, analyses it once (the run page), then times viewer.server.route for each request kind: the
first explorer page (builds the run's sample frame: the records per job, the answers and latencies read from
the job objects), sorts, filters, and a search cold (every transcript read) and warm (the text cache).
Server-side wall time of route(): no HTTP, no browser.

    python benchmarks/bench_explorer.py [--jobs 2000] [--repeat 3] [--dir DIR]

Prints a markdown table (docs/view.md, "The sample explorer").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testkit"))

REQUESTS = [
    ("first page (builds the frame)", ""),
    ("sort by tokens, descending", "sort=tokens&desc=1"),
    ("sort by final answer", "sort=answer"),
    ("filter family + arm + score", "family=code&arm=majority%408&smax=0.5"),
    ("filter arms disagree, sort latency", "disagree=1&sort=latency_s"),
    ("search (cold: transcripts read)", "q=needle-5+"),
    ("search (warm)", "q=needle-5+"),
    ("search + filter, page 2", "q=Solve&page=2"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    import fixtures_samples

    from elo_per_token.viewer import server
    from elo_per_token.viewer.store import Store

    root = Path(a.dir or tempfile.mkdtemp(prefix="bench-explorer-"))
    if not (root / "runs" / "big").exists():
        fixtures_samples.write_run(root, "big", a.jobs)
    best: dict[str, float] = {}
    for _ in range(a.repeat):
        store = Store(str(root))  # a fresh store: the first page and the cold search are cold again
        t0 = time.perf_counter()
        server.route(store, "/run/big", "")
        best["run page (analysis, once per run state)"] = min(
            best.get("run page (analysis, once per run state)", 1e9), time.perf_counter() - t0
        )
        for name, query in REQUESTS:
            t0 = time.perf_counter()
            server.route(store, "/run/big/samples", query)
            best[name] = min(best.get(name, 1e9), time.perf_counter() - t0)
    print(f"| request ({a.jobs:,} jobs, best of {a.repeat}) | server time |\n|---|---|")
    for name, s in best.items():
        print(f"| {name} | {s * 1000:,.0f} ms |")


if __name__ == "__main__":
    main()
