"""The local executor end to end against the real simulator over HTTP: ledger contents, resume, retry,
failure classes, secrets, interruption, and the `ept` commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runner import run_ept
from fixtures_plans import plan_toml, write_plan_file
from fixtures_sim import SIM_KEY

from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.records import CallRecord, JobResult, Outcome
from elo_per_token.coordinator.plan import parse_plan
from elo_per_token.coordinator.sweep import execute
from elo_per_token.ledger import open_ledger

REPO = Path(__file__).resolve().parents[2]


def tiny_run(job: Job, provider) -> JobResult:
    """A minimal job (budget_n calls, answer = first reply) to test the plumbing apart from the strategies."""
    from elo_per_token.egress.errors import ProviderError

    calls, answer = [], None
    try:
        for i in range(job.budget_n):
            r = provider.chat(
                [{"role": "user", "content": str(job.task["prompt"])}],
                seed=job.call_seed(i),
                temperature=0.7,
                meta={"Job": job.key, "Arm": job.arm, "Role": "sample"},
            )
            calls.append(
                CallRecord(
                    call_index=i,
                    role="sample",
                    model=r.model,
                    usage=r.usage,
                    latency_s=r.latency_s,
                    attempts=r.attempts,
                    seed=job.call_seed(i),
                )
            )
            answer = answer or (r.choices[0].text if r.choices else None)
    except ProviderError as e:
        return JobResult(
            job, calls, Outcome(None, None, None, error={"class": e.error_class, "message": e.message})
        )
    score = float(len(answer or "") % 2)
    return JobResult(
        job, calls, Outcome(answer, score, bool(score), {"name": "parity"}), time.time(), time.time()
    )


def tiny_tasks(n: int = 4) -> list[dict]:
    return [
        {
            "task_id": f"{fam}-{i:03d}",
            "family": fam,
            "prompt": f"What is {i} + {len(fam)}?",
            "reference": str(i),
        }
        for fam in ("math", "code")
        for i in range(n)
    ]


def _plan(tmp_path, name="t1", seed=5, **extra) -> object:
    body = plan_toml([("greedy", [1]), ("majority", [2, 3])], name=name, profile="sim-openai", suites=["unused"],
                     seed=seed, ledger=tmp_path / "ledger", concurrency=4, bootstrap_rounds=0)  # fmt: skip
    return parse_plan(body).with_overrides(**extra)


def _jobs(plan, n=4) -> list[Job]:
    from elo_per_token.coordinator.expand import expand

    return expand(plan, tiny_tasks(n))


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("EPT_SIM_API_KEY", SIM_KEY)


def test_local_sweep_writes_every_job_once_and_resumes(tmp_path, make_sim, key_env):
    sim = make_sim(api_key=SIM_KEY)
    plan = _plan(tmp_path)
    jobs = _jobs(plan)
    out = execute(plan, jobs, profile=sim.profile(), run=tiny_run, analyze=False)
    assert out.completed and out.ok
    assert out.tally.done == len(jobs) == 24 and out.tally.failed == 0
    led = open_ledger(tmp_path / "ledger")
    assert led.list_jobs("t1") == {j.key for j in jobs}
    # Each object is exactly a JobResult's JSONL: call lines then one outcome line, all tagged with the job.
    for j in jobs:
        lines = [json.loads(x) for x in led.get_job("t1", j.key).decode().splitlines()]
        assert [x["kind"] for x in lines] == ["call"] * j.budget_n + ["outcome"]
        assert {x["job_key"] for x in lines} == {j.key} and {x["arm"] for x in lines} == {j.arm}
    # Requests per job at the server equal the calls recorded: nothing ran twice.
    stats = sim.control.stats()
    assert stats["by_job"] == {j.key: j.budget_n for j in jobs}
    assert out.tally.calls == sum(j.budget_n for j in jobs)
    tokens = sum(
        JobResult.from_lines(
            [json.loads(x) for x in led.get_job("t1", j.key).decode().splitlines()], j
        ).tokens
        for j in jobs
    )
    assert out.tally.tokens == tokens > 0

    # The manifest describes the run without secrets.
    m = led.get_manifest("t1")
    assert m["n_jobs"] == 24 and m["plan_digest"] == plan.digest and m["profile"]["base_url"] == sim.url
    assert SIM_KEY not in json.dumps(m) and "canary" not in json.dumps(m)

    # Resume: a second run makes no request at all.
    sim.control.reset()
    again = execute(plan, jobs, profile=sim.profile(), run=tiny_run, analyze=False)
    assert again.already_done == 24 and again.tally.done == 0 and sim.control.stats()["requests"] == 0
    assert len(led.get_manifest("t1")["sessions"]) == 2

    # A plan that changes what the run's jobs compute (here the seed) is refused naming the field, before
    # anything runs (coordinator.identity; adding arms or tasks is allowed: tests/coordinator/test_iterate.py).
    from elo_per_token.contracts.errors import InputError

    changed = _plan(tmp_path, seed=6)
    with pytest.raises(InputError) as ei:
        execute(changed, _jobs(changed), profile=sim.profile(), run=tiny_run, analyze=False)
    assert ei.value.field == "seed" and "seed" in ei.value.message


def test_failures_are_classified_retried_and_never_leak_the_key(tmp_path, make_sim, monkeypatch):
    sim = make_sim(api_key=SIM_KEY)
    monkeypatch.setenv("EPT_SIM_API_KEY", "sk-wrong-key-0000000000000000")
    plan = _plan(tmp_path, name="bad-key")
    jobs = _jobs(plan, n=1)
    out = execute(plan, jobs, profile=sim.profile(), run=tiny_run, analyze=False)
    assert not out.ok and out.tally.done == 0
    assert dict(out.tally.failures).keys() == {"credential"} and len(out.tally.failures["credential"]) == len(
        jobs
    )
    led = open_ledger(tmp_path / "ledger")
    assert led.list_jobs("bad-key") == set()
    fails = led.list_failures("bad-key")
    assert set(fails) == {j.key for j in jobs} and {f["class"] for f in fails.values()} == {"credential"}
    assert all(f["attempts"] == 1 for f in fails.values())  # credential errors are not retried
    blob = json.dumps(fails)
    assert "sk-wrong-key-0000000000000000" not in blob and SIM_KEY not in blob

    # `ept retry` semantics: with the key fixed, only the failed jobs run, and their failures disappear.
    from elo_per_token.coordinator.status import failed_jobs, run_status

    monkeypatch.setenv("EPT_SIM_API_KEY", SIM_KEY)
    st = run_status(led, "bad-key")
    assert st.failed == {"credential": len(jobs)} and st.done == 0
    sim.control.reset()
    redo = execute(
        plan, failed_jobs(st), profile=sim.profile(), run=tiny_run, analyze=False, manifest_jobs=st.n_jobs
    )
    assert redo.ok and redo.tally.done == len(jobs)
    st2 = run_status(led, "bad-key")
    assert st2.failed == {} and st2.done == len(jobs) and st2.pending == 0 and st2.n_jobs == len(jobs)


def test_transient_failures_are_retried_then_recorded(tmp_path, make_sim, key_env):
    sim = make_sim(rate_500=1.0)
    plan = _plan(tmp_path, name="flaky")
    jobs = _jobs(plan, n=1)[:2]
    prof = sim.profile(max_retries=0)
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.worker.lifecycle import perform_job

    led = open_ledger(tmp_path / "ledger")
    retried = []
    s = perform_job(
        jobs[0], led, ProviderClient(prof, api_key=SIM_KEY), run=tiny_run, backoff_s=0.01,
        on_retry=lambda j, a, c: retried.append((j.key, a, c)),
    )  # fmt: skip
    assert s["status"] == "failed" and s["class"] == "transient" and s["attempts"] == 3
    assert retried == [(jobs[0].key, 1, "transient"), (jobs[0].key, 2, "transient")]
    assert sim.control.stats()["by_job"] == {jobs[0].key: 3}
    # A job whose code raises is a "task" failure, not retried.
    boom = perform_job(jobs[1], led, None, run=lambda j, p: 1 / 0)
    assert boom["status"] == "failed" and boom["class"] == "task" and "ZeroDivisionError" in boom["message"]
    # The summaries keep to their declared contract (contracts.jobs.JobSummary): every required key, no other.
    from elo_per_token.contracts.jobs import JobSummary

    def answer(j, _p):
        return JobResult(j, [], Outcome("4", 1.0, True))

    again = perform_job(jobs[1], led, None, run=answer)  # a failure object exists, but no job object: it runs
    skipped = perform_job(jobs[1], led, None, run=answer)
    assert (again["status"], skipped["status"]) == ("done", "skipped")
    for summary in (s, boom, again, skipped):
        assert JobSummary.__required_keys__ <= set(summary) <= set(JobSummary.__annotations__), summary
    assert set(again) | {"worker"} == set(JobSummary.__annotations__)  # only the Celery task adds `worker`


def test_egress_failures_stop_the_sweep_early(tmp_path, make_sim, monkeypatch):
    sim = make_sim(api_key=SIM_KEY)
    monkeypatch.setenv("EPT_SIM_API_KEY", "sk-wrong-key-0000000000000000")
    plan = _plan(tmp_path, name="stop-early", concurrency=1)
    jobs = _jobs(plan, n=20)
    out = execute(plan, jobs, profile=sim.profile(), run=tiny_run, analyze=False)
    assert not out.completed
    assert 8 <= out.tally.failed < len(jobs) / 2  # stopped after a handful, not 120 failures


CHILD = """
import os, sys
sys.path[:0] = [{tests!r}, {testkit!r}]  # this test module and the helpers it imports
from test_sweep_local import tiny_run
from elo_per_token.egress.profiles import Profile
from elo_per_token.coordinator.plan import load_plan
from elo_per_token.coordinator.sweep import execute, plan_jobs, print_summary
from elo_per_token.coordinator.expand import expand
from rich.console import Console
plan = load_plan({plan!r})
from test_sweep_local import tiny_tasks
jobs = expand(plan, tiny_tasks({n}))
prof = Profile(name="sim-openai", protocol="openai", base_url={url!r}, api_key_env="EPT_SIM_API_KEY", model="ept-sim-1")
out = execute(plan, jobs, profile=prof, run=tiny_run if {tiny} else None, analyze=False)
print_summary(out, Console())
sys.exit(0 if out.ok else (130 if not out.completed else 1))
"""


def _child(tmp_path, sim, ledger: str, n: int, tiny: bool = True) -> subprocess.Popen:
    plan = tmp_path / f"plan-{Path(ledger).name}.toml"
    write_plan_file(plan, [("greedy", [1]), ("majority", [3])], name="intr", profile="sim-openai", suites=["unused"],
                    seed=9, ledger=ledger, concurrency=3)  # fmt: skip
    script = CHILD.format(
        tests=str(Path(__file__).parent),
        testkit=str(REPO / "testkit"),
        plan=str(plan),
        n=n,
        url=sim.url,
        tiny=tiny,
    )
    env = {**os.environ, "EPT_SIM_API_KEY": SIM_KEY, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _ledger_view(led, run_id):
    """Every job object minus timings: what 'the final ledger' means for equality."""
    view = {}
    for k in led.list_jobs(run_id):
        lines = [json.loads(x) for x in led.get_job(run_id, k).decode().splitlines()]
        for x in lines:
            for t in ("latency_s", "started_at", "finished_at"):
                x.pop(t, None)
        view[k] = lines
    return view


@pytest.mark.slow
def test_interrupted_coordinator_resumes_without_running_a_job_twice(tmp_path, make_sim):
    sim = make_sim(api_key=SIM_KEY, latency_ms=40)
    led_dir = tmp_path / "interrupted"
    led = open_ledger(led_dir)
    n_tasks = 10  # 2 families x 10 tasks x 2 arms = 40 jobs, 80 calls
    p = _child(tmp_path, sim, str(led_dir), n_tasks)
    deadline = time.monotonic() + 60
    while len(led.list_jobs("intr")) < 8 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    out1 = p.communicate(timeout=60)[0].decode()
    assert p.returncode == 130, out1
    assert "interrupted" in out1
    first = led.list_jobs("intr")
    assert 8 <= len(first) < 40
    # Nothing half-done: every job that called the server has its object (in-flight jobs were finished).
    by_job = sim.control.stats()["by_job"]
    assert set(by_job) == first

    p2 = _child(tmp_path, sim, str(led_dir), n_tasks)
    out2 = p2.communicate(timeout=120)[0].decode()
    assert p2.returncode == 0, out2
    assert len(led.list_jobs("intr")) == 40
    # No job ran twice: requests per job at the server == calls in the job's object (1 or 3).
    by_job = sim.control.stats()["by_job"]
    view = _ledger_view(led, "intr")
    assert by_job == {k: sum(1 for x in v if x["kind"] == "call") for k, v in view.items()}
    assert set(by_job.values()) == {1, 3}

    # The final ledger equals an uninterrupted run's (timings aside).
    p3 = _child(tmp_path, sim, str(tmp_path / "straight"), n_tasks)
    out3 = p3.communicate(timeout=120)[0].decode()
    assert p3.returncode == 0, out3
    assert _ledger_view(open_ledger(tmp_path / "straight"), "intr") == view


_ept = run_ept  # the CLI in this process (testkit/cli_runner.py)


def test_cli_bad_plan_exits_2_naming_file_line_field(tmp_path):
    p = tmp_path / "plan.toml"
    p.write_text(
        'name = "x"\nsuites = ["math"]\nreplicates = 0\n[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n'
    )
    r = _ept("sweep", str(p))
    assert r.returncode == 2
    assert f"{p}:3" in r.stderr and "replicates" in r.stderr
    assert not (tmp_path / "ept-out").exists() and not Path("ept-out/ledger/runs/x").exists()


def test_cli_status_and_compact(tmp_path, make_sim, key_env):
    sim = make_sim(api_key=SIM_KEY)
    plan = _plan(tmp_path, name="st")
    jobs = _jobs(plan, n=2)
    execute(plan, jobs[:-3], profile=sim.profile(), run=tiny_run, analyze=False, manifest_jobs=len(jobs))
    led = open_ledger(tmp_path / "ledger")
    led.put_failure(
        "st", jobs[-1].key, {"job": jobs[-1].to_dict(), "class": "endpoint", "message": "404 model"}
    )
    r = _ept("status", "st", "--ledger", str(tmp_path / "ledger"), "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert (st["n_jobs"], st["done"], st["failed"], st["pending"]) == (
        len(jobs),
        len(jobs) - 3,
        {"endpoint": 1},
        2,
    )
    r = _ept("status", "st", "--ledger", str(tmp_path / "ledger"))
    assert r.returncode == 0 and "endpoint" in r.stdout and jobs[-1].key in r.stdout
    r = _ept("status", "nope", "--ledger", str(tmp_path / "ledger"))
    assert r.returncode == 2 and "st" in r.stderr

    r = _ept("compact", "st", "--ledger", str(tmp_path / "ledger"))
    assert r.returncode == 0, r.stderr
    import polars as pl

    # The sweep compacted its results when it finished: nothing new to fold in.
    assert f"0 job objects (0 records) -> no new segment; {len(jobs) - 3} already compacted" in r.stdout
    r = _ept("compact", "st", "--ledger", str(tmp_path / "ledger"), "--rebuild")
    assert r.returncode == 0 and "part-00002.parquet" in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "ledger" / "runs" / "st" / "compact" / "part-00001.parquet").exists()
    df = pl.read_parquet(tmp_path / "ledger" / "runs" / "st" / "compact" / "part-00002.parquet")
    n_calls = sum(j.budget_n for j in jobs[:-3])
    assert df.filter(pl.col("kind") == "call").height == n_calls
    assert df.filter(pl.col("kind") == "outcome").height == len(jobs) - 3
    assert set(df["job_key"].unique()) == {j.key for j in jobs[:-3]}


@pytest.mark.slow
def test_demo_command_end_to_end(tmp_path):
    """`ept demo` (small): simulator in-process, shipped plan, Elo table on stdout, report files, no key shown."""
    r = _ept("demo", "--out", str(tmp_path / "out"), "--tasks-per-family", "3", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "greedy@1" in r.stdout and "majority@8" in r.stdout and "best_of_n@8" in r.stdout
    assert "Elo" in r.stdout
    assert "sk-demo-" not in r.stdout + r.stderr
    led = open_ledger(tmp_path / "out" / "ledger")
    assert led.list_runs() == ["demo-t3"]
    # 3 families x 3 tasks x 9 arms (6 sampling arms, 3 reasoning-effort arms)
    assert len(led.list_jobs("demo-t3")) == 81
    md = (tmp_path / "out" / "report" / "report.md").read_text()
    assert "effort=high" in md and "effort=low" in md and "| reasoning |" in md
    assert (tmp_path / "out" / "report" / "report.md").exists()
    # Running it again resumes: nothing to run.
    r2 = _ept("demo", "--out", str(tmp_path / "out"), "--tasks-per-family", "3")
    assert r2.returncode == 0 and "81 already done" in r2.stdout.replace("\n", " ")


@pytest.mark.slow
def test_cli_sweep_failures_exit_1_then_retry_fixes_them(tmp_path, make_sim):
    """Through `ept`: a wrong key fails every job (grouped as credential, exit 1, key never shown);
    `ept retry` with the key fixed re-runs exactly those jobs."""
    sim = make_sim(api_key=SIM_KEY)
    prof = tmp_path / "profiles.toml"
    prof.write_text(
        f'[profiles.simx]\nprotocol = "openai"\nbase_url = "{sim.url}"\napi_key_env = "EPT_SIMX_KEY"\nmodel = "ept-sim-1"\n'
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'name = "cli"\nprofile = "simx"\nsuites = ["math"]\ntasks_per_family = 3\nledger = "{tmp_path / "led"}"\n'
        'bootstrap_rounds = 0\n[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n[[arms]]\nstrategy = "majority"\nbudgets = [2]\n'
    )
    wrong = "sk-wrong-0000000000000000000000"
    env = {"EPT_PROFILES": str(prof), "EPT_SIMX_KEY": wrong, "COLUMNS": "200"}
    r = _ept("sweep", str(plan), env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "credential" in r.stdout and "ept retry cli" in r.stdout
    assert wrong not in r.stdout + r.stderr
    # Each call was tried once (401 is not retried): 3 greedy calls + 3 x 2 concurrent majority samples.
    assert sim.control.stats()["by_status"] == {"401": 9}

    sim.control.reset()
    r = _ept("retry", "cli", "--ledger", str(tmp_path / "led"), env={**env, "EPT_SIMX_KEY": SIM_KEY})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6 run now" in r.stdout.replace("\n", " ")
    by_job = sim.control.stats()["by_job"]
    assert len(by_job) == 6 and sorted(by_job.values()) == [1, 1, 1, 2, 2, 2]
    r = _ept("status", "cli", "--ledger", str(tmp_path / "led"), "--json")
    assert json.loads(r.stdout)["done"] == 6 and json.loads(r.stdout)["failed"] == {}
