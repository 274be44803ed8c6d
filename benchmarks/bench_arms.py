"""Many arms: synthetic grid logs and `ept analyze` time / peak RSS on them.

A parameter grid (strategies x budgets x variants) where every arm runs every task once: one call and
one outcome line per (task, arm), `correct` drawn from each arm's true skill in that family. This is the
densest comparison graph there is (every pair of arms meets on every task).

    python benchmarks/bench_arms.py --arms 200 --tasks 100 --rounds 200      # issue 17's acceptance run
    python benchmarks/bench_arms.py --arms 1000 --tasks 100 --rounds 200
    python benchmarks/bench_arms.py --arms 200 --write-only grid.jsonl        # only write the input

Prints wall time and the peak RSS of the `ept analyze` child process (resource.getrusage), and checks
that every output file was written.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

STRATEGIES = ("greedy", "best_of_n", "self_consistency", "beam")
BUDGETS = (1, 2, 4, 8, 16)
FAMILIES = ("math", "code", "tool_use")


def grid_arms(k: int) -> list[tuple[str, int, str]]:
    """k arms as (strategy, budget, variant): strategies x budgets x ceil(k/20) variants, first k kept."""
    n_var = -(-k // (len(STRATEGIES) * len(BUDGETS)))
    arms = [
        (s, b, f"effort={v % 4},verifier={v // 4}" if n_var > 1 else "")
        for s in STRATEGIES
        for b in BUDGETS
        for v in range(n_var)
    ]
    return arms[:k]


def write_grid(path: Path, k: int, tasks_per_family: int, seed: int = 0) -> int:
    """Write the JSONL log; returns the number of lines."""
    rng = np.random.default_rng(seed)
    arms = grid_arms(k)
    budget = np.array([b for _, b, _ in arms], dtype=float)
    # Skill grows with log budget (diminishing returns), plus a per-arm and a per-family effect.
    skill = 0.35 * np.log2(budget) + rng.normal(0, 0.3, k)
    cost = 600.0 * budget * np.exp(rng.normal(0, 0.15, k))
    lines = 0
    with path.open("w", encoding="utf-8") as fh:
        for fam in FAMILIES:
            fam_skill = skill + rng.normal(0, 0.2, k)
            for t in range(tasks_per_family):
                task = f"{fam}-{t:04d}"
                difficulty = rng.normal(0.5, 1.0)
                p = 1.0 / (1.0 + np.exp(-(fam_skill - difficulty)))
                correct = rng.random(k) < p
                tokens = rng.gamma(8.0, cost / 8.0)
                out = []
                for i, (s, b, v) in enumerate(arms):
                    label = f"{s}@{b}[{v}]" if v else f"{s}@{b}"
                    base = {"task_id": task, "family": fam, "strategy": s, "budget_n": b, "arm": label}
                    prompt = int(tokens[i] * 0.3)
                    out.append(
                        json.dumps(
                            {
                                **base,
                                "kind": "call",
                                "role": "sample",
                                "usage": {
                                    "prompt_tokens": prompt,
                                    "completion_tokens": int(tokens[i]) - prompt,
                                },
                            }
                        )
                    )
                    out.append(json.dumps({**base, "kind": "outcome", "correct": bool(correct[i])}))
                fh.write("\n".join(out) + "\n")
                lines += len(out)
    return lines


def run_analyze(
    log: Path, rounds: int, out: Path, extra: list[str]
) -> tuple[float, float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds, peak RSS in MiB of the child, process)."""
    cmd = [
        sys.executable,
        "-m",
        "elo_per_token",
        "analyze",
        str(log),
        "--rounds",
        str(rounds),
        "--out",
        str(out),
        "--html",
        str(out / "report.html"),
        *extra,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # the only child: ept analyze
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0, proc  # Linux: ru_maxrss in KiB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", type=int, default=200)
    ap.add_argument("--tasks", type=int, default=100, help="tasks per family (3 families)")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, help="write the log and outputs here instead of a temporary folder")
    ap.add_argument("--write-only", type=Path, help="only write the JSONL log to this file")
    args, extra = ap.parse_known_args()
    if args.write_only:
        n = write_grid(args.write_only, args.arms, args.tasks, args.seed)
        print(f"wrote {args.write_only}: {n} lines, {args.arms} arms x {len(FAMILIES)} x {args.tasks} tasks")
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        log = base / "grid.jsonl"
        t0 = time.perf_counter()
        n = write_grid(log, args.arms, args.tasks, args.seed)
        print(
            f"input: {n:,} lines ({log.stat().st_size / 2**20:.0f} MiB), {args.arms} arms x "
            f"{len(FAMILIES)} families x {args.tasks} tasks, written in {time.perf_counter() - t0:.1f} s"
        )
        out = base / "out"
        wall, cpu, rss, proc = run_analyze(log, args.rounds, out, extra)
        files = [
            "report.md",
            "arms.csv",
            "report.json",
            "elo_vs_tokens.png",
            "d_elo_per_1k.png",
            "per_family_elo.png",
            "report.html",
        ]
        missing = [f for f in files if not (out / f).is_file()]
        print(
            f"ept analyze --rounds {args.rounds}: exit {proc.returncode}, wall {wall:.1f} s, CPU {cpu:.1f} s, "
            f"peak RSS {rss:,.0f} MiB, missing outputs: {missing or 'none'}"
        )
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
            sys.exit(1)


if __name__ == "__main__":
    main()
