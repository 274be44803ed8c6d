"""HumanEval through our code grader: every canonical solution (hidden `check` and visible docstring tests)
and every distractor, in the sandbox the worker uses (worker.graders.code.grade_code).

Acceptance: >= 163/164 canonical solutions pass the official check; every distractor fails it.
The CI test (tests/suites/test_public_suites.py) grades a sample; this grades all 164.

Run: python benchmarks/bench_humaneval.py
"""

from __future__ import annotations

import time

from elo_per_token.suites.public.humaneval import load
from elo_per_token.worker.graders import grade
from elo_per_token.worker.graders.code import grade_code, sandbox_info


def main() -> None:
    tasks = load()
    t0 = time.perf_counter()
    failed, visible_failed, distractor_passed = [], [], []
    for t in tasks:
        reply = f"```python\n{t['reference']}```"
        if not grade(t, reply).correct:
            failed.append((t["task_id"], grade(t, reply).details.get("reason")))
        if t["visible_tests"] and not grade_code(t["reference"], t, tests=t["visible_tests"]).correct:
            visible_failed.append(t["task_id"])
        if grade(t, f"```python\n{t['distractors'][0]}```").correct:
            distractor_passed.append(t["task_id"])
    dt = time.perf_counter() - t0
    n = len(tasks)
    print(f"sandbox layers: {sandbox_info()}")
    print(f"canonical solutions passing the official check: {n - len(failed)}/{n}")
    for tid, why in failed:
        print(f"  FAILED {tid}: {why}")
    n_vis = sum(1 for t in tasks if t["visible_tests"])
    print(
        f"canonical solutions passing their visible (docstring) tests: {n_vis - len(visible_failed)}/{n_vis} "
        f"({sum(len(t['visible_tests']) for t in tasks)} visible tests)"
    )
    print(f"distractors (`return None`) passing: {len(distractor_passed)}/{n} {distractor_passed}")
    print(f"graded {3 * n} runs in {dt:.1f}s ({dt / (3 * n) * 1000:.0f} ms per sandbox run)")


if __name__ == "__main__":
    main()
