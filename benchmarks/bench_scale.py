"""Benchmark: analysis and coordination at the scale of a sweep (issue 13).

Per size (jobs) and store (a local folder; SeaweedFS S3 with --s3-sizes) it generates a ledger run in the
documented layout (benchmarks/ledger_gen.py: 5 arms, 3 families, 1-8 calls per job, one object per job)
and measures, each command in its own process (wall time, peak RSS of that process):

* `ept analyze RUN` before any compaction (every job object read),
* `ept compact RUN` (the first, full compaction),
* `ept analyze RUN` compacted (the run's keys declared, as `ept sweep` leaves them: no listing of jobs/),
* the same with `EPT_VERIFY_JOBS=1` (the job keys listed: how every compacted read worked before),
* the baseline: `ept analyze` of the same records as ONE Parquet file, in the same run,
* incremental: 1% more jobs (at least 1k) added, `ept compact` again (objects read = the new ones only),
* the coordinator: `ept sweep PLAN` of the same N-job plan with every result already in the ledger —
  expansion, the resume listing, nothing to enqueue (the progress is live from the start).

    python benchmarks/bench_scale.py [--sizes 10000,100000,1000000] [--s3-sizes 10000,100000]
                                     [--rounds 200] [--dir DIR] [--keep]

With --undeclared (issue 24 item 6) it measures instead a run written by another tool (job objects only, no
key declarations): `ept compact`, then `ept analyze` of the compacted run (the keys the compaction recorded:
no listing) against the one-Parquet baseline, and with `EPT_VERIFY_JOBS=1` (listed, as before).

Prints a markdown table (docs/benchmarks.md holds the figures measured here).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "testkit"))

import fixtures_ledger as ledger_gen  # noqa: E402


def run_measured(
    argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None
) -> tuple[float, float, str]:
    """(seconds, peak RSS in GB, stdout) of one command, measured by GNU time in its own small process: a
    child forked straight from this (large) process would report at least this process's RSS (Linux keeps
    the pre-exec high-water mark in ru_maxrss)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", **(env or {})}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.perf_counter()
        p = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", tf.name, *argv], capture_output=True, env=full, cwd=cwd
        )
        dt = time.perf_counter() - t0
        if p.returncode:
            raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
        kb = int(tf.read().split()[-1])
    return dt, kb / 1024 / 1024, p.stdout.decode()


EPT = [sys.executable, "-m", "elo_per_token"]


def suite_and_plan(work: Path, n_jobs: int, ledger: str) -> Path:
    """A plan whose jobs are exactly the generated run's (same tasks, arms, replicates)."""
    per_task = len(ledger_gen.ARMS) * 4
    n_tasks = -(-n_jobs // per_task)
    suite = work / f"suite-{n_jobs}.jsonl"
    with open(suite, "w") as f:
        for t in range(n_tasks):
            fam = ledger_gen.FAMILIES[t % 3]
            f.write(json.dumps({"task_id": f"{fam}-{t:06d}", "family": fam, "prompt": "1+0?", "reference": 1,
                                "grader": {"type": "numeric"}}) + "\n")  # fmt: skip
    profiles = work / "profiles.toml"
    # Nothing is called: every job of the plan already has its result. A closed port makes sure of it.
    profiles.write_text('[profiles.bench]\nprotocol = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
                        'api_key_env = "EPT_BENCH_KEY"\nmodel = "m"\n')  # fmt: skip
    arms: dict[str, list[int]] = {}
    for s, b, _ in ledger_gen.ARMS:
        arms.setdefault(s, []).append(b)
    plan = work / f"plan-{n_jobs}.toml"
    text = (f'name = "r"\nprofile = "bench"\nsuites = ["{suite}"]\nreplicates = 4\nseed = 0\nledger = "{ledger}"\n'
            'executor = "local"\nbootstrap_rounds = 0\n')  # fmt: skip
    for s, bs in arms.items():
        text += f'\n[[arms]]\nstrategy = "{s}"\nbudgets = {bs}\n'
    plan.write_text(text)
    return plan


def bench_store(store: str, n: int, work: Path, rounds: int, s3_env: dict[str, str] | None) -> dict:
    env = dict(s3_env or {})
    row: dict = {"store": store, "jobs": n}
    t0 = time.perf_counter()
    extra = max(1000, n // 100)
    if store == "local":
        ledger = str(work / f"ledger-{n}")
        run_dir = Path(ledger) / "runs" / "r"
        if not (run_dir / ".complete").exists():
            shutil.rmtree(ledger, ignore_errors=True)
            ledger_gen.write_local(ledger, "r", n)
            (run_dir / ".complete").write_text("")
        else:  # reused from an earlier run: back to n uncompacted jobs, as generated (no manifest: an
            # earlier run's sweep-resume step left one, and sessions of an older ept in it make readers list)
            shutil.rmtree(run_dir / "compact", ignore_errors=True)
            shutil.rmtree(run_dir / "planned", ignore_errors=True)
            (run_dir / "manifest.json").unlink(missing_ok=True)
            for k in ledger_gen.job_frame("r", extra, offset=n)["job_key"].to_list():
                (run_dir / "jobs" / (k + ".jsonl")).unlink(missing_ok=True)
    else:
        ledger = f"s3://bench-{n}/l"
        _with_env(env, lambda: ledger_gen.write_s3(_open(ledger), "r", n, threads=32))
    # As a sweep leaves it: the key space declared (ledger/keyspace.py), so a compacted read needs no LIST.
    _with_env(env, lambda: ledger_gen.declare(_open(ledger), "r", n))
    row["generate_s"] = time.perf_counter() - t0
    one = work / f"one-{n}.parquet"
    if not one.exists():
        ledger_gen.one_file(one, "r", n)
    one_arg = str(one)
    if store == "s3":
        import boto3

        c = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                         aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")  # fmt: skip
        c.upload_file(str(one), f"bench-{n}", "one/records.parquet")
        one_arg = f"s3://bench-{n}/one/records.parquet"
    out = work / "out"
    analyze = [*EPT, "analyze", "--rounds", str(rounds), "--no-plots", "--out"]
    row["uncompacted"] = run_measured([*analyze, str(out / "u"), "r", "--ledger", ledger], env)[:2]
    row["compact"] = run_measured([*EPT, "compact", "r", "--ledger", ledger], env)[:2]
    # compacted (declared keys), the same with the keys listed (EPT_VERIFY_JOBS=1: how it read before the
    # declarations), and the baseline: each measured twice, in opposite orders, best of two — on the loaded
    # two cores a single figure moved by 2x between neighbours (S3 still settling after the compaction).
    runs = {
        "compacted": ([*analyze, str(out / "c"), "r", "--ledger", ledger], env),
        "compacted_listed": (
            [*analyze, str(out / "v"), "r", "--ledger", ledger],
            {**env, "EPT_VERIFY_JOBS": "1"},
        ),
        "one_parquet": ([*analyze, str(out / "p"), one_arg], env),
    }
    for order in (list(runs), list(reversed(runs))):
        for name in order:
            got = run_measured(*runs[name])[:2]
            row[name] = min(row.get(name, got), got)
    same = (out / "u" / "arms.csv").read_bytes() == (out / "c" / "arms.csv").read_bytes()
    row["arms_equal"] = (
        same and (out / "c" / "arms.csv").read_bytes() == (out / "p" / "arms.csv").read_bytes()
    )
    row["arms_equal"] = (
        row["arms_equal"] and (out / "v" / "arms.csv").read_bytes() == (out / "c" / "arms.csv").read_bytes()
    )
    # Incremental: 1% more jobs (declared first, as a resumed sweep of a larger plan does), compacted again.
    _with_env(env, lambda: ledger_gen.declare(_open(ledger), "r", extra, offset=n))
    if store == "local":
        ledger_gen.write_local(ledger, "r", extra, offset=n)
    else:
        _with_env(env, lambda: ledger_gen.write_s3(_open(ledger), "r", extra, offset=n))
    dt, rss, text = run_measured([*EPT, "compact", "r", "--ledger", ledger], env)
    row["incremental"] = (dt, rss, extra, text.split(" job objects")[0].strip())
    # The coordinator: the whole plan expanded and resumed, nothing left to run.
    plan = suite_and_plan(work, n + extra, ledger)
    dt, rss, _ = run_measured([*EPT, "sweep", str(plan), "--no-analysis", "--profiles", str(work / "profiles.toml")],
                              {**env, "EPT_BENCH_KEY": "sk-bench-0000"})  # fmt: skip
    row["coordinator"] = (dt, rss)
    return row


def run_cpu(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(CPU seconds, user + system of every thread, peak RSS in GB) of one command, by GNU time."""
    full = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", **(env or {})}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        p = subprocess.run(
            ["/usr/bin/time", "-f", "%U %S %M", "-o", tf.name, *argv], capture_output=True, env=full
        )
        if p.returncode:
            raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
        user, sys_, kb = tf.read().split()[-3:]
    return float(user) + float(sys_), int(kb) / 1024 / 1024


def _undeclared_run(store: str, n: int, work: Path, env: dict[str, str]) -> tuple[str, tuple | None]:
    """The undeclared run (written as another tool writes, then `ept compact`): its ledger, and the compaction's
    (seconds, GB) — None when a compacted one was found in `work` and reused (a 1M-job run takes ~10 min to
    generate and compact; link /work/…/ledger-1000000 as undeclared-1000000 to reuse it)."""
    if store == "local":
        ledger = str(work / f"undeclared-{n}")
        if (Path(ledger) / "runs" / "r" / "compact").is_dir():
            return ledger, None
        shutil.rmtree(ledger, ignore_errors=True)
        ledger_gen.write_local(ledger, "r", n)
    else:
        ledger = f"s3://undeclared-{n}/l"
        if UPLOAD_COMPACTED_ONLY:
            return ledger, _upload_compacted(work / f"undeclared-{n}", f"undeclared-{n}", env)
        _with_env(env, lambda: ledger_gen.write_s3(_open(ledger), "r", n, threads=32))
    return ledger, run_measured([*EPT, "compact", "r", "--ledger", ledger], env)[:2]


UPLOAD_COMPACTED_ONLY = False  # --s3-compacted-only


def _upload_compacted(local: Path, bucket: str, env: dict[str, str]) -> None:
    """The local compacted run's objects but its job objects (segments, indexes, recorded keys, change log,
    manifest) uploaded under s3://BUCKET/l: all a read of the compacted run touches, so the S3 read is
    measured at sizes whose million job objects would take too long to upload to SeaweedFS here."""
    import boto3

    c = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")  # fmt: skip
    with contextlib.suppress(c.exceptions.BucketAlreadyOwnedByYou):
        c.create_bucket(Bucket=bucket)
    run = local / "runs" / "r"
    tops = [p for p in run.iterdir() if p.name != "jobs"]  # never walks the million job objects
    files = [p for t in tops for p in ([t] if t.is_file() else t.rglob("*")) if p.is_file()]
    for f in sorted(files):
        c.upload_file(str(f), bucket, f"l/runs/r/{f.relative_to(run).as_posix()}")


def bench_undeclared(
    store: str, n: int, work: Path, rounds: int, s3_env: dict[str, str] | None, repeat: int = 5
) -> dict:
    """A run another tool wrote (no declarations), compacted by `ept compact`: `ept analyze` of it against the
    same records as one Parquet file, in CPU time (user + system, all threads), median of `repeat` runs in
    alternating order (issue 39: ≤ 1.1×). `compacted` is a re-analysis (the viewer's cache entry exists, so it
    is only looked up), `no_cache` the same with `--no-cache`; the first analysis, which writes the entry, is
    measured once beforehand (`first`)."""
    import statistics

    env = dict(s3_env or {})
    cache = work / f"view-cache-{store}-{n}"
    shutil.rmtree(cache, ignore_errors=True)
    env["EPT_VIEW_CACHE"] = str(cache)
    row: dict = {"store": store, "jobs": n}
    ledger, row["compact"] = _undeclared_run(store, n, work, env)
    one = work / f"one-{n}.parquet"
    if not one.exists():
        ledger_gen.one_file(one, "r", n)
    one_arg = str(one)
    if store == "s3":
        import boto3

        c = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                         aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")  # fmt: skip
        c.upload_file(str(one), f"undeclared-{n}", "one/records.parquet")
        one_arg = f"s3://undeclared-{n}/one/records.parquet"
    out = work / f"out-undeclared-{store}-{n}"
    analyze = [*EPT, "analyze", "--rounds", str(rounds), "--no-plots", "--out"]
    compacted = [*analyze, str(out / "c"), "r", "--ledger", ledger]
    row["first"] = run_cpu(compacted, env)  # writes the viewer's cache entry
    row["cache_mb"] = sum(p.stat().st_size for p in cache.glob("*.pickle")) / 2**20
    runs = {
        "compacted": (compacted, env),
        "no_cache": ([*analyze, str(out / "n"), "r", "--ledger", ledger, "--no-cache"], env),
        "one_parquet": ([*analyze, str(out / "p"), one_arg], env),
    }
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    for i in range(repeat):
        for name in list(runs) if i % 2 == 0 else list(reversed(runs)):
            got[name].append(run_cpu(*runs[name]))
    for name, vals in got.items():
        row[name] = (statistics.median(v[0] for v in vals), max(v[1] for v in vals))
        row[name + "_all"] = [round(v[0], 2) for v in vals]
    arms = [(out / d / "arms.csv").read_bytes() for d in ("c", "n", "p")]
    row["arms_equal"] = arms[0] == arms[1] == arms[2]
    return row


def fmt_undeclared(r: dict) -> str:
    def tr(x: tuple) -> str:
        return f"{x[0]:.2f} s / {x[1]:.2f} GB"

    one = r["one_parquet"][0]
    compact = "reused" if r["compact"] is None else f"{r['compact'][0]:.1f} s wall"
    if r["compact"] is None and r["store"] == "s3":
        compact = "local one, segments uploaded"
    return (
        f"| {r['store']} | {r['jobs']:,} | {compact} | {tr(r['one_parquet'])} | {tr(r['compacted'])} | "
        f"**{r['compacted'][0] / one:.3f}×** | {tr(r['no_cache'])} | **{r['no_cache'][0] / one:.3f}×** | "
        f"{r['first'][0]:.2f} s ({r['first'][0] / one:.2f}×), {r['cache_mb']:.0f} MB | "
        f"{'yes' if r['arms_equal'] else 'NO'} |"
    )


HEADER_UNDECLARED = (
    "| store | jobs | compact | analyze one Parquet (CPU, median) | analyze compacted (CPU, median) | ÷ one "
    "Parquet | `--no-cache` (CPU, median) | ÷ one Parquet | first analyze, writes the viewer's entry | "
    "arms.csv equal |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def _open(ledger: str):
    from elo_per_token.ledger import open_ledger

    return open_ledger(ledger)


def _with_env(env: dict[str, str], fn):
    """fn() with `env` in os.environ (the S3 endpoint and keys), restored after."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return fn()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def fmt_row(r: dict) -> str:
    def tr(x: tuple) -> str:
        return f"{x[0]:.1f} s / {x[1]:.2f} GB"

    ratio = r["compacted"][0] / r["one_parquet"][0]
    inc = r["incremental"]
    return (
        f"| {r['store']} | {r['jobs']:,} | {tr(r['uncompacted'])} | {tr(r['compact'])} | {tr(r['compacted'])} | "
        f"{tr(r['one_parquet'])} | {ratio:.2f}× | {tr(r['compacted_listed'])} ({r['compacted_listed'][0] / r['one_parquet'][0]:.2f}×) | "
        f"{inc[0]:.1f} s, read {inc[3]} of {r['jobs'] + inc[2]:,} | "
        f"{tr(r['coordinator'])} | {'yes' if r['arms_equal'] else 'NO'} |"
    )


HEADER = (
    "| store | jobs | analyze uncompacted | compact (first) | analyze compacted | analyze one Parquet | compacted ÷ one "
    "Parquet | analyze compacted, keys listed (`EPT_VERIFY_JOBS=1`) | compact again (+1%) | sweep resume "
    "(expand + list) | arms.csv equal |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", default="10000,100000", help="Local sizes, comma-separated (e.g. 10000,100000,1000000)."
    )
    ap.add_argument("--s3-sizes", default="", help="SeaweedFS sizes, comma-separated (empty: none).")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--dir", default=None, help="Work folder (kept; generated ledgers are reused).")
    ap.add_argument(
        "--undeclared", action="store_true", help="Measure runs written without key declarations."
    )
    ap.add_argument("--repeat", type=int, default=5, help="--undeclared: runs per arm (the median is shown).")
    ap.add_argument(
        "--s3-compacted-only",
        action="store_true",
        help="--undeclared: upload the local compacted run's segments and records, not its job objects.",
    )
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="ept-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    global UPLOAD_COMPACTED_ONLY
    UPLOAD_COMPACTED_ONLY = args.s3_compacted_only
    if args.undeclared:
        bench, fmt = (lambda *a: bench_undeclared(*a, repeat=args.repeat)), fmt_undeclared
    else:
        bench, fmt = bench_store, fmt_row
    rows = []
    print(HEADER_UNDECLARED if args.undeclared else HEADER, flush=True)
    for n in [int(x) for x in args.sizes.split(",") if x]:
        rows.append(bench("local", n, work, args.rounds, None))
        print(fmt(rows[-1]), flush=True)
    s3_sizes = [int(x) for x in args.s3_sizes.split(",") if x]
    if s3_sizes:
        from fixtures_services import start_seaweed, stop_proc

        srv = start_seaweed(work / "weed")
        try:
            for n in s3_sizes:
                rows.append(bench("s3", n, work, args.rounds, srv.env()))
                print(fmt(rows[-1]), flush=True)
        finally:
            stop_proc(srv.proc)
    (work / "bench_scale.json").write_text(json.dumps(rows, indent=1, default=str))
    print(f"\n(raw figures: {work / 'bench_scale.json'})")


if __name__ == "__main__":
    main()
