"""Several jobs per Celery message (issue 39: the plan's `jobs_per_message`, worker.celery_batch): the packing,
the reading of a batch result (anything the broker holds), and what a batch message does on real workers —
every job once, the same results as one message per job, the jobs a batch did not start sent again, a batch
delivered twice running nothing twice."""

from __future__ import annotations

import time
import uuid

import pytest
from bounds import bounded_pure
from fixtures_plans import plan_toml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sweep_celery import celery_setup, comparable, plan_text  # noqa: F401  (celery_setup is a fixture)

from elo_per_token.contracts.jobs import CeleryJobContext, Job
from elo_per_token.coordinator.celery_batches import BATCH_TASK, pack, read_batch
from elo_per_token.coordinator.plan import parse_plan
from elo_per_token.coordinator.sweep import execute, plan_jobs
from elo_per_token.ledger import open_ledger


def _jobs(n: int) -> list[Job]:
    return [
        Job(run_id="b", task={"task_id": f"math-{i}", "family": "math"}, strategy="greedy", budget_n=1)
        for i in range(n)
    ]


def _failed(key: str, message: str) -> dict:
    return {"key": key, "status": "failed", "class": "transient", "message": message, "calls": 0, "tokens": 0}


@given(n=st.integers(1, 60), k=st.integers(1, 70), clear=st.sets(st.integers(0, 59)))
def test_packing_keeps_order_size_and_one_context_per_message(n, k, clear):
    jobs = _jobs(n)
    keys = {jobs[i].key for i in clear if i < n}
    messages = list(pack(jobs, k, lambda j: j.key in keys))
    assert [j for m in messages for j in m] == jobs  # every job once, in order
    assert all(1 <= len(m) <= k for m in messages)
    assert all(len({j.key in keys for j in m}) == 1 for m in messages)  # one context per message
    if not keys:
        assert len(messages) == -(-n // k)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=10), inner, max_size=8),
    max_leaves=60,
)


@settings(max_examples=300, deadline=None)
@given(
    payload=_JSON | st.fixed_dictionaries({"summaries": st.lists(_JSON, max_size=70)}), n=st.integers(1, 64)
)
def test_any_batch_result_reports_each_job_once_and_only_as_itself(payload, n):
    """A result entry is read from a broker anyone with its password can write to: whatever it holds, each job
    of the message is reported exactly once (its summary, a failure, or sent again), under its own key, fast."""
    jobs = _jobs(n)
    summaries, deferred = bounded_pure(lambda: read_batch(payload, jobs, _failed), 0.5, 20)
    assert [s["key"] for s in summaries] + [j.key for j in deferred] == [j.key for j in jobs]


def test_a_batch_result_is_read_in_order_and_the_rest_is_sent_again():
    jobs = _jobs(4)
    ok = [{"key": j.key, "status": "done", "calls": 1, "tokens": 5} for j in jobs]
    summaries, deferred = read_batch({"summaries": ok[:2], "deferred": 2}, jobs, _failed)
    assert summaries == ok[:2] and deferred == jobs[2:]
    swapped, rest = read_batch({"summaries": [ok[1], ok[0]]}, jobs, _failed)
    assert [s["status"] for s in swapped] == ["failed", "failed"] and rest == jobs[2:]
    refused, none = read_batch(["not", "a", "batch"], jobs, _failed)
    assert [s["key"] for s in refused] == [j.key for j in jobs] and not none


def _batched(
    name: str, ledger: str, queue: str, per_message: int, tpf: int = 3, arms=None, suites=None
) -> str:
    return plan_toml(
        arms or [("greedy", [1]), ("majority", [3]), ("best_of_n", [2])],
        {"rate_limits.sim-test": {"rpm": 1000000, "tpm": 1000000000}},
        name=name, profile="sim-test", suites=suites or ["math", "code", "tool_use"], tasks_per_family=tpf,
        seed=13, ledger=ledger, executor="celery", queue=queue, concurrency=8, batch_size=7,
        jobs_per_message=per_message, bootstrap_rounds=0,
    )  # fmt: skip


@pytest.mark.services
def test_a_batched_sweep_equals_a_local_one_job_for_job(
    tmp_path,
    celery_setup,  # noqa: F811  (the fixture imported above)
    s3_bucket,
    redis_server,
):
    from elo_per_token.egress.profiles import get_profile

    sim, queue, _ = celery_setup
    plan = parse_plan(_batched("bat", f"s3://{s3_bucket}/l", queue, 4))
    assert plan.jobs_per_message == 4
    jobs = plan_jobs(plan)
    prof = get_profile("sim-test")
    dist = execute(plan, jobs, profile=prof, broker_url=redis_server.url, analyze=False)
    assert dist.ok, (dict(dist.tally.failures), dist.tally.messages)
    by_job_dist = sim.control.stats()["by_job"]
    sim.control.reset()
    local_plan = parse_plan(
        plan_text(name="bat", tpf=3, ledger=tmp_path / "loc", executor="local", queue=queue)
    )
    local = execute(local_plan, plan_jobs(local_plan), profile=prof, analyze=False)
    s3, fs = open_ledger(f"s3://{s3_bucket}/l"), open_ledger(tmp_path / "loc")
    assert s3.list_jobs("bat") == fs.list_jobs("bat") == {j.key for j in jobs}
    assert comparable(s3, "bat", jobs) == comparable(fs, "bat", jobs)
    assert by_job_dist == sim.control.stats()["by_job"]  # the same requests, job by job: nothing twice
    assert dist.tally.calls == local.tally.calls and dist.tally.done == len(jobs)
    # One ran marker per job: a job of a batch leaves its own (task id # place in the message); a job a batch
    # handed back (its 1 s window over, as under a loaded machine) was sent again alone (task id only).
    marks = [k.decode() for k in redis_server.client().scan_iter("ept:ran:bat:*", count=1000)]
    assert len(marks) == len(jobs) and any("#" in m for m in marks)


@pytest.mark.services
@pytest.mark.parametrize("celery_setup", [{"EPT_VISIBILITY_TIMEOUT": "5"}], indirect=True)
def test_a_batch_of_slow_jobs_runs_one_and_hands_the_rest_back(
    tmp_path,
    celery_setup,  # noqa: F811  (the fixture imported above)
    s3_bucket,
    redis_server,
):
    """A batch starts jobs within 1 s (here also a fifth of a 5 s lease). Jobs of 1.2 s: each batch runs its
    first job only, and the coordinator sends the others again one message each; every job runs once."""
    from elo_per_token.egress.profiles import get_profile

    sim, queue, _ = celery_setup
    sim.control.set(latency_ms=1200.0, latency_jitter_ms=0.0)
    plan = parse_plan(_batched("slow", f"s3://{s3_bucket}/l", queue, 4, 4, [("greedy", [1])], ["math"]))
    jobs = plan_jobs(plan)
    assert len(jobs) == 4
    t0 = time.monotonic()
    out = execute(plan, jobs, profile=get_profile("sim-test"), broker_url=redis_server.url, analyze=False)
    assert out.ok and out.tally.done == 4, (dict(out.tally.failures), out.tally.messages)
    assert sim.control.stats()["requests"] == 4  # one call per job: none ran twice
    marks = sorted(k.decode() for k in redis_server.client().scan_iter("ept:ran:slow:*", count=1000))
    assert len(marks) == 4
    assert sum(m.endswith("#0") for m in marks) == 1 and sum("#" not in m for m in marks) == 3, marks
    assert time.monotonic() - t0 < 30


@pytest.mark.services
def test_a_batch_delivered_twice_runs_nothing_twice_and_a_bad_job_fails_alone(
    tmp_path,
    celery_setup,  # noqa: F811  (the fixture imported above)
    s3_bucket,
    redis_server,
):
    from elo_per_token.worker.celery_app import make_app

    sim, queue, _ = celery_setup
    plan = parse_plan(_batched("twice", f"s3://{s3_bucket}/l", queue, 3, tpf=1))
    jobs = plan_jobs(plan)[:2]
    from elo_per_token.coordinator.expand import load_tasks
    from elo_per_token.coordinator.manifest import write_manifest
    from elo_per_token.egress.profiles import get_profile

    # As a coordinator does before it enqueues: the run's task digests, which a worker checks a job against.
    prof = get_profile(plan.profile).public_dict()
    write_manifest(open_ledger(plan.ledger), plan, prof, len(jobs), "celery", tasks=load_tasks(plan))
    ctx = CeleryJobContext(ledger=open_ledger(plan.ledger).url).to_dict()
    app = make_app(redis_server.url)
    tid = f"twice:{uuid.uuid4().hex}"
    args = [[jobs[0].to_dict(), {"key": "x" * 5000, "task": 3}, jobs[1].to_dict()], ctx]
    first = app.send_task(BATCH_TASK, args=args, task_id=tid, queue=queue).get(timeout=60)
    assert [s["status"] for s in first["summaries"]] == ["done", "failed", "done"], first
    assert first["deferred"] == 0
    assert (
        first["summaries"][1]["message"].startswith("worker error:")
        and len(first["summaries"][1]["key"]) <= 200
    )
    calls = sim.control.stats()["requests"]
    again = app.send_task(BATCH_TASK, args=args, task_id=tid, queue=queue).get(timeout=60)
    assert [s["status"] for s in again["summaries"]] == ["done", "failed", "done"]
    assert sim.control.stats()["requests"] == calls  # the ran markers of the first delivery answered
    with pytest.raises(Exception, match=r"1\.\.64 jobs"):
        app.send_task(BATCH_TASK, args=[[], ctx], queue=queue).get(timeout=60)
    app.close()
