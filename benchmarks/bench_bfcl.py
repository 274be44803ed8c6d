"""BFCL through our `bfcl` grader (BFCL's own AST checker): every possible answer of the 1240 tasks
(simple_python, multiple, parallel, parallel_multiple, irrelevance) must pass, and two wrong variants of
each (one argument outside its possible answers / one parallel call dropped; a call for irrelevance)
must fail. The CI test (tests/suites/test_public_suites.py) checks every 5th task.

Run: python benchmarks/bench_bfcl.py
"""

from __future__ import annotations

import time
from collections import Counter

from elo_per_token.suites.public.bfcl import load, right_calls, wrong_calls
from elo_per_token.worker.graders import grade


def main() -> None:
    t0 = time.perf_counter()
    tasks = load()
    t_load = time.perf_counter() - t0
    total, right_ok, wrong_caught = Counter(), Counter(), Counter()
    failures = []
    t1 = time.perf_counter()
    for t in tasks:
        cat = t["meta"]["category"]
        total[cat] += 1
        r = grade(t, "Answer: done", right_calls(t))
        right_ok[cat] += r.correct
        if not r.correct:
            failures.append((t["task_id"], r.details.get("reason")))
        wrong_caught[cat] += sum(not grade(t, "Answer: done", wrong_calls(t, s)).correct for s in (0, 1))
    dt = time.perf_counter() - t1
    print(f"loaded {len(tasks)} tasks in {t_load:.2f}s")
    print("| category | tasks | possible answer passes | wrong variants failed |")
    print("|---|---:|---:|---:|")
    for cat in total:
        print(
            f"| {cat} | {total[cat]} | {right_ok[cat]}/{total[cat]} | {wrong_caught[cat]}/{2 * total[cat]} |"
        )
    for tid, why in failures:
        print(f"  FAILED {tid}: {why}")
    print(f"graded {3 * len(tasks)} answers in {dt:.1f}s ({dt / (3 * len(tasks)) * 1000:.2f} ms each)")


if __name__ == "__main__":
    main()
