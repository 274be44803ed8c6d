"""A job's task comes from the run, not from the message (issue 36 item 4), and a garbage identity file is
refused with its file named (item 11). A broker-password holder sent the victim's job with its `reference`
changed from 54 to 5: it was graded and stored as score 1.0, and the victim's next sweep counted it "already
done". Now the worker refuses it and writes nothing; analysis refuses an outcome whose task digest is not the
run's; a garbage task record stops the extension of a run (and the worker) instead of switching the check off.

Real Redis and a real `ept worker` subprocess, the simulator over HTTP; the local path without services."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bounds import bounded
from fixtures_faults import FAULT_KEY, REPO, fault_rig
from fixtures_services import start_celery_workers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.records import CallRecord, JobResult, Outcome
from elo_per_token.contracts.taskdigest import run_task_digests, task_digest
from elo_per_token.worker.lifecycle import perform_job
from elo_per_token.worker.taskcheck import ForgedTask, RunTasks


def _forged(job: Job, reference: str = "5") -> Job:
    return Job.from_dict({**job.to_dict(), "task": {**job.task, "reference": reference}})


def _ledger_is_empty(led, run_id: str) -> bool:
    return (
        not led.list_jobs(run_id) and not led.list_failures(run_id) and not led.list_blobs(run_id, "spent/")
    )


@pytest.mark.services
def test_a_forged_run_job_message_is_refused_and_writes_nothing(
    tmp_path, redis_server, make_sim, monkeypatch
):
    from elo_per_token.coordinator.sweep import execute, resolve_profile
    from elo_per_token.worker.celery_app import make_app

    sim = make_sim(api_key=FAULT_KEY, seed=3)
    rig = fault_rig(
        tmp_path, sim.url, name="forged", ledger=str(tmp_path / "ledger"), per_family=1, max_retries=0
    )
    rig.record()  # the victim's coordinator: manifest and task digests, before it enqueues anything
    ws = start_celery_workers(1, redis_server.url, tmp_path / "w", env={**rig.env(), "EPT_WORKER_LEDGERS": rig.ledger},
                              concurrency=2, queue=rig.plan.queue)  # fmt: skip
    app = make_app(redis_server.url)
    try:
        job = rig.jobs[0]
        forged = _forged(job)
        ctx = {"ledger": rig.ledger, "base_url": None}
        out = app.send_task("ept.run_job", args=[forged.to_dict(), ctx], queue=rig.plan.queue).get(timeout=60)
        assert out["status"] == "failed" and "differs from the one run" in out["message"], out
        # A task the run never had, under a key of its own: refused as well.
        alien = Job.from_dict({**job.to_dict(), "task": {**job.task, "task_id": "math-999"}})
        out2 = app.send_task("ept.run_job", args=[alien.to_dict(), ctx], queue=rig.plan.queue).get(timeout=60)
        assert out2["status"] == "failed" and "is not one of run" in out2["message"], out2
        assert sim.control.stats()["requests"] == 0  # nothing was sent to the provider
        assert _ledger_is_empty(rig.open_ledger(), rig.run_id)
        # The genuine message runs, and its outcome carries the digest of the run's task.
        ok = app.send_task("ept.run_job", args=[job.to_dict(), ctx], queue=rig.plan.queue).get(timeout=60)
        assert ok["status"] == "done", ok
        lines = [json.loads(x) for x in rig.open_ledger().get_job(rig.run_id, job.key).splitlines()]
        assert [x["task_digest"] for x in lines if x["kind"] == "outcome"] == [task_digest(job.task)]
    finally:
        app.close()
        ws.stop()
    # The victim's next sweep (local executor) counts only the genuine job as done and runs every other one.
    rig.use_in_process(monkeypatch)
    plan = rig.plan.with_overrides(executor="local")
    res = execute(plan, None, profile=resolve_profile(plan, None, str(rig.profiles)), analyze=False)
    assert res.ok and res.already_done == 1 and res.tally.done == len(rig.jobs) - 1


def _recorded_run(tmp_path: Path):
    from elo_per_token.coordinator.manifest import write_manifest
    from elo_per_token.ledger import FileLedger

    rig = fault_rig(tmp_path, "http://127.0.0.1:9/v1", name="local-forged", ledger=str(tmp_path / "ledger"),
                    executor="local", per_family=1)  # fmt: skip
    led = FileLedger(rig.ledger)
    write_manifest(led, rig.plan, {"name": "p", "model": "m"}, len(rig.jobs), "local",
                   tasks=list({j.task_id: j.task for j in rig.jobs}.values()))  # fmt: skip
    return rig, led


def _answer(job: Job, _provider) -> JobResult:
    call = CallRecord(call_index=0, role="sample", model="m", usage={"prompt_tokens": 10, "completion_tokens": 5},
                      latency_s=0.1, attempts=1)  # fmt: skip
    return JobResult(job, [call], Outcome("54", 1.0, True, {"grader": "numeric"}))


def test_the_local_executor_refuses_a_forged_task_before_running_it(tmp_path):
    rig, led = _recorded_run(tmp_path)
    ran: list[str] = []

    def run(job: Job, provider) -> JobResult:
        ran.append(job.key)
        return _answer(job, provider)

    job = rig.jobs[0]
    out = perform_job(_forged(job), led, None, run=run, tasks=RunTasks())
    assert out["status"] == "failed" and out["class"] == "permanent" and "reference" in out["message"]
    assert ran == [] and _ledger_is_empty(led, rig.run_id)
    ok = perform_job(job, led, None, run=run, tasks=RunTasks())
    assert ok["status"] == "done" and ran == [job.key]


def test_a_run_without_a_record_of_its_tasks_grades_nothing(tmp_path):
    from elo_per_token.ledger import FileLedger

    led = FileLedger(tmp_path / "ledger")
    job = Job("r", {"task_id": "t", "family": "f", "prompt": "p", "reference": "1", "grader": {"type": "numeric"}},
              "greedy", 1)  # fmt: skip
    with pytest.raises(ForgedTask, match="records no task digests"):
        RunTasks().verify(led, job)


def _analyze(target: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "elo_per_token", "analyze", target, "--rounds", "0", "--no-plots",
                           *extra], capture_output=True, text=True, env=env, timeout=300)  # fmt: skip


@pytest.mark.parametrize("compacted", [False, True])
def test_analysis_refuses_an_outcome_of_another_task(tmp_path, compacted):
    """A job object whose outcome graded another task (written by an old worker, or by hand): refused naming
    the object, the line and task_digest; with --skip-bad its job is left out and reported. Also once the
    objects are folded into a segment."""
    from elo_per_token.ledger.segments import compact_run

    rig, led = _recorded_run(tmp_path)
    for i, job in enumerate(rig.jobs):
        res = _answer(job, None)
        res.task_digest = task_digest(_forged(job).task) if i == 0 else task_digest(job.task)
        assert led.put_job(rig.run_id, job.key, res.to_jsonl())
    if compacted:
        assert compact_run(led, rig.run_id).jobs == len(rig.jobs)
    run_url = led.run_url(rig.run_id)
    bad = _analyze(run_url)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert f"{rig.jobs[0].key}.jsonl:2: field 'task_digest'" in bad.stderr and "forged" in bad.stderr, (
        bad.stderr
    )
    skipped = _analyze(run_url, "--skip-bad")
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "task_digest" in skipped.stdout + skipped.stderr


def test_a_garbage_identity_file_is_refused_naming_it(tmp_path, monkeypatch):
    """Item 11: the run's task record replaced by garbage. Extending the run with a changed task was allowed
    (the record read as "no tasks known"); now it is refused naming the file, and a worker grades nothing."""
    from elo_per_token.coordinator.manifest import write_manifest

    rig, led = _recorded_run(tmp_path)
    blob = led.get_manifest(rig.run_id)["identity"]["tasks_blob"]
    led.put_blob(rig.run_id, blob, b"\x00not json")
    changed = [_forged(rig.jobs[0]).task]
    with pytest.raises(InputError) as e:
        write_manifest(led, rig.plan, {"name": "p", "model": "m"}, 1, "local", tasks=changed)
    assert e.value.file == led.blob_url(rig.run_id, blob) and "not JSON" in e.value.message
    with pytest.raises(ForgedTask, match="unreadable"):
        RunTasks().verify(led, rig.jobs[0])
    led.delete_blob(rig.run_id, blob)  # named by the manifest, but gone: refused too, not "no tasks known"
    with pytest.raises(InputError, match="missing"):
        write_manifest(led, rig.plan, {"name": "p", "model": "m"}, 1, "local", tasks=changed)
    led.put_blob(rig.run_id, blob, json.dumps({"math/math-000": 7}).encode())
    with pytest.raises(InputError) as e2:
        run_task_digests(led, rig.run_id)
    assert e2.value.field == "math/math-000"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    reference=st.text(max_size=200),
    extra=st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=3),
)
def test_any_change_to_a_task_is_refused_in_bounded_time(tmp_path_factory, reference, extra):
    """Whatever a message changes in the task (the reference, or fields added), the worker grades it only if it
    is exactly the recorded task."""
    rig, led = _recorded_run(tmp_path_factory.mktemp("forge"))
    job = rig.jobs[0]
    task = {**job.task, "reference": reference, **extra}
    msg = Job.from_dict({**job.to_dict(), "task": task})
    tasks = RunTasks()

    def check() -> bool:
        try:
            tasks.verify(led, msg)
            return True
        except ForgedTask:
            return False

    assert bounded(check, 1.0, 20) == (task_digest(task) == task_digest(job.task))
