"""Fault-test rig: a sweep through real services that tests can break on purpose, and the ledger bookkeeping
that says what survived.

Pieces (all real processes on 127.0.0.1; built on fixtures_services / fixtures_sim, not duplicating them):
- `write_suite` / `write_plan` / `write_profiles`: a small sweep whose jobs make real HTTP calls to the simulator.
- `fault_rig`: that sweep wired up (simulator profile, plan, jobs, worker environment) as every fault test needs it.
- Jobs run the product's `worker.job.run_job` (in process and in the Celery worker subprocesses alike).
- `start_redis_on` / `start_weed_on`: Redis and SeaweedFS on FIXED ports and dirs, so a test can stop them and
  start them again where clients expect them (the session fixtures pick new ports on every start).
- `sweep_proc`: `ept sweep PLAN` as a subprocess (the coordinator a user runs; SIGKILL-able).
- `ledger_facts`: jobs, records, duplicate records, lost jobs and tokens per arm, read back from the ledger.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fixtures_plans import write_plan_file
from fixtures_services import (
    REPO,
    TEST_ACCESS_KEY,
    TEST_SECRET_KEY,
    _wait_port,
    free_ports,
    redis_server_path,
    s3_client,
    stop_proc,
    weed_command,
)

TESTS = Path(__file__).resolve().parent
FAULT_KEY = "sk-canary-0123456789abcdefWXYZ"  # the same canary as fixtures_sim.SIM_KEY
JOB_IMPL = "elo_per_token.worker.job.run_job"  # what the jobs run, noted in the reliability rows


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for worker subprocesses: the repo on PYTHONPATH, fast restore of a dead worker's messages
    (visibility timeout 10 s: jobs here take < 2 s)."""
    return {"PYTHONPATH": str(REPO), "EPT_VISIBILITY_TIMEOUT": "10", **(extra or {})}


# ---- the sweep under test ---------------------------------------------------------------------------------


def write_suite(path: Path, per_family: int = 10) -> Path:
    rows = [
        {"task_id": f"{fam}-{i:03d}", "family": fam, "prompt": f"What is {i} + {k}? End with 'Answer: N'.",
         "reference": str(i + k), "grader": {"type": "numeric"}, "difficulty": 0.3}
        for fam, k in (("math", 3), ("logic", 7))
        for i in range(per_family)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ARMS = (("greedy", [1]), ("majority", [2, 3]))


def write_plan(
    path: Path, *, name: str, suite: Path, ledger: str, executor: str = "celery", queue: str = "ept",
    per_family: int = 10, concurrency: int = 4, seed: int = 11, profile: str = "fault-sim",
) -> Path:  # fmt: skip
    return write_plan_file(
        path, ARMS, name=name, profile=profile, suites=[suite], tasks_per_family=per_family, seed=seed, ledger=ledger,
        executor=executor, queue=queue, concurrency=concurrency, batch_size=10, bootstrap_rounds=0,
    )  # fmt: skip


def write_profiles(
    path: Path, base_url: str, timeout: float = 5.0, max_retries: int = 3, supports_n: bool = False,
    patience: float | None = None,
) -> Path:  # fmt: skip
    path.write_text(
        f'[profiles.fault-sim]\nprotocol = "openai"\nbase_url = "{base_url}"\napi_key_env = "EPT_SIM_API_KEY"\n'
        f'model = "ept-sim-1"\ntimeout = {timeout}\nmax_retries = {max_retries}\n'
        f"supports_n = {'true' if supports_n else 'false'}\n"
        + (f"patience = {patience}\n" if patience is not None else "")
    )
    return path


def n_jobs(per_family: int = 10) -> int:
    return 2 * per_family * sum(len(b) for _, b in ARMS)


def sweep_proc(plan: Path, env: dict[str, str], log: Path, *extra: str) -> subprocess.Popen:
    """`ept sweep PLAN` as its own process (stdout+stderr to `log`)."""
    full = {**os.environ, **env, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    full["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", ""), str(REPO)]).strip(os.pathsep)
    return subprocess.Popen(
        [sys.executable, "-m", "elo_per_token", "sweep", str(plan), "--no-analysis", *extra],
        stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=full, cwd=log.parent,
    )  # fmt: skip


@dataclass
class FaultRig:
    """One fault test's sweep: suite, simulator profile, plan and its jobs, written under `tmp`."""

    tmp: Path
    suite: Path
    profiles: Path
    plan_path: Path
    plan: Any
    jobs: list[Any]
    ledger: str
    s3: dict[str, str] = field(default_factory=dict)  # AWS_* variables of the ledger's S3, if it is on S3

    @property
    def run_id(self) -> str:
        return self.plan.run_id

    @property
    def keys(self) -> set[str]:
        return {j.key for j in self.jobs}

    @property
    def log(self) -> Path:
        return self.tmp / "sweep.log"

    def open_ledger(self) -> Any:
        from elo_per_token.ledger import open_ledger

        return open_ledger(self.ledger)

    def record(self) -> None:
        """Write the run's manifest and task digests, as a coordinator does before it enqueues a job: a worker
        grades only tasks the run recorded (worker.taskcheck), so a hand-sent message needs them."""
        from elo_per_token.coordinator.expand import load_tasks
        from elo_per_token.coordinator.manifest import write_manifest
        from elo_per_token.egress.profiles import get_profile

        prof = get_profile(self.plan.profile, str(self.profiles)).public_dict()
        write_manifest(
            self.open_ledger(), self.plan, prof, len(self.jobs), "celery", tasks=load_tasks(self.plan)
        )

    def env(self) -> dict[str, str]:
        """Environment for the workers and `ept sweep` subprocesses: S3, profiles, the simulator's key."""
        return {**self.s3, **worker_env(), "EPT_PROFILES": str(self.profiles), "EPT_SIM_API_KEY": FAULT_KEY}

    def use_in_process(self, monkeypatch: Any) -> None:
        """Point THIS process (local executor) at the rig's profiles and the simulator's key."""
        monkeypatch.setenv("EPT_PROFILES", str(self.profiles))
        monkeypatch.setenv("EPT_SIM_API_KEY", FAULT_KEY)

    def start_workers(self, n: int, broker_url: str) -> Any:
        from fixtures_services import start_celery_workers

        return start_celery_workers(n, broker_url, self.tmp / "w", env=self.env(), concurrency=2,
                                    queue=self.plan.queue)  # fmt: skip

    def sweep(self, broker_url: str) -> subprocess.Popen:
        """`ept sweep` of the rig's plan against `broker_url` (log: `self.log`)."""
        return sweep_proc(self.plan_path, {**self.env(), "EPT_BROKER_URL": broker_url}, self.log)

    def facts(self) -> LedgerFacts:
        return ledger_facts(self.ledger, self.run_id, self.keys)


def fault_rig(
    tmp: Path, sim_url: str, *, name: str, ledger: str, executor: str = "celery", per_family: int = 10,
    concurrency: int = 4, s3: dict[str, str] | None = None, **profile: Any,
) -> FaultRig:  # fmt: skip
    """Write the suite, profiles (`profile`: write_profiles options) and plan; a Celery plan gets a queue of its
    own so workers of other tests never take its messages."""
    from elo_per_token.coordinator.plan import load_plan
    from elo_per_token.coordinator.sweep import plan_jobs

    suite = write_suite(tmp / "suite.jsonl", per_family=per_family)
    profiles = write_profiles(tmp / "profiles.toml", sim_url, **profile)
    queue = f"f{name}-{uuid.uuid4().hex[:8]}" if executor == "celery" else "ept"
    plan_path = write_plan(tmp / "plan.toml", name=name, suite=suite, ledger=ledger, executor=executor, queue=queue,
                           per_family=per_family, concurrency=concurrency)  # fmt: skip
    plan = load_plan(plan_path)
    return FaultRig(tmp, suite, profiles, plan_path, plan, plan_jobs(plan), ledger, dict(s3 or {}))


def wait_until(cond: Any, timeout: float, what: str, poll: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


# ---- services on fixed ports (restartable) ------------------------------------------------------------------


@dataclass
class Restartable:
    args: list[str]
    env: dict[str, str]
    cwd: Path
    port: int
    log: Path
    proc: subprocess.Popen | None = None
    starts: int = 0

    def start(self, ready: Any = None, timeout: float = 60) -> None:
        self.proc = subprocess.Popen(
            self.args, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,  # noqa: SIM115
        )  # fmt: skip
        self.starts += 1
        _wait_port(self.port, timeout, self.proc)
        if ready is not None:
            wait_until(ready, timeout, f"{self.args[0]} ready", poll=0.3)

    def stop(self, sig: int = 15) -> None:
        if self.proc is not None:
            stop_proc(self.proc, sig)


def start_redis_on(tmp: Path, password: str, aof: bool = True) -> Restartable:
    """Redis with an append-only file (fsync always) in `tmp`, so a restart keeps queued and unacked messages,
    as a production broker would be configured."""
    exe = redis_server_path()
    if exe is None:
        import pytest

        pytest.skip("redis-server binary missing")
    tmp.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    args = [exe, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir", str(tmp),
            "--requirepass", password, "--appendonly", "yes" if aof else "no", "--appendfsync", "always"]  # fmt: skip
    r = Restartable(args, dict(os.environ), tmp, port, tmp / "redis.log")
    r.start()
    return r


def redis_url(r: Restartable, password: str) -> str:
    return f"redis://:{password}@127.0.0.1:{r.port}/0"


@dataclass
class Weed(Restartable):
    endpoint: str = ""
    access_key: str = TEST_ACCESS_KEY
    secret_key: str = TEST_SECRET_KEY

    def s3_env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": "us-east-1"}  # fmt: skip

    def client(self) -> Any:
        return s3_client(self.endpoint, self.access_key, self.secret_key)

    def ready(self) -> bool:
        try:
            self.client().list_buckets()
            return True
        except Exception:
            return False


def start_weed_on(tmp: Path) -> Weed:
    """SeaweedFS whose ports and data dir are fixed at the first start, so `stop()` + `start()` restarts it in place."""
    cmd = weed_command(tmp)
    w = Weed(cmd.args, cmd.env, tmp, cmd.s3_port, tmp / "weed.log", endpoint=cmd.endpoint,
             access_key=cmd.access_key, secret_key=cmd.secret_key)  # fmt: skip
    w.start(ready=w.ready)
    return w


# ---- what the ledger says -----------------------------------------------------------------------------------


@dataclass
class LedgerFacts:
    jobs: int  # job objects present
    records: int  # call + outcome lines
    calls: int
    duplicates: int  # job keys or (job, call_index) pairs recorded more than once
    lost: int  # expected jobs with neither a result nor a recorded failure
    failed: int  # expected jobs with a recorded failure and no result
    tokens_by_arm: dict[str, int] = field(default_factory=dict)
    calls_by_job: dict[str, int] = field(default_factory=dict)
    missing_usage: int = 0
    extra_keys: int = 0  # objects under jobs/ that are not expected job keys (e.g. partial uploads)
    # Calls in spent/ objects (contracts.spent): failed attempts, losing copies, journals of killed workers.
    spent_calls: int = 0
    spent_by_job: dict[str, int] = field(default_factory=dict)


def ledger_facts(ledger_url: str, run_id: str, expected_keys: set[str]) -> LedgerFacts:
    from elo_per_token.ledger import open_ledger

    led = open_ledger(ledger_url)
    keys = led.list_jobs(run_id)
    failures = set(led.list_failures(run_id)) - keys
    tokens: dict[str, int] = defaultdict(int)
    per_call: Counter[tuple[str, int]] = Counter()
    per_key: Counter[str] = Counter()
    calls_by_job: dict[str, int] = {}
    records = calls = missing = 0
    for k in sorted(keys):
        lines = [json.loads(x) for x in led.get_job(run_id, k).decode().splitlines() if x.strip()]
        records += len(lines)
        outcomes = [x for x in lines if x["kind"] == "outcome"]
        per_key[k] += len(outcomes)
        n = 0
        for x in lines:
            if x["kind"] != "call":
                continue
            n += 1
            # A billed response that was discarded and retried is an extra record of its call (error class
            # "discarded", same index): not a duplicate.
            if (x.get("error") or {}).get("class") != "discarded":
                per_call[(x["job_key"], x["call_index"])] += 1
            u = x.get("usage")
            if u is None:
                missing += 1
            elif x.get("role") != "judge":
                tokens[x["arm"]] += int(u.get("prompt_tokens", 0)) + int(u.get("completion_tokens", 0))
        calls += n
        calls_by_job[k] = n
    dups = sum(c - 1 for c in per_key.values() if c > 1) + sum(c - 1 for c in per_call.values() if c > 1)
    spent_by_job = _spent_by_job(led, run_id)
    return LedgerFacts(
        jobs=len(keys & expected_keys), records=records, calls=calls, duplicates=dups,
        lost=len(expected_keys - keys - failures), failed=len((expected_keys - keys) & failures),
        tokens_by_arm=dict(tokens), calls_by_job=calls_by_job, missing_usage=missing,
        extra_keys=len(keys - expected_keys), spent_calls=sum(spent_by_job.values()), spent_by_job=spent_by_job,
    )  # fmt: skip


def _spent_by_job(led: Any, run_id: str) -> dict[str, int]:
    from elo_per_token.contracts.spent import SPENT_DIR, parse_spent

    out: Counter[str] = Counter()
    for name in led.list_blobs(run_id, SPENT_DIR):
        for x in parse_spent(led.get_blob(run_id, name) or b"", name):
            out[str(x.get("job_key"))] += 1
    return dict(out)


def tail(path: Path, n: int = 3000) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-n:]
    return ""


# ---- measurements for docs/reliability.md (benchmarks/reliability_table.py) --------------------------------


def recording() -> bool:
    return bool(os.environ.get("EPT_RELIABILITY_OUT"))


def clean_tokens(
    tmp: Path, suite: Path, per_family: int, sim_seed: int, supports_n: bool = False
) -> dict[str, int]:
    """Tokens per arm of the same plan (seed 11) run cleanly: local executor, fresh fault-free simulator."""
    from fixtures_sim import _start

    from elo_per_token.coordinator.plan import load_plan
    from elo_per_token.coordinator.sweep import execute, plan_jobs
    from elo_per_token.egress.profiles import get_profile

    sim = _start(api_key=FAULT_KEY, seed=sim_seed)
    old = os.environ.get("EPT_SIM_API_KEY")
    os.environ["EPT_SIM_API_KEY"] = FAULT_KEY
    try:
        prof = get_profile(
            "fault-sim", write_profiles(tmp / "clean-profiles.toml", sim.url, supports_n=supports_n)
        )
        plan = load_plan(write_plan(tmp / "clean-plan.toml", name="clean", suite=suite, ledger=str(tmp / "clean-ledger"),
                                    executor="local", per_family=per_family))  # fmt: skip
        jobs = plan_jobs(plan)
        from rich.console import Console

        out = execute(plan, jobs, profile=prof, analyze=False, console=Console(file=open(os.devnull, "w")))  # noqa: SIM115
        assert out.ok
        return ledger_facts(str(tmp / "clean-ledger"), "clean", {j.key for j in jobs}).tokens_by_arm
    finally:
        sim.stop()
        if old is None:
            os.environ.pop("EPT_SIM_API_KEY", None)
        else:
            os.environ["EPT_SIM_API_KEY"] = old


def record(
    fault: str, injected: str, facts: LedgerFacts, expected: int, sim_requests: int,
    clean: dict[str, int] | None, notes: str = "",
) -> None:  # fmt: skip
    """Write one measured row for the reliability table (only under benchmarks/reliability_table.py)."""
    out = os.environ.get("EPT_RELIABILITY_OUT")
    if not out:
        return
    row = {
        "fault": fault, "injected": injected, "jobs": expected, "jobs_in_ledger": facts.jobs, "records": facts.records,
        "calls": facts.calls, "duplicates": facts.duplicates, "lost": facts.lost, "failed": facts.failed,
        "requests_at_simulator": sim_requests, "tokens": sum(facts.tokens_by_arm.values()),
        "tokens_clean": sum(clean.values()) if clean is not None else None,
        "tokens_match_clean": (facts.tokens_by_arm == clean) if clean is not None else None,
        "missing_usage_calls": facts.missing_usage, "job_impl": JOB_IMPL, "notes": notes,
    }  # fmt: skip
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / (fault.split()[0].strip(":") + ".json")).write_text(json.dumps(row, indent=1))
