"""The distributed sweep with real services: Redis broker, >= 2 Celery worker subprocesses, SeaweedFS S3,
and the simulator over HTTP. The Celery + S3 run must equal the local run job for job."""

from __future__ import annotations

import json
import textwrap
import threading
import time
import uuid

import pytest
from fixtures_plans import plan_toml
from fixtures_services import busy_worker, start_celery_workers
from fixtures_sim import SIM_KEY

from elo_per_token.contracts.records import JobResult
from elo_per_token.coordinator.plan import parse_plan
from elo_per_token.coordinator.sweep import execute, plan_jobs
from elo_per_token.ledger import open_ledger

pytestmark = pytest.mark.services


def plan_text(name: str, tpf: int, ledger: object, executor: str, queue: str) -> str:
    return plan_toml(
        [("greedy", [1]), ("majority", [3]), ("best_of_n", [2])],
        {"rate_limits.sim-test": {"rpm": 1000000, "tpm": 1000000000}},
        name=name, profile="sim-test", suites=["math", "code", "tool_use"], tasks_per_family=tpf, seed=13,
        ledger=ledger, executor=executor, queue=queue, concurrency=8, batch_size=7, bootstrap_rounds=0,
    )  # fmt: skip


def profiles_toml(tmp_path, url: str):
    p = tmp_path / "profiles.toml"
    p.write_text(
        textwrap.dedent(
            f"""\
            [profiles.sim-test]
            protocol = "openai"
            base_url = "{url}"
            api_key_env = "EPT_SIM_API_KEY"
            model = "ept-sim-1"
            timeout = 20
            """
        )
    )
    return p


def comparable(led, run_id: str, jobs) -> dict:
    """Per job: the outcome and every call's usage — everything except timings."""
    out = {}
    for j in jobs:
        r = JobResult.from_lines([json.loads(x) for x in led.get_job(run_id, j.key).decode().splitlines()], j)
        out[j.key] = (
            (r.outcome.answer, r.outcome.score, r.outcome.correct, r.outcome.error),
            [(c.call_index, c.role, c.usage, c.n_requested, c.n_returned, c.seed, c.error) for c in r.calls],
        )
    return out


@pytest.fixture
def celery_setup(tmp_path, redis_server, s3_env, make_sim, monkeypatch, request):
    """A simulator, its profile, and 2 Celery workers on a fresh queue (more worker environment: the test's
    indirect parameter)."""
    pytest.importorskip("elo_per_token.worker.job")
    sim = make_sim(api_key=SIM_KEY)
    prof_file = profiles_toml(tmp_path, sim.url)
    monkeypatch.setenv("EPT_PROFILES", str(prof_file))
    monkeypatch.setenv("EPT_SIM_API_KEY", SIM_KEY)
    queue = "q-" + uuid.uuid4().hex[:8]
    env = {**s3_env.env(), "EPT_PROFILES": str(prof_file), "EPT_SIM_API_KEY": SIM_KEY}
    env.update(getattr(request, "param", {}))
    workers = start_celery_workers(
        2, redis_server.url, tmp_path / "workers", env=env, concurrency=4, queue=queue
    )
    yield sim, queue, workers
    workers.stop()


def test_celery_s3_sweep_equals_local_sweep(tmp_path, celery_setup, s3_bucket, redis_server):
    from elo_per_token.egress.profiles import get_profile

    sim, queue, _ = celery_setup
    celery_plan = parse_plan(
        plan_text(name="eq", tpf=3, ledger=f"s3://{s3_bucket}/ledger", executor="celery", queue=queue)
    )
    local_plan = parse_plan(
        plan_text(name="eq", tpf=3, ledger=tmp_path / "local", executor="local", queue=queue)
    )
    jobs = plan_jobs(celery_plan)
    assert len(jobs) == 9 * 3
    prof = get_profile("sim-test")

    dist = execute(celery_plan, jobs, profile=prof, broker_url=redis_server.url, analyze=True)
    assert dist.ok, (dict(dist.tally.failures), dist.tally.messages)
    by_job_dist = sim.control.stats()["by_job"]
    sim.control.reset()
    local = execute(local_plan, plan_jobs(local_plan), profile=prof, analyze=True)
    assert local.ok
    by_job_local = sim.control.stats()["by_job"]

    s3 = open_ledger(f"s3://{s3_bucket}/ledger")
    fs = open_ledger(tmp_path / "local")
    assert s3.list_jobs("eq") == fs.list_jobs("eq") == {j.key for j in jobs}
    assert comparable(s3, "eq", jobs) == comparable(fs, "eq", jobs)
    # The same requests reached the server, job by job.
    assert by_job_dist == by_job_local
    assert dist.tally.calls == local.tally.calls and dist.tally.tokens == local.tally.tokens
    # Both worker processes ran jobs.
    assert len(dist.tally.workers) == 2 and sum(dist.tally.workers.values()) == len(jobs)
    # Same Elo table (the analysis read S3 for one and a folder for the other).
    assert dist.analysis is not None and local.analysis is not None
    assert dist.analysis.table.drop_nulls().equals(local.analysis.table.drop_nulls()) or (
        dist.analysis.table.to_dicts() == local.analysis.table.to_dicts()
    )
    # The workers drew from the shared Redis bucket of the profile (only the limiter's script creates it).
    assert set(redis_server.client().hgetall("ept:rl:sim-test")) == {b"req", b"tok", b"ts", b"pause"}
    # A rerun enqueues nothing new and calls nothing.
    sim.control.reset()
    again = execute(celery_plan, jobs, profile=prof, broker_url=redis_server.url, analyze=False)
    assert again.already_done == len(jobs) and sim.control.stats()["requests"] == 0


def test_duplicate_messages_never_run_a_job_twice(tmp_path, celery_setup, s3_bucket, redis_server):
    """Every job enqueued three times at once (as after redeliveries): one object, one set of calls."""
    from elo_per_token.egress.profiles import get_profile

    sim, queue, _ = celery_setup
    plan = parse_plan(
        plan_text(name="dup", tpf=1, ledger=f"s3://{s3_bucket}/l", executor="celery", queue=queue)
    )
    jobs = plan_jobs(plan)
    from elo_per_token.contracts.jobs import CeleryJobContext
    from elo_per_token.coordinator.celery_exec import run_celery
    from elo_per_token.coordinator.expand import load_tasks
    from elo_per_token.coordinator.manifest import write_manifest

    # As a coordinator does before it enqueues: the run's task digests, which a worker checks a job against.
    prof = get_profile(plan.profile).public_dict()
    write_manifest(open_ledger(plan.ledger), plan, prof, len(jobs), "celery", tasks=load_tasks(plan))
    results = []
    ctx = CeleryJobContext(ledger=open_ledger(plan.ledger).url)
    run_celery(
        jobs * 3, ctx, queue=queue, batch_size=50, on_result=results.append, broker_url=redis_server.url
    )
    statuses = {}
    for r in results:
        statuses.setdefault(r["key"], []).append(r["status"])
    for j in jobs:
        assert sorted(statuses[j.key]).count("done") + statuses[j.key].count("duplicate") >= 1
        assert statuses[j.key].count("done") == 1
    led = open_ledger(plan.ledger)
    assert led.list_jobs("dup") == {j.key for j in jobs}
    calls = {k: len(v[1]) for k, v in comparable(led, "dup", jobs).items()}
    assert sim.control.stats()["by_job"] == calls


# ---- rate limits shared through Redis -------------------------------------------------------------------


def _limiters(redis_server, name, limits, n=2):
    import redis

    from elo_per_token.worker.ratelimit import RedisRateLimiter

    return [RedisRateLimiter(redis.Redis.from_url(redis_server.url), name, limits) for _ in range(n)]


@pytest.mark.services
def test_redis_rate_limit_requests_are_shared_between_clients(redis_server):
    from elo_per_token.worker.ratelimit import MARGIN, Limits

    a, b = _limiters(redis_server, "rl-req-" + uuid.uuid4().hex[:6], Limits(rpm=6000))
    t0 = time.monotonic()
    threads = [
        threading.Thread(target=lambda lim=lim: [lim.acquire(0) for _ in range(200)]) for lim in (a, b)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    # Paced at MARGIN x 100/s from a bucket of one second's worth: 400 requests from one budget take ~3.1 s
    # (two separate budgets would take ~1.1 s; the old minute-long bucket let all 400 through at once).
    rate = 6000 * MARGIN / 60
    assert (400 - rate) / rate * 0.9 <= elapsed <= (400 - rate) / rate + 1.5, elapsed


@pytest.mark.services
def test_redis_rate_limit_tokens_reserve_then_charge_actual_usage(redis_server):
    from elo_per_token.worker.ratelimit import Limits, LocalRateLimiter

    (r,) = _limiters(redis_server, "rl-tok-" + uuid.uuid4().hex[:6], Limits(tpm=60000), n=1)
    for lim in (r, LocalRateLimiter(Limits(tpm=60000))):
        t0 = time.monotonic()
        for _ in range(5):  # a reservation given back (the call used nothing) is there for the next call
            lim.acquire(900)
            lim.record(0, 900)
        assert time.monotonic() - t0 < 0.5
        lim.acquire(100)
        lim.record(2000, 100)  # the server reported 2000 tokens: two seconds of the budget
        t1 = time.monotonic()
        lim.acquire(100)  # the debt (~1000) and 100 more refill at ~970/s
        waited = time.monotonic() - t1
        assert 0.8 <= waited <= 2.5, waited


def test_an_unlimited_limiter_never_blocks_but_still_shares_a_pause():
    from elo_per_token.worker.ratelimit import Limits, make_rate_limiter

    lim = make_rate_limiter("p", Limits())
    t0 = time.monotonic()
    for _ in range(2000):
        lim.acquire(10_000)
    assert time.monotonic() - t0 < 1.0
    lim.pause(0.3)
    t1 = time.monotonic()
    lim.acquire(0)
    assert 0.25 <= time.monotonic() - t1 <= 1.0 and lim.stats.rate_limited == 1


def test_killed_coordinator_rerun_runs_no_job_twice(tmp_path, celery_setup, s3_bucket, redis_server, s3_env):
    """SIGKILL the Celery coordinator mid-run, rerun it: every job lands once and was called once."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    sim, queue, _ = celery_setup
    sim.control.set(latency_ms=60.0)
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(
        plan_text(name="kill", tpf=4, ledger=f"s3://{s3_bucket}/k", executor="celery", queue=queue)
    )
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "EPT_BROKER_URL": redis_server.url, "PYTHONPATH": str(repo)}
    led = open_ledger(f"s3://{s3_bucket}/k")
    p = subprocess.Popen([sys.executable, "-m", "elo_per_token", "sweep", str(plan_file), "--no-analysis"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 90
    while len(led.list_jobs("kill")) < 5 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    assert len(led.list_jobs("kill")) < 36
    r = subprocess.run([sys.executable, "-m", "elo_per_token", "sweep", str(plan_file), "--no-analysis"], env=env,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    plan = parse_plan(plan_file.read_text())
    jobs = plan_jobs(plan)
    assert led.list_jobs("kill") == {j.key for j in jobs}
    calls = {k: len(v[1]) for k, v in comparable(led, "kill", jobs).items()}
    assert sim.control.stats()["by_job"] == calls


@pytest.mark.slow
def test_killed_worker_jobs_come_back(tmp_path, redis_server, s3_env, s3_bucket, make_sim, monkeypatch):
    """SIGKILL a worker process with jobs in flight: they are delivered again (visibility timeout + restore
    sweep) and the run completes with one object per job."""
    import os
    import signal

    pytest.importorskip("elo_per_token.worker.job")
    from elo_per_token.egress.profiles import get_profile

    sim = make_sim(api_key=SIM_KEY, latency_ms=300)
    prof_file = profiles_toml(tmp_path, sim.url)
    monkeypatch.setenv("EPT_PROFILES", str(prof_file))
    monkeypatch.setenv("EPT_SIM_API_KEY", SIM_KEY)
    queue = "q-" + uuid.uuid4().hex[:8]
    # A short visibility timeout so the test does not wait the production minute.
    env = {
        **s3_env.env(),
        "EPT_PROFILES": str(prof_file),
        "EPT_SIM_API_KEY": SIM_KEY,
        "EPT_VISIBILITY_TIMEOUT": "8",
    }
    ws = start_celery_workers(2, redis_server.url, tmp_path / "w", env=env, concurrency=2, queue=queue)
    try:
        plan = parse_plan(
            plan_text(name="wk", tpf=2, ledger=f"s3://{s3_bucket}/w", executor="celery", queue=queue)
        )
        jobs = plan_jobs(plan)
        box = {}

        def coordinate() -> None:
            box["out"] = execute(
                plan, jobs, profile=get_profile("sim-test"), broker_url=redis_server.url, analyze=False
            )

        t = threading.Thread(target=coordinate)
        t.start()
        led = open_ledger(plan.ledger)
        deadline = time.monotonic() + 60
        # Kill a worker while it runs jobs (asked of the workers themselves), so the check below can see a job
        # cut off and delivered again.
        victim, running = busy_worker(redis_server.url, [p.pid for p in ws.procs], deadline)
        os.kill(victim, signal.SIGKILL)
        cut = running - led.list_jobs("wk")  # the jobs the kill interrupted: not stored when it died
        killed_at = time.monotonic()
        t.join(120)
        if t.is_alive():
            r = redis_server.client()
            diag = {
                "ledger_jobs": len(led.list_jobs("wk")),
                "queue_len": r.llen(queue),
                "unacked": r.hlen("unacked"),
                "mutex": r.get("unacked_mutex"),
                "claims": [k.decode() for k in r.scan_iter("ept:claim:wk:*")],
                "survivor_log": ws.logs[1].read_text()[-1500:],
            }
            pytest.fail(f"sweep did not finish after a worker was killed: {diag}")
        out = box["out"]
        assert out.ok and led.list_jobs("wk") == {j.key for j in jobs}
        assert time.monotonic() - killed_at < 60
        # Jobs that were cut off re-ran from the start on the surviving worker; every other job ran once.
        calls = {k: len(v[1]) for k, v in comparable(led, "wk", jobs).items()}
        by_job = sim.control.stats()["by_job"]
        rerun = {k for k in calls if by_job[k] != calls[k]}
        assert all(by_job[k] > calls[k] for k in rerun)
        assert len(rerun) <= 2  # at most the killed worker's two threads' jobs
        # The kill caught jobs in flight, and they were delivered again and finished (the run is complete):
        # without a job cut off, this test would show nothing about redelivery.
        assert cut, f"the killed worker had finished {running} before it died: nothing to redeliver"
        assert cut <= led.list_jobs("wk")
    finally:
        ws.stop()
