"""Generate the shipped example: examples/logs/calls.jsonl.gz and examples/logs/outcomes.jsonl.

Minimal call-log records, the shape an agent harness typically writes: one call per line with task_id, strategy,
budget_n and usage.prompt_tokens / usage.completion_tokens (gzipped: the reader takes .jsonl.gz);
one outcome per (task, arm): `correct` (bool) for math and tool_use, `score` = fraction of 10 unit
tests passed for code. The data come from a known model so the report can be checked against it: each arm has a
per-family strength, each task a difficulty, and P(correct) = sigmoid(strength - difficulty).
Strengths grow with budget and flatten out: diminishing returns, which the report should show.

    python examples/make_example_logs.py            # rewrites examples/logs/
"""

from __future__ import annotations

import gzip
import io
import json
import math
from pathlib import Path

import numpy as np

FAMILIES = ("math", "code", "tool_use")
TASKS_PER_FAMILY = 60
# arm: (strategy, budget_n, calls per task, completion tokens per call, strengths per family)
ARMS = {
    "greedy@1": ("greedy", 1, 1, 300, (0.0, 0.0, 0.0)),
    "best_of_n@4": ("best_of_n", 4, 5, 240, (0.9, 0.7, 0.3)),
    "majority@8": ("majority", 8, 8, 230, (1.4, 0.9, 0.4)),
    "best_of_n@16": ("best_of_n", 16, 17, 230, (1.6, 1.1, 0.5)),
    "tree_search@40": ("tree_search", 40, 40, 200, (1.7, 1.2, 0.5)),
}


def generate(out_dir: Path, seed: int = 7) -> tuple[int, int]:
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    calls, outcomes = [], []
    for fi, fam in enumerate(FAMILIES):
        for t in range(1, TASKS_PER_FAMILY + 1):
            task_id = f"{fam}-{t:03d}"
            difficulty = rng.normal(0.3, 1.0)
            prompt = int(rng.integers(600, 1100))
            for strategy, budget, n_calls, comp, strength in ARMS.values():
                for i in range(n_calls):
                    role = "verifier" if strategy == "best_of_n" and i == n_calls - 1 else "sample"
                    calls.append(
                        {
                            "task_id": task_id,
                            "strategy": strategy,
                            "budget_n": budget,
                            "role": role,
                            "usage": {
                                "prompt_tokens": prompt,
                                "completion_tokens": int(rng.poisson(comp)),
                            },
                        }
                    )
                p = 1.0 / (1.0 + math.exp(-(strength[fi] - difficulty)))
                rec = {"task_id": task_id, "strategy": strategy, "budget_n": budget}
                if fam == "code":
                    rec["score"] = int(rng.binomial(10, p)) / 10
                else:
                    rec["correct"] = bool(rng.random() < p)
                outcomes.append(rec)
    # mtime=0: the same seed gives byte-identical files.
    with gzip.GzipFile(out_dir / "calls.jsonl.gz", "wb", mtime=0) as gz, io.TextIOWrapper(gz, "utf-8") as f:
        f.writelines(json.dumps(c) + "\n" for c in calls)
    with open(out_dir / "outcomes.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(o) + "\n" for o in outcomes)
    return len(calls), len(outcomes)


if __name__ == "__main__":
    n_calls, n_out = generate(Path(__file__).parent / "logs")
    print(f"wrote {n_calls} calls and {n_out} outcomes to examples/logs/")
