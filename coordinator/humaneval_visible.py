"""HumanEval's visible tests: the docstring examples the canonical solution passes, derived once in the sandbox.

`python -m elo_per_token.coordinator.humaneval_visible --write-visible` writes
suites/public/humaneval_visible.json; `--check` fails when the file drifts. This lives outside suites/
because it runs the worker's code sandbox, and suites/ (task data) imports no worker (docs/architecture.md).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from elo_per_token.suites.public.humaneval import (
    VISIBLE_FILE,
    candidate_examples,
    read_problems,
    task_id_of,
    visible_tests,
)


def derive_visible(problems: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per task id, the docstring examples the canonical solution passes (each run in the sandbox)."""
    from elo_per_token.worker.graders.code import run_tests

    out: dict[str, list[str]] = {}
    for p in problems:
        code = p["prompt"] + p["canonical_solution"]
        kept = [
            t
            for t in candidate_examples(p["prompt"], p["entry_point"])
            if run_tests(code, [t], p["entry_point"])["passed"] == 1
        ]
        out[task_id_of(p["task_id"])] = kept
    return out


def main(argv: list[str]) -> int:
    derived = derive_visible(read_problems())
    if "--check" in argv:
        if derived != visible_tests():
            print(
                f"{VISIBLE_FILE} is out of date: run python -m elo_per_token.coordinator.humaneval_visible --write-visible"
            )
            return 1
        print(f"{VISIBLE_FILE}: up to date")
        return 0
    VISIBLE_FILE.write_text(json.dumps(derived, indent=0, sort_keys=True, ensure_ascii=False) + "\n")
    n = sum(1 for v in derived.values() if v)
    print(
        f"wrote {VISIBLE_FILE}: {sum(map(len, derived.values()))} visible tests, {n}/{len(derived)} tasks have some"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
