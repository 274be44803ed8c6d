"""Peak RSS and time of each stage of `ept analyze`, in one process (where the memory of an analysis goes).

    python benchmarks/mem_stages.py INPUT... [--rounds 200]

INPUT: what `ept analyze` takes (a run folder, a log, a Parquet file). A thread samples VmRSS every 10 ms;
each line is one stage of analysis/pipeline.py `analyze`, run here one by one: its time, the highest RSS
seen while it ran, and the RSS after it (GiB). Used for docs/benchmarks.md "Memory of analysing a 1M-job run".
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import elo_per_token  # noqa: F401  (first: it sets the allocator's options before polars loads)
from elo_per_token.analysis import pipeline as P
from elo_per_token.analysis.io import read_records


def rss_gib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024 / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    peak = [0.0]

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], rss_gib())
            time.sleep(0.01)

    threading.Thread(target=sample, daemon=True).start()
    t = [time.perf_counter()]

    def done(stage: str) -> None:
        now = time.perf_counter()
        print(
            f"{stage:20s} {now - t[0]:6.1f} s   peak {peak[0]:.2f} GiB   after {rss_gib():.2f} GiB",
            flush=True,
        )
        peak[0], t[0] = 0.0, now

    opt = P.AnalysisOptions(rounds=args.rounds)
    opt.validate()
    records = read_records(args.inputs, skip_bad=opt.skip_bad, tasks_file=opt.tasks_file)
    done("read_records")
    inp = P.split_records(records, opt)
    done("split_records")
    comp = P.build_comparisons(inp, opt)
    done("build_comparisons")
    sel = P.select_arms(inp, comp, opt)
    design = P.build_design(inp, comp, sel, opt)
    done("select + design")
    point = P.fit_once(design, sel, opt)
    done("fit_once")
    iv = P.intervals(design, sel, point, opt, None)
    done("intervals")
    P.make_tables(inp, sel, design, point, iv, opt)
    done("make_tables")


if __name__ == "__main__":
    main()
