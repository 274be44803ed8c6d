"""Generate the built-in suites (math, code, tool_use) deterministically.

    python -m elo_per_token.suites.generate [--out suites/data] [--check]

Every task is written for this project from templates with seeded parameters; references are
computed here (code references are run against their tests, and every buggy distractor is run to
make sure at least one test catches it). `--check` regenerates in memory and fails if the files
on disk differ, so the committed data cannot drift from this script. The templates are in
suites.generate_math, suites.generate_code and suites.generate_tools, run in that order from one seeded
generator.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from elo_per_token.suites.generate_code import code_tasks
from elo_per_token.suites.generate_math import math_tasks
from elo_per_token.suites.generate_tools import tool_tasks

SEED = 20261129


# ---------------------------------------------------------------- math


# ---------------------------------------------------------------- code

# The code templates: each draws one variant of a small function task (prompt, solution, two plausible
# bugs, test inputs, difficulty) from `r`.


# ---------------------------------------------------------------- tool use


def generate() -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(SEED)
    return {"math": math_tasks(rng), "code": code_tasks(rng), "tool_use": tool_tasks(rng)}


def _dump(tasks: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(t, sort_keys=True, ensure_ascii=False) + "\n" for t in tasks)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "data"))
    ap.add_argument(
        "--check", action="store_true", help="fail if the files on disk differ from a fresh generation"
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    suites = generate()
    if args.check:
        stale = [
            n
            for n, ts in suites.items()
            if not (out / f"{n}.jsonl").is_file()
            or (out / f"{n}.jsonl").read_text(encoding="utf-8") != _dump(ts)
        ]
        print("up to date" if not stale else f"stale: {', '.join(stale)}")
        return 1 if stale else 0
    out.mkdir(parents=True, exist_ok=True)
    for name, tasks in suites.items():
        (out / f"{name}.jsonl").write_text(_dump(tasks), encoding="utf-8")
        print(f"{name}: {len(tasks)} tasks -> {out / f'{name}.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
