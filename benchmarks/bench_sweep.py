"""Sweep throughput: jobs/s and calls/s for the local executor and for Celery with 1, 2 and 4 worker processes,
against the simulator at 0 ms and 200 ms latency, next to the Little's-law bound (concurrency / latency) and a
raw `openai` client loop with the same concurrency on the same server.

    python benchmarks/bench_sweep.py [--jobs-0ms 600] [--seconds-200ms 6] [--threads 16] [--strategy greedy]
    python benchmarks/bench_sweep.py --ledger-cpu 2000 [--ledger-rounds 2] [--baseline REV]

Real services only: a simulator subprocess (`ept simulate`), redis-server, Celery worker subprocesses; the
ledger is a local folder (shared by the workers on this machine) so the numbers measure the executors.

--ledger-cpu N runs only the write-path comparison (issue 13): the same Celery sweep of N jobs (2 workers,
0 ms latency) once with a file ledger and once with an S3 ledger on a SeaweedFS server started here,
alternating for --ledger-rounds rounds, and prints the workers' CPU per job for each (from /proc, so only
the worker processes count), SeaweedFS's CPU per job, and the S3 / file ratio (target <= 1.3x).
--ledger-cpu N --baseline REV: instead, S3 sweeps whose workers run this tree vs git revision REV's tree
(extracted with git archive), alternating, side by side in one run (issue 39: workers <= 5 ms CPU per job).
Each --ledger-cpu round also measures the floor in the same run: the same number of messages with the same
job payloads to a no-op task on two bare Celery workers with the worker's Celery settings (make_app: threads
pool, late acks, prefetch 1, Redis result backend), so the table shows what of a job's CPU is Celery's own.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "testkit"))

from fixtures_services import free_port, start_celery_workers, start_redis, start_seaweed, stop_proc  # noqa: E402

KEY = "sk-bench-" + uuid.uuid4().hex


def start_sim(tmp: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = open(tmp / "sim.log", "wb")  # noqa: SIM115
    p = subprocess.Popen([sys.executable, "-m", "elo_per_token", "simulate", "--port", str(port)], stdout=log,
                         stderr=subprocess.STDOUT, env=env)  # fmt: skip
    root = f"http://127.0.0.1:{port}"
    from elo_per_token.simulator.control import SimControl

    deadline = time.monotonic() + 30
    while True:
        try:
            SimControl(root).config()
            break
        except OSError:
            if time.monotonic() > deadline or p.poll() is not None:
                raise RuntimeError((tmp / "sim.log").read_text()) from None
            time.sleep(0.1)
    return p, root


def plan_text(name: str, ledger: Path, strategy: str, budget: int, replicates: int, executor: str, queue: str,
              threads: int, per_message: int = 1) -> str:  # fmt: skip
    return textwrap.dedent(
        f"""\
        name = "{name}"
        profile = "sim-bench"
        suites = ["math"]
        replicates = {replicates}
        seed = 1
        ledger = "{ledger}"
        executor = "{executor}"
        queue = "{queue}"
        concurrency = {threads}
        batch_size = 500
        jobs_per_message = {per_message}
        bootstrap_rounds = 0
        [[arms]]
        strategy = "{strategy}"
        budgets = [{budget}]
        """
    )


def raw_openai(url: str, threads: int, n_calls: int) -> float:
    """calls/s of plain openai SDK calls from `threads` threads (the ceiling for any executor on this box)."""
    import openai

    client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)
    left = [n_calls]
    lock = threading.Lock()

    def loop() -> None:
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            client.chat.completions.create(
                model="ept-sim-1", messages=[{"role": "user", "content": "What is 2+2?"}]
            )

    ts = [threading.Thread(target=loop) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return n_calls / (time.perf_counter() - t0)


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds spent by this process and the given service processes between start() and stop()."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def start(self) -> None:
        self.t0 = time.process_time() + sum(proc_cpu(p) for p in self.pids)

    def stop(self) -> float:
        return time.process_time() + sum(proc_cpu(p) for p in self.pids) - self.t0


def run_sweep(plan_src: str, profile, broker: str | None, compact: bool = True) -> tuple[float, int, int]:
    from rich.console import Console

    from elo_per_token.coordinator.plan import parse_plan
    from elo_per_token.coordinator.sweep import execute, plan_jobs

    plan = parse_plan(plan_src)
    jobs = plan_jobs(plan)
    quiet = Console(file=open(os.devnull, "w"), stderr=False)  # noqa: SIM115
    t0 = time.perf_counter()
    out = execute(
        plan, jobs, profile=profile, analyze=False, broker_url=broker, console=quiet, compact=compact
    )
    dt = time.perf_counter() - t0
    if not out.ok:
        raise RuntimeError(f"sweep failed: {dict(out.tally.failures)} {out.tally.messages}")
    return dt, out.tally.done, out.tally.calls


def ledger_cpu(args, tmp: Path, ctl, redis, n_math: int, profile) -> None:
    """Workers' CPU per job, same sweep, same run, alternating: file ledger vs S3 ledger (SeaweedFS), or with
    --baseline REV, S3 with this tree's workers vs S3 with REV's workers (the coordinator is this tree's)."""
    s3 = start_seaweed(tmp / "weed")
    os.environ.update(s3.env())  # the coordinator (this process) reads and writes the S3 ledger too
    ctl.set(latency_ms=0.0, latency_jitter_ms=0.0)
    bucket = "ept-bench-" + uuid.uuid4().hex[:8]
    s3_url = f"s3://{bucket}/ledger"
    configs = {"file": (str(tmp / "ledger-cpu"), None), "s3": (s3_url, None)}
    if args.baseline:
        from bench_startup import tree_of

        configs = {"baseline": (s3_url, tree_of(args.baseline, tmp / "baseline-tree")), "s3": (s3_url, None)}
    if args.per_message > 1:  # this tree's workers again, k jobs per message (the baseline's know only 1)
        configs[f"s3-k{args.per_message}"] = (s3_url, None)
    reps = -(-args.ledger_cpu // n_math)
    got: dict[str, list[tuple[float, float, float, int]]] = {k: [] for k in configs}
    got["floor"] = []
    try:
        for rnd in range(args.ledger_rounds):
            for kind, (ledger, source) in configs.items():
                got[kind].append(
                    _ledger_round(args, tmp, redis, profile, s3, kind, ledger, source, reps, rnd)
                )
            got["floor"].append(_floor_round(args, tmp, redis, reps, rnd))
    finally:
        stop_proc(s3.proc)
    _ledger_table(args, {k: min(v) for k, v in got.items()})  # the quietest round of each (by worker CPU)


FLOOR_APP = """\
from elo_per_token.worker.celery_app import make_app

app = make_app()


@app.task(name="bench.noop", shared=False)
def noop(job, ctx):
    return {"key": job.get("key"), "status": "done", "calls": 0, "tokens": 0}
"""


def _floor_round(args, tmp: Path, redis, reps: int, rnd: int) -> tuple[float, float, float, int]:
    """Workers' CPU per message of a no-op task (two bare Celery workers, the worker's settings, real job
    payloads): Celery's and kombu's own cost per job, the floor under any job's CPU."""
    from celery.result import ResultSet

    from elo_per_token.coordinator.plan import parse_plan
    from elo_per_token.coordinator.sweep import plan_jobs
    from elo_per_token.worker.celery_app import make_app

    queue = "floor-" + uuid.uuid4().hex[:6]
    (tmp / "floor_app.py").write_text(FLOOR_APP)
    env = {**os.environ, "EPT_BROKER_URL": redis.url, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp)])}
    procs = [subprocess.Popen([sys.executable, "-m", "celery", "-A", "floor_app", "worker", "-P", "threads", "-c",
                               str(args.threads), "-Q", queue, "-n", f"floor{i}-{uuid.uuid4().hex[:6]}@127.0.0.1",
                               "--loglevel", "WARNING"], cwd=tmp, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(2)]  # fmt: skip
    app = make_app(redis.url)
    try:
        deadline = time.monotonic() + 60
        while len(app.control.ping(timeout=1.0) or []) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        plan = parse_plan(plan_text("floor", tmp / "floor-ledger", args.strategy, args.budget, reps, "celery",
                                    queue, args.threads))  # fmt: skip
        ctx = {"ledger": "unused"}

        def send(jobs) -> ResultSet:
            with app.producer_or_acquire() as producer:
                rs = [app.send_task("bench.noop", args=[j.to_dict(), ctx], queue=queue, producer=producer,
                                    argsrepr=f"[{j.key!r}]", kwargsrepr="{}") for j in jobs]  # fmt: skip
            return ResultSet(rs, app=app)

        jobs = plan_jobs(plan)
        send(jobs[:100]).join(timeout=120)  # warm-up, not measured
        meter = CpuMeter([p.pid for p in procs])
        meter.start()
        send(jobs).join(timeout=600)
        row = (meter.stop() / len(jobs), 0.0, 0.0, len(jobs))
        print(
            f"  round {rnd + 1} floor    {len(jobs)} no-op tasks: workers {1000 * row[0]:.2f} ms CPU/job",
            flush=True,
        )
        return row
    finally:
        app.close()
        for p in procs:
            stop_proc(p)


def _ledger_round(args, tmp: Path, redis, profile, s3, kind: str, ledger: str, source: Path | None, reps: int,
                  rnd: int) -> tuple[float, float, float, int]:  # fmt: skip
    """One measured sweep (after an unmeasured warm-up): CPU per job of the workers, SeaweedFS, this process."""
    queue = "bench-" + uuid.uuid4().hex[:6]
    name = f"lcpu-{kind}-{rnd}-{uuid.uuid4().hex[:6]}"
    env = {"EPT_BENCH_KEY": KEY, "EPT_PROFILES": str(tmp / "profiles.toml"), **s3.env()}
    workers = start_celery_workers(2, redis.url, tmp / f"w-{name}", concurrency=args.threads, queue=queue,
                                   env=env, source=source)  # fmt: skip
    try:
        k = args.per_message if kind.startswith("s3-k") else 1
        warm = plan_text(
            name + "-warm", ledger, args.strategy, args.budget, 1, "celery", queue, args.threads, k
        )
        run_sweep(warm, profile, redis.url, compact=False)  # imports, pools, the bucket: not measured
        src = plan_text(name, ledger, args.strategy, args.budget, reps, "celery", queue, args.threads, k)
        w, srv, coord = CpuMeter([p.pid for p in workers.procs]), CpuMeter([s3.proc.pid]), CpuMeter([])
        for m in (w, srv, coord):
            m.start()
        dt, done, _calls = run_sweep(src, profile, redis.url, compact=False)
        row = (w.stop() / done, srv.stop() / done, coord.stop() / done, done)
        print(f"  round {rnd + 1} {kind:<8} {done} jobs in {dt:.1f} s: workers {1000 * row[0]:.2f} ms CPU/job",
              flush=True)  # fmt: skip
        return row
    finally:
        workers.stop()


def _ledger_table(args, best: dict[str, tuple[float, float, float, int]]) -> None:
    n = next(iter(best.values()))[3]
    print(f"\nwrite path: Celery x2 ({args.threads} threads each), {args.strategy}@{args.budget}, 0 ms latency,"
          f" transcripts on, {n} jobs a sweep, best of {args.ledger_rounds} alternating rounds; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")  # fmt: skip
    labels = {"file": "file (local folder)", "s3": "S3 (SeaweedFS), this tree",
              "baseline": f"S3 (SeaweedFS), {args.baseline}", "floor": "floor: Celery no-op task",
              f"s3-k{args.per_message}": f"S3, this tree, {args.per_message} jobs/message"}  # fmt: skip
    print(
        f"{'ledger / workers':<34} {'workers ms/job':>14} {'S3 server ms/job':>16} {'coordinator ms/job':>18}"
    )
    for kind, (wk, sv, co, _) in best.items():
        srv = f"{1000 * sv:.2f}" if kind not in ("file", "floor") else "-"
        print(
            f"{labels[kind]:<34} {1000 * wk:>14.2f} {srv:>16} {1000 * co if kind != 'floor' else 0.0:>18.2f}"
        )
    s3w = best["s3"][0]
    for kind in [k for k in best if k.startswith("s3")]:
        w = best[kind][0]
        print(f"workers' CPU per job, {labels[kind]}: {1000 * w:.2f} ms (target <= 5 ms: "
              f"{'met' if w <= 0.005 else 'NOT met'})")  # fmt: skip
    fl = best["floor"][0]
    print(f"S3 job / Celery no-op floor, workers' CPU per job: {s3w / fl:.2f}x ({1000 * (s3w - fl):.2f} ms over"
          " the floor)")  # fmt: skip
    if "baseline" in best:
        b = best["baseline"]
        print(f"this tree / {args.baseline}, workers' CPU per job: {s3w / b[0]:.2f}x; S3 server's CPU per job: "
              f"{best['s3'][1] / b[1]:.2f}x")  # fmt: skip
        return
    ratio = s3w / best["file"][0]
    with_srv = (s3w + best["s3"][1]) / best["file"][0]
    print(f"S3 / file, workers' CPU per job: {ratio:.2f}x (target <= 1.3x: {'met' if ratio <= 1.3 else 'NOT met'});"
          f" counting the S3 server's CPU too: {with_srv:.2f}x")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--threads", type=int, default=16, help="threads per executor process (local and per worker)"
    )
    ap.add_argument("--jobs-0ms", type=int, default=400)
    ap.add_argument("--seconds-200ms", type=float, default=8.0, help="target duration of each 200 ms run")
    ap.add_argument("--strategy", default="greedy")
    ap.add_argument("--budget", type=int, default=1)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument(
        "--ledger-cpu",
        type=int,
        default=0,
        metavar="N",
        help="only the write-path row: N-job Celery sweeps, file ledger vs S3 (SeaweedFS)",
    )
    ap.add_argument("--ledger-rounds", type=int, default=2)
    ap.add_argument(
        "--per-message",
        type=int,
        default=1,
        metavar="K",
        help="Celery sweeps at K jobs per message (plan jobs_per_message); with --ledger-cpu: an extra row beside 1",
    )
    ap.add_argument(
        "--baseline",
        metavar="REV",
        help="with --ledger-cpu: S3 sweeps with this tree's workers vs git revision REV's (git archive), alternating",
    )
    args = ap.parse_args()

    from elo_per_token.egress.profiles import Profile
    from elo_per_token.suites.load import load_builtin_suite

    n_math = len(load_builtin_suite("math"))
    tmp = Path(tempfile.mkdtemp(prefix="ept-bench-"))
    sim_proc, root = start_sim(tmp)
    url = root + "/v1"
    from elo_per_token.simulator.control import SimControl

    ctl = SimControl(root)
    redis = start_redis(tmp / "redis")
    (tmp / "profiles.toml").write_text(
        f'[profiles.sim-bench]\nprotocol = "openai"\nbase_url = "{url}"\napi_key_env = "EPT_BENCH_KEY"\n'
        'model = "ept-sim-1"\ntimeout = 30\n'
    )
    os.environ["EPT_BENCH_KEY"] = KEY
    os.environ["EPT_PROFILES"] = str(tmp / "profiles.toml")
    profile = Profile(
        name="sim-bench", protocol="openai", base_url=url, api_key_env="EPT_BENCH_KEY", model="ept-sim-1"
    )
    worker_counts = [int(x) for x in args.workers.split(",")]
    rows = []
    if args.ledger_cpu:
        try:
            ledger_cpu(args, tmp, ctl, redis, n_math, profile)
        finally:
            stop_proc(redis.proc)
            stop_proc(sim_proc)
        return
    try:
        for latency in (0, 200):
            ctl.set(latency_ms=float(latency), latency_jitter_ms=0.0)
            configs = [("raw openai loop", 1), ("local", 1), *[(f"celery x{k}", k) for k in worker_counts]]
            for label, procs in configs:
                conc = args.threads * procs
                bound = conc / (latency / 1000) if latency else None
                n_jobs = max(50, int(bound * args.seconds_200ms / args.budget)) if bound else args.jobs_0ms
                if label.startswith("raw"):
                    n_calls = n_jobs * args.budget
                    meter = CpuMeter([sim_proc.pid])
                    meter.start()
                    cps = raw_openai(url, conc, n_calls)
                    rows.append((latency, label, conc, None, cps, bound, meter.stop() / n_calls))
                    continue
                reps = -(-n_jobs // n_math)  # replicates of the math suite give enough distinct jobs
                queue = "bench-" + uuid.uuid4().hex[:6]
                name = f"bench-{latency}-{label.replace(' ', '')}-{uuid.uuid4().hex[:6]}"
                src = plan_text(name, tmp / "ledger", args.strategy, args.budget, reps,
                                "local" if label == "local" else "celery", queue, args.threads,
                                args.per_message)  # fmt: skip
                workers = None
                if label != "local":
                    workers = start_celery_workers(
                        procs, redis.url, tmp / f"w-{name}", concurrency=args.threads, queue=queue,
                        env={"EPT_BENCH_KEY": KEY, "EPT_PROFILES": str(tmp / "profiles.toml")},
                    )  # fmt: skip
                try:
                    # Warm-up (imports, connection pools, first tasks on each worker) is not measured.
                    warm = plan_text(name + "-warm", tmp / "ledger", args.strategy, args.budget, 1,
                                     "local" if label == "local" else "celery", queue, args.threads,
                                     args.per_message)  # fmt: skip
                    run_sweep(warm.replace('suites = ["math"]', f'suites = ["math"]\ntasks_per_family = {min(n_math, 2 * conc)}'),
                              profile, redis.url)  # fmt: skip
                    meter = CpuMeter(
                        [sim_proc.pid, redis.proc.pid, *(w.pid for w in (workers.procs if workers else []))]
                    )
                    meter.start()
                    dt, jobs_done, calls = run_sweep(src, profile, redis.url)
                    cpu = meter.stop()
                finally:
                    if workers:
                        workers.stop()
                rows.append((latency, label, conc, jobs_done / dt, calls / dt, bound, cpu / jobs_done))
                print(
                    f"  {latency:>3} ms  {label:<16} {jobs_done} jobs, {calls} calls in {dt:.2f}s", flush=True
                )
    finally:
        stop_proc(redis.proc)
        stop_proc(sim_proc)

    cores = os.cpu_count() or 1
    print(
        f"\nstrategy {args.strategy}@{args.budget}, {args.threads} threads per process, {args.per_message} job(s) per Celery message, file ledger, {cores}-core box\n"
    )
    print(f"{'latency':>7}  {'executor':<16} {'conc':>4} {'jobs/s':>8} {'calls/s':>8} {'bound':>8} {'% bound':>8} {'vs raw':>7}"
          f" {'CPU ms/job':>10} {'CPU cap/s':>9}")  # fmt: skip
    raw = {r[0]: r[4] for r in rows if r[1].startswith("raw")}
    for lat, label, conc, jps, cps, bound, cpu_per in rows:
        pct = f"{100 * cps / bound:.0f}%" if bound else "n/a"
        b = f"{bound:.0f}" if bound else "inf"
        j = f"{jps:.1f}" if jps is not None else "-"
        vs = f"{cps / raw[lat]:.2f}" if raw.get(lat) else "-"
        print(f"{lat:>5}ms  {label:<16} {conc:>4} {j:>8} {cps:>8.1f} {b:>8} {pct:>8} {vs:>7}"
              f" {1000 * cpu_per:>10.2f} {cores / cpu_per:>9.0f}")  # fmt: skip
    print(
        "\nbound = concurrency / latency (Little's law); raw openai loop uses 16 threads (1 process) on the same server;"
    )
    print("'vs raw' = calls/s relative to that loop at the same latency. Target: >= 80% of bound at 200 ms.")
    print(
        "CPU ms/job = CPU of every process involved (coordinator/local executor, workers, redis, simulator) per job"
    )
    print(
        "(per call for the raw loop); CPU cap/s = cores / that: the most this box can run whatever the latency."
    )
    print("A row whose bound is above its CPU cap is limited by this machine's cores, not by the executor.")


if __name__ == "__main__":
    main()
