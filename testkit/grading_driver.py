"""Runs one hostile grading case in its own process and reports what happened (used by test_hostile_grading.py).

`python grading_driver.py < spec.json` prints JSON: the case's result, the CPU seconds and the peak RSS of
this process. A case that freezes the interpreter (a regex or sympy holding the GIL, as on c20688e) cannot be
stopped from a thread of the test process; in a process of its own the test kills it at a deadline.

spec: {"kind": "extract", "text": str}
      {"kind": "run_job", "task": {...}, "strategy": str, "budget": int, "base_url": str, "key": str}
      {"kind": "verdict", "test": str, "line": {...}}   (checks.verdict on a report line)
      {"kind": "grade_seq", "task": {...}, "replies": [str, ...]}   (graders.grade on each, in order)
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any


def _vm_hwm_kib() -> int:
    """This process's peak resident memory (VmHWM, KiB). Not getrusage's ru_maxrss: Linux carries that across
    fork and exec, so a driver started by a pytest process that has grown to 1 GB would report the parent's
    peak, not its own; VmHWM belongs to the address space exec created."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def _extract(spec: dict[str, Any]) -> Any:
    from elo_per_token.contracts.prompts import final_answer_line

    return final_answer_line(spec["text"])


def _run_job(spec: dict[str, Any]) -> Any:
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.egress.profiles import Profile
    from elo_per_token.worker.job import run_job

    prof = Profile(
        name="sim",
        protocol="openai",
        api_key_env="EPT_SIM_API_KEY",
        model="ept-sim-1",
        base_url=spec["base_url"],
        timeout=20.0,
        max_retries=3,
        supports_n=False,
    )
    client = ProviderClient(prof, api_key=spec["key"], backoff_base=0.01, backoff_cap=0.05)
    res = run_job(Job("r", spec["task"], spec["strategy"], spec["budget"], seed=1), client, concurrency=1)
    o = res.outcome
    return {
        "score": o.score,
        "correct": o.correct,
        "error": o.error,
        "grader": o.grader,
        "tokens": res.tokens,
        "call_errors": [c.error for c in res.calls],
    }


def _grade_seq(spec: dict[str, Any]) -> Any:
    from elo_per_token.worker.graders import grade

    return [
        {"score": g.score, "correct": g.correct, "reason": g.details.get("reason")}
        for g in (grade(spec["task"], reply) for reply in spec["replies"])
    ]


def _verdict(spec: dict[str, Any]) -> Any:
    from elo_per_token.worker.sandbox import checks

    try:
        return {"why": checks.verdict(checks.prepare(spec["test"]), spec["line"])}
    except checks.Tampered as e:
        return {"tampered": str(e)}


def main() -> None:
    spec = json.loads(sys.stdin.read())
    fn = {"extract": _extract, "run_job": _run_job, "verdict": _verdict, "grade_seq": _grade_seq}[
        spec["kind"]
    ]
    out: dict[str, Any] = {}
    t0 = time.process_time()
    wall = time.monotonic()

    def run() -> None:
        out["result"] = fn(spec)

    th = threading.Thread(
        target=run
    )  # a worker thread, as jobs run (math-verify's alarm does not work there)
    th.start()
    th.join()
    print(
        json.dumps(
            {
                **out,
                "cpu_s": time.process_time() - t0,
                "wall_s": time.monotonic() - wall,
                "maxrss_mb": _vm_hwm_kib() / 1024,
            }
        )
    )


if __name__ == "__main__":
    main()
