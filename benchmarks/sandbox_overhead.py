"""What the bubblewrap sandbox costs per grading run, against a bare `python -I -S` subprocess.

    python benchmarks/sandbox_overhead.py [-n 30]

Prints the median wall time of (a) a bare interpreter start running the same candidate and tests without any
isolation (the floor any out-of-process grader pays) and (b) worker.graders.code.run_tests (bwrap + harness +
worker-side checks), both measured in this process, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from elo_per_token.worker.graders.code import Limits, _run_tests
from elo_per_token.worker.sandbox import bwrap

TESTS = ["assert f(1) == 2", "assert f(5) == 6", "assert f(0) == 1"]


def bare(code: str) -> float:
    src = code + "\n" + "\n".join(TESTS) + "\n"
    t = time.perf_counter()
    subprocess.run([bwrap.interpreter(), "-I", "-S", "-c", src], check=True)
    return time.perf_counter() - t


def sandboxed(code: str) -> float:
    t = time.perf_counter()
    res = _run_tests(code, TESTS, "f", Limits(), True)  # not memoised: every run starts a sandbox
    assert res["passed"] == 3, res
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=30)
    n = ap.parse_args().n
    bwrap.require()
    a, b = [], []
    for i in range(n):  # interleaved, so load changes hit both alike
        code = f"def f(x):\n    return x + 1  # {i}\n"
        a.append(bare(code))
        b.append(sandboxed(code))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"bare python -I -S : {ma * 1000:7.1f} ms median of {n}")
    print(f"bwrap sandbox     : {mb * 1000:7.1f} ms median of {n}")
    print(f"ratio             : {mb / ma:7.2f}x")


if __name__ == "__main__":
    main()
