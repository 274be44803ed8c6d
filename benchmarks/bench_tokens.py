"""Benchmark: `ept tokens` on a generated 1M-line call log vs a hand-written jq+awk pipeline and vs a
bare polars scan + group_by of the same file (issue 13: >= 5x jq+awk, <= 2x bare polars, whole process).

Also times a hand-written Python aggregation script, fixed minimally so it runs: its `agg` lists had
three slots but were unpacked into two names (ValueError); here they have two. Both baselines ("seed"
baselines below: the snippets the project started from) key by strategy alone, which mixes budgets —
the bug `ept tokens` fixes by keying on the arm; they are kept that way because they are timing
references only.

    python benchmarks/bench_tokens.py [--lines 1000000] [--repeat 3] [--keep DIR] [--skip-python]

Every pipeline is a whole process (interpreter start, imports, read, output), run in interleaved rounds in
this one run; prints best wall and CPU seconds of each and the two ratios. Totals are checked equal first.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

# The jq+awk baseline: totals per strategy alone (budgets mixed), verbatim apart from the file name.
SEED_JQ_AWK = r"""jq -r 'select(.usage != null) | [.task_id, .strategy, (.budget_n|tostring), (.usage.prompt_tokens|tostring), (.usage.completion_tokens|tostring)] | @tsv' "$1" \
| awk -F'\t' '
{
  key = $2
  in_tok[key] += $4
  out_tok[key] += $5
  n[key] += 1
}
END {
  printf "%-14s %10s %10s %12s %8s\n", "strategy","in_tok","out_tok","total_tok","calls"
  for (k in in_tok) {
    total = in_tok[k] + out_tok[k]
    printf "%-14s %10d %10d %12d %8d\n", k, in_tok[k], out_tok[k], total, n[k]
  }
}' \
| sort -k4 -n
"""


def seed_python(path: str) -> list[str]:
    """The Python baseline: per-(task, strategy) sums, then per strategy; only change from the original
    snippet: `agg` slots [0, 0, 0] -> [0, 0] so the unpacking works."""
    per_task = collections.defaultdict(lambda: collections.defaultdict(int))
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            u = rec.get("usage") or {}
            if not u:
                continue
            k = (rec["task_id"], rec["strategy"])
            per_task[k]["in"] += u.get("prompt_tokens", 0)
            per_task[k]["out"] += u.get("completion_tokens", 0)
    agg = collections.defaultdict(lambda: [0, 0])
    for (_task_id, strategy), v in per_task.items():
        total = v["in"] + v["out"]
        agg[strategy][0] += total
        agg[strategy][1] += 1
    return [
        f"{strategy:14s} tasks={tasks:4d} avg_tokens_per_task={total / tasks:9.1f}"
        for strategy, (total, tasks) in sorted(agg.items(), key=lambda x: x[1][0])
    ]


def make_log(path: Path, n: int, seed: int = 0) -> None:
    """A seed-shaped log: task_id, strategy, budget_n, usage{prompt_tokens, completion_tokens}."""
    rng = np.random.default_rng(seed)
    arms = [("greedy", 1), ("best_of_n", 4), ("majority", 8), ("best_of_n", 16), ("tree_search", 40)]
    a = rng.integers(0, len(arms), n)
    fam = np.array(["math", "code", "tool_use"])[rng.integers(0, 3, n)]
    df = pl.DataFrame(
        {
            "task_id": pl.Series(fam)
            + "-"
            + pl.Series(rng.integers(0, 2000, n)).cast(pl.String).str.zfill(4),
            "strategy": pl.Series([s for s, _ in arms])[a],
            "budget_n": pl.Series([b for _, b in arms])[a],
            "usage": pl.DataFrame(
                {"prompt_tokens": rng.integers(200, 2000, n), "completion_tokens": rng.integers(20, 600, n)}
            ).to_struct(),
        }
    )
    df.write_ndjson(path)


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run; CPU counts this process's threads and its finished children
    (the `ept` process, python -c, jq, awk, sort), so it stays meaningful when other work shares the machine."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c0 = time.process_time()
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, time.process_time() - c0 + (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


# The baseline for "close to the parser's limit": a fresh interpreter that imports polars, scans the
# file with the four fields of a minimal call log and sums tokens per (task, strategy, budget) — no validation, no
# table, no CSV. Prints totals per strategy so they can be checked against the other pipelines.
BARE_POLARS = """
import json, sys
import polars as pl
usage = pl.Struct({"prompt_tokens": pl.Int64, "completion_tokens": pl.Int64})
schema = {"task_id": pl.String, "strategy": pl.String, "budget_n": pl.Int64, "usage": usage}
tok = pl.col("usage").struct.field("prompt_tokens") + pl.col("usage").struct.field("completion_tokens")
g = pl.scan_ndjson(sys.argv[1], schema=schema).group_by("task_id", "strategy", "budget_n").agg(
    tok.sum().alias("total"), pl.len().alias("calls")).collect()
print(json.dumps(dict(g.group_by("strategy").agg(pl.col("total").sum()).rows())))
"""


def best(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return min(w for w, _ in runs), min(c for _, c in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument(
        "--repeat", type=int, default=3, help="rounds; each round runs every pipeline once, interleaved"
    )
    ap.add_argument("--keep", help="write the log here and keep it")
    ap.add_argument("--skip-python", action="store_true", help="skip the (slow) Python baseline")
    args = ap.parse_args()
    if shutil.which("jq") is None:
        sys.exit("jq not found (apt-get install jq)")

    tmp = Path(args.keep or tempfile.mkdtemp(prefix="bench-tokens-"))
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / f"agent_run-{args.lines}.jsonl"
    if not log.exists():  # with --keep, a log of this size from an earlier run is reused
        t0 = time.perf_counter()
        make_log(log, args.lines)
        print(f"log generated in {time.perf_counter() - t0:.1f} s")
    print(f"log: {args.lines} lines, {log.stat().st_size / 1e6:.0f} MB")

    from elo_per_token.analysis.io import TOKENS_FIELDS, read_summary
    from elo_per_token.analysis.tokens import arm_tokens_from_groups, calls_of, record_groups

    table = None
    out: dict[str, str] = {}

    def in_process() -> None:
        nonlocal table
        groups = calls_of(read_summary([str(log)], record_groups, fields=TOKENS_FIELDS).frame)
        table = arm_tokens_from_groups(groups)

    def run(name: str, cmd: list[str]) -> None:
        out[name] = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout

    csv = tmp / "tokens.csv"
    pipelines = {
        "cli": lambda: run(
            "cli", [sys.executable, "-m", "elo_per_token", "tokens", str(log), "--csv", str(csv)]
        ),
        "bare": lambda: run("bare", [sys.executable, "-c", BARE_POLARS, str(log)]),
        "jq": lambda: run("jq", ["bash", "-c", SEED_JQ_AWK, "bench", str(log)]),
        "fn": in_process,
    }
    # Interleaved rounds: a burst of load from other work hits every pipeline alike, and best-of keeps the
    # quiet moments of each.
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in pipelines}
    for _ in range(args.repeat):
        for name, fn in pipelines.items():
            times[name].append(timed(fn))
    t = {k: best(v) for k, v in times.items()}

    # Same totals per strategy from all of them: the baselines key by strategy alone, so sum our arms per strategy.
    assert table is not None
    ours = dict(table.group_by("strategy").agg(pl.col("total_tokens").sum()).rows())
    cli = dict(pl.read_csv(csv).group_by("strategy").agg(pl.col("total_tokens").sum()).rows())
    jq = {ln.split()[0]: int(ln.split()[3]) for ln in out["jq"].splitlines()[1:]}
    bare = json.loads(out["bare"])
    assert ours == jq == cli == bare, (ours, jq, cli, bare)

    print(f"load average after timing: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'best of ' + str(args.repeat) + ', interleaved':66s} {'wall s':>8s} {'CPU s':>8s}")
    rows = [
        ("fn", "in-process: read_summary + record_groups (what `ept tokens` runs)"),
        ("cli", "`ept tokens LOG --csv F`, whole process"),
        ("bare", "bare polars: python -c scan 4 fields + group_by, whole process"),
        ("jq", "jq+awk baseline (totals per strategy), whole pipeline"),
    ]
    for key, label in rows:
        print(f"{label:66s} {t[key][0]:8.2f} {t[key][1]:8.2f}")

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    fast_w, fast_c = t["jq"][0] / t["cli"][0], t["jq"][1] / t["cli"][1]
    near_w, near_c = t["cli"][0] / t["bare"][0], t["cli"][1] / t["bare"][1]
    print(
        f"jq+awk / `ept tokens`       wall {fast_w:5.2f}x  CPU {fast_c:5.2f}x   target >= 5x: {verdict(fast_w >= 5)} (wall)"
    )
    print(
        f"`ept tokens` / bare polars  wall {near_w:5.2f}x  CPU {near_c:5.2f}x   target <= 2x: {verdict(near_w <= 2)} (wall)"
    )
    if not args.skip_python:
        t_py = timed(lambda: seed_python(str(log)))
        print(f"{'Python baseline script (fixed)':66s} {t_py[0]:8.2f} {t_py[1]:8.2f}")
        print(
            f"ratio Python baseline / `ept tokens`: wall {t_py[0] / t['cli'][0]:5.1f}x, CPU {t_py[1] / t['cli'][1]:5.1f}x"
        )
    print("totals per strategy agree across `ept tokens`, the in-process call, bare polars and jq+awk")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
