"""A sweep whose replies come from a hostile corpus (issue 23, the grading half): every job scored or failed
with a class, the sweep's peak RSS, the longest job, and requests at the server = requests recorded.

    python benchmarks/bench_hostile_grading.py [--tasks-per-family 84] [--replicates 2] [--math-timeout 3]

A simulator in this process answers every request with a reply drawn (by the request's seed) from the corpus:
newline floods up to 1 MB, space and label floods, fractions past the int and float limits, LaTeX towers,
huge binomials, 2,000 nested fractions, a forged hex float, plain right and wrong answers. `ept sweep`
runs as a subprocess (local executor, 8 threads) over the built-in math (numeric grader) and tool_use suites
and a LaTeX suite graded by math-verify; its peak RSS (VmHWM) is read from /proc while it runs. The
provider-bytes half (slow and endless streams, huge bodies, NaN fields) is egress's benchmark.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
KEY = "sk-bench-0123456789abcdefWXYZ"

CORPUS = [
    "\n" * 10_000,
    "\n" * 100_000,
    "\n" * 1_000_000,
    " " * 100_000 + "x",
    "answer" + " " * 100_000 + "x",
    "Answer:" + " " * 100_000,
    "**" * 50_000,
    "Answer: 1/" + "7" * 5_000,
    "Answer: " + "9" * 400 + "/1",
    "Answer: $\\binom{10^9}{5\\cdot10^8}$",
    "Answer: $" + "\\frac{1}{" * 2_000 + "2" + "}" * 2_000 + "$",
    "Answer: 0x1p99999",
    "Answer: 1e400",
    "Answer: nan",
    "Answer: 42",
    "Answer: $\\frac34$",
    "Answer: 7",
    "Final answer: \\boxed{" * 3_000,
]
TOWER = "Answer: $9^{9^{9}}$"  # each costs a killed math-verify child: 1 reply in 40


class HostileBrain:
    def respond(self, req: Any) -> Any:
        from elo_per_token.simulator.generic import BrainReply

        h = int(hashlib.sha256(f"{req.seed}:{req.meta.get('Job')}".encode()).hexdigest(), 16)
        text = TOWER if h % 40 == 0 else CORPUS[h % len(CORPUS)]
        return BrainReply(text=text, completion_tokens=64)


def _latex_suite(path: Path, n: int) -> Path:
    refs = ["\\frac34", "\\sqrt{2}", "2\\pi", "(-3, 3)", "\\{1, 2\\}", "x^2 + 1"]
    with path.open("w") as fh:
        for i in range(n):
            fh.write(
                json.dumps(
                    {
                        "task_id": f"tex-{i:04d}",
                        "family": "mathtex",
                        "prompt": f"Problem {i}.",
                        "reference": refs[i % len(refs)],
                        "grader": {"type": "math"},
                    }
                )
                + "\n"
            )
    return path


def _peak_rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _ledger_facts(ledger: Path, run: str) -> dict[str, Any]:
    from elo_per_token.ledger import open_ledger

    led = open_ledger(str(ledger))
    facts: dict[str, Any] = {
        "jobs": 0,
        "scored": 0,
        "failed": {},
        "attempts": 0,
        "longest_job_s": 0.0,
        "grading_errors": 0,
    }
    for key in led.list_jobs(run):
        lines = [json.loads(x) for x in led.get_job(run, key).decode().splitlines()]
        facts["jobs"] += 1
        for rec in lines:
            if rec["kind"] == "call":
                facts["attempts"] += rec.get("attempts") or 0
            elif rec["kind"] == "outcome":
                facts["scored"] += rec["score"] is not None
                facts["grading_errors"] += bool((rec.get("grader") or {}).get("grading_error"))
                facts["longest_job_s"] = max(facts["longest_job_s"], rec["finished_at"] - rec["started_at"])
    for f in led.list_failures(run).values():
        cls = str(f.get("class") or "?")
        facts["failed"][cls] = facts["failed"].get(cls, 0) + 1
    return facts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks-per-family", type=int, default=84)
    ap.add_argument("--replicates", type=int, default=2)
    ap.add_argument("--math-timeout", type=float, default=3.0)
    args = ap.parse_args()
    from elo_per_token.simulator.control import start_in_thread

    sim = start_in_thread({"api_key": KEY}, brain=HostileBrain())
    tmp = Path(tempfile.mkdtemp(prefix="ept-hostile-"))
    suite = _latex_suite(tmp / "tex.jsonl", args.tasks_per_family)
    (tmp / "profiles.toml").write_text(
        f'[profiles.hostile]\nprotocol = "openai"\nbase_url = "{sim.url}"\napi_key_env = "EPT_SIM_API_KEY"\n'
        'model = "ept-sim-1"\ntimeout = 20\nsupports_n = false\n'
    )
    (tmp / "plan.toml").write_text(
        f'name = "hostile"\nprofile = "hostile"\nsuites = ["math", "tool_use", "{suite}"]\n'
        f"tasks_per_family = {args.tasks_per_family}\nreplicates = {args.replicates}\nseed = 23\n"
        f'ledger = "{tmp / "ledger"}"\nexecutor = "local"\nconcurrency = 8\nbootstrap_rounds = 0\n'
        '[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n[[arms]]\nstrategy = "majority"\nbudgets = [3]\n'
        "[rate_limits.hostile]\nrpm = 1000000\n"
    )
    env = {
        **os.environ,
        "EPT_PROFILES": str(tmp / "profiles.toml"),
        "EPT_SIM_API_KEY": KEY,
        "EPT_MATH_TIMEOUT_S": str(args.math_timeout),
        "PYTHONPATH": str(REPO),
    }
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "elo_per_token", "sweep", str(tmp / "plan.toml"), "--no-analysis"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=tmp,
    )
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _peak_rss_kb(proc.pid))
        time.sleep(0.2)
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    took = time.monotonic() - t0
    facts = _ledger_facts(tmp / "ledger", "hostile")
    requests = sim.control.stats()["requests"]
    print(out[-1500:])
    print(
        json.dumps(
            {
                "exit": proc.returncode,
                "seconds": round(took, 1),
                "sweep_peak_rss_mb": round(peak / 1024),
                "requests_at_server": requests,
                **facts,
            },
            indent=2,
        )
    )
    sim.stop()


if __name__ == "__main__":
    main()
