"""Benchmark (issue 39): `ept` start-up and `ept tokens` on 1M lines, in CPU time, against baselines in the
same run: a bare `python -c "import polars"` for start-up, the bare polars scan + group-by for `ept tokens`.

    python benchmarks/bench_startup.py [--lines 1000000] [--repeat 5] [--before REV] [--keep DIR]

Every pipeline is a whole process (interpreter start, imports, work, output), run in interleaved rounds so
load from other work hits them alike; the figure of each is its lowest CPU time (user + system of the child,
every thread). --before REV also runs the same commands on the source tree of git revision REV (extracted
with `git archive`, nothing checked out), so before/after land side by side in one run. Each tree is compiled
to bytecode first (as an install leaves it) and the runs do not inherit PYTHONDONTWRITEBYTECODE.
Targets: `ept tokens` <= 1.5x the bare scan + group-by on 1M lines (CPU).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_tokens import BARE_POLARS, make_log  # noqa: E402  (a sibling script, not a package)


def child_cpu(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    """CPU seconds (user + system, all threads) of one finished child process running `cmd` in `cwd`.
    `cwd` must hold no source tree: `python -m` puts the working directory first on sys.path, so run from a
    checkout every tree's `ept` would be that checkout's (the --before column measured this tree)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=cwd)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def tree_of(rev: str, dest: Path) -> Path:
    """The source tree of git revision `rev` under `dest` (git archive: no worktree, no checkout)."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def compile_trees(trees: Iterable[Path]) -> None:
    """Each tree's modules compiled to bytecode once, as after an install, so no timed run compiles source."""
    for tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "-x", r"/(tests|benchmarks|\.git)/",
                        str(tree)], check=True, capture_output=True)  # fmt: skip


def pipelines(log: Path, small: Path, trees: dict[str, Path]) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (argv, environment) for every measured process."""
    py = sys.executable
    # Bytecode as an installed package has it (pip compiles on install): PYTHONDONTWRITEBYTECODE in the calling
    # environment made every `ept` run compile ~36 of its modules from source (0.1-0.3 s of CPU) while polars,
    # the baseline, loaded its cached bytecode. The trees are compiled before timing (compile_trees).
    drop = ("PYTHONPATH", "COLUMNS", "TERMINAL_WIDTH", "PYTHONDONTWRITEBYTECODE")
    base = {k: v for k, v in os.environ.items() if k not in drop}
    out: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c pass": ([py, "-c", "pass"], base),
        "python -c 'import polars'": ([py, "-c", "import polars"], base),
        "bare polars scan + group-by, big log": ([py, "-c", BARE_POLARS, str(log)], base),
    }
    for label, tree in trees.items():
        env = {**base, "PYTHONPATH": str(tree)}
        ept = [py, "-m", "elo_per_token"]
        out[f"[{label}] ept --version"] = ([*ept, "--version"], env)
        out[f"[{label}] ept tokens --help"] = ([*ept, "tokens", "--help"], env)
        out[f"[{label}] ept tokens, 100 lines"] = ([*ept, "tokens", str(small)], env)
        out[f"[{label}] ept tokens, big log"] = ([*ept, "tokens", str(log)], env)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds; the lowest CPU time counts")
    ap.add_argument("--before", help="git revision to measure next to this tree (e.g. main)")
    ap.add_argument("--keep", help="write the logs here and keep them")
    args = ap.parse_args()

    tmp = Path(args.keep or tempfile.mkdtemp(prefix="bench-startup-"))
    tmp.mkdir(parents=True, exist_ok=True)
    log, small = tmp / f"calls-{args.lines}.jsonl", tmp / "calls-100.jsonl"
    if not log.exists():
        make_log(log, args.lines)
    if not small.exists():
        make_log(small, 100)
    trees = {"this tree": REPO}
    if args.before:
        trees[f"before: {args.before}"] = tree_of(args.before, tmp / "before")
    compile_trees(trees.values())
    runs = pipelines(log, small, trees)
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeat):
        for name, (cmd, env) in runs.items():
            cpu[name].append(child_cpu(cmd, env, tmp))
    best = {k: min(v) for k, v in cpu.items()}

    print(f"load average after timing: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'lowest CPU s of ' + str(args.repeat) + ', interleaved':50s} {'CPU s':>7s}  ratio")
    floor_start = best["python -c 'import polars'"]
    floor_tokens = best["bare polars scan + group-by, big log"]
    print(f"big log: {args.lines:,} lines")
    for name, t in best.items():
        if name.endswith("ept tokens, big log"):
            ratio = f"{t / floor_tokens:5.2f}x bare scan + group-by (target <= 1.5x)"
        elif name.startswith("["):
            ratio = f"{t / floor_start:5.2f}x import polars  (+{t - floor_start:.2f} s)"
        else:
            ratio = ""
        print(f"{name:50s} {t:7.2f}  {ratio}")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
