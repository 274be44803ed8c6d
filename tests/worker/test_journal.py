"""A worker killed mid-job: the calls it had made are recorded by the job's next delivery (issue 26 item 2:
"a worker's partial calls are recorded"). Real Redis, real `ept worker` subprocesses (one SIGKILLed), the
simulator over HTTP with a scripted hang that holds the job in flight while the worker is killed."""

from __future__ import annotations

import json
import signal
import time

import pytest
from fixtures_faults import FAULT_KEY, fault_rig, wait_until
from fixtures_services import start_celery_workers
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.spent import SPENT_DIR, parse_spent


@pytest.mark.services
@pytest.mark.slow
def test_the_calls_of_a_worker_killed_mid_job_are_recovered_by_the_next_delivery(
    tmp_path, redis_server, make_sim
):
    from elo_per_token.worker.celery_app import make_app

    # Two calls of the job are answered, the third hangs: the job is in flight with 2 billed calls.
    sim = make_sim(api_key=FAULT_KEY, seed=6, script=["ok", "ok", "hang"], hang_s=300.0)
    rig = fault_rig(tmp_path, sim.url, name="journal", ledger=str(tmp_path / "ledger"), per_family=1,
                    timeout=120.0, max_retries=0)  # fmt: skip
    job = next(j for j in rig.jobs if j.strategy == "majority" and j.budget_n == 3)
    rig.record()  # the run's task digests: a worker grades only tasks its run recorded
    first = start_celery_workers(1, redis_server.url, tmp_path / "w1", env=rig.env(), concurrency=2,
                                 queue=rig.plan.queue)  # fmt: skip
    app = make_app(redis_server.url)
    try:
        res = app.send_task("ept.run_job", args=[job.to_dict(), {"ledger": rig.ledger, "base_url": None}],
                            queue=rig.plan.queue)  # fmt: skip

        def two_answered_one_hanging() -> bool:
            st_ = sim.control.stats()
            return st_["requests"] >= 3 and sum(st_["by_status"].values()) >= 2

        wait_until(two_answered_one_hanging, 60, "two answered calls and a hung one")
        first.procs[0].send_signal(signal.SIGKILL)
        first.procs[0].wait(10)
        answered_before = sum(sim.control.stats()["by_status"].values())
        assert answered_before == 2
        led = rig.open_ledger()
        assert not led.list_jobs(rig.run_id) and not led.list_blobs(
            rig.run_id, SPENT_DIR
        )  # nothing recorded yet
        second = start_celery_workers(1, redis_server.url, tmp_path / "w2", env=rig.env(), concurrency=2,
                                      queue=rig.plan.queue)  # fmt: skip
        try:
            out = res.get(timeout=180)  # redelivered after the lease (10 s) and the dead claim (20 s)
        finally:
            second.stop()
    finally:
        app.close()
        first.stop()
    # "skipped": on a loaded machine the 10 s lease can hand the job to the second worker's other slot too; that
    # copy waits on the claim, finds the stored job and reports it (the result backend keeps the last report).
    # Either way the job object must exist and nothing may be paid twice (below).
    assert out["status"] in ("done", "skipped"), out
    answered = sum(sim.control.stats()["by_status"].values())
    job_calls = [json.loads(x) for x in led.get_job(rig.run_id, job.key).decode().splitlines()]
    job_calls = [x for x in job_calls if x["kind"] == "call"]
    lost = [
        x for n in led.list_blobs(rig.run_id, SPENT_DIR) for x in parse_spent(led.get_blob(rig.run_id, n), n)
    ]
    assert len(lost) == 2 and {x["spent_reason"] for x in lost} == {"lost"}
    assert all(x["usage"]["completion_tokens"] > 0 for x in lost)
    assert len(job_calls) + len(lost) == answered == 2 + 3
    # Nothing left on the broker once recovered.
    assert not list(redis_server.client().scan_iter(f"ept:journal*:{rig.run_id}:*"))


_VALUES = st.one_of(st.just("call"), st.just("commit"), st.integers(), st.none(), st.text(max_size=10))
_OBJECTS = st.dictionaries(st.sampled_from(["kind", "arm", "usage", "x"]), _VALUES, max_size=4)
JOURNAL_ENTRIES = st.lists(
    st.one_of(st.binary(max_size=200), st.builds(lambda d: json.dumps(d).encode(), _OBJECTS)), max_size=20
)


@pytest.mark.services
@settings(max_examples=60, deadline=None, derandomize=True)
@given(entries=JOURNAL_ENTRIES)
def test_recover_writes_only_parsable_calls_from_any_journal_bytes(redis_server, entries):
    """Whatever bytes sit in a journal list on the broker (another tool, a truncated write), recovery writes
    only call lines, reads back as a valid spent object, never raises into the job, and is fast."""
    import shutil
    import tempfile
    import uuid

    from elo_per_token.contracts.jobs import Job
    from elo_per_token.ledger import FileLedger
    from elo_per_token.worker.journal import CallJournal

    r = redis_server.client()
    job = Job(f"j{uuid.uuid4().hex[:8]}", {"task_id": "t", "family": "f"}, "greedy", 1)
    attempt = uuid.uuid4().hex
    if entries:
        r.rpush(f"ept:journal:{job.run_id}:{job.key}:{attempt}", *entries)
    r.sadd(f"ept:journals:{job.run_id}:{job.key}", attempt)
    root = tempfile.mkdtemp()
    try:
        led = FileLedger(root)
        t0 = time.perf_counter()
        n = CallJournal(r).recover(led, job)
        assert time.perf_counter() - t0 < 2.0
        names = led.list_blobs(job.run_id, SPENT_DIR)
        calls = [x for name in names for x in parse_spent(led.get_blob(job.run_id, name), name)]
        assert len(calls) == n and all(x["kind"] == "call" for x in calls)
        assert not r.exists(f"ept:journals:{job.run_id}:{job.key}")  # recovered journals are gone
    finally:
        shutil.rmtree(root, ignore_errors=True)


_RUN_IDS = st.text(alphabet=st.sampled_from("ab*?[]\\^:-_x"), min_size=1, max_size=12)


@pytest.mark.services
@settings(max_examples=40, deadline=None, derandomize=True)
@given(run_id=_RUN_IDS, other=_RUN_IDS)
def test_the_end_of_a_sweep_recovers_its_own_runs_free_journals_only(redis_server, run_id, other):
    """worker.journal.recover_run at a sweep's end: any run id (glob characters included) finds its own journals
    only, never another run's; a journal whose claim a live delivery holds is left to it; a free one becomes a
    spent object; bounded in time and memory."""
    import shutil
    import tempfile
    import uuid

    from bounds import bounded

    from elo_per_token.ledger import FileLedger
    from elo_per_token.worker.journal import claim_key, journaled_keys, recover_run

    if other == run_id:
        return
    r = redis_server.client()
    tag = uuid.uuid4().hex[:6]
    run, oth = f"{run_id}{tag}", f"{other}{tag}"
    call = json.dumps({"kind": "call", "arm": "a", "usage": {"prompt_tokens": 1, "completion_tokens": 2}})
    for rid, key in ((run, "free"), (run, "held"), (oth, "free")):
        r.rpush(f"ept:journal:{rid}:{key}:att", call)
        r.sadd(f"ept:journals:{rid}:{key}", "att")
    r.set(claim_key(run, "held"), "a-live-delivery", px=60_000)
    root = tempfile.mkdtemp()
    try:
        assert sorted(journaled_keys(r, run)) == ["free", "held"]
        recovered, held = bounded(lambda: recover_run(r, FileLedger(root), run, wait_s=0.0), 2.0, 20)
        assert (recovered, held) == (1, 1)
        assert r.exists(f"ept:journals:{run}:held") and r.exists(f"ept:journals:{oth}:free")
        assert not r.exists(f"ept:journals:{run}:free") and not r.exists(claim_key(run, "free"))
        assert r.get(claim_key(run, "held")) == b"a-live-delivery"  # a live holder's claim untouched
    finally:
        shutil.rmtree(root, ignore_errors=True)
        for k in r.scan_iter(f"ept:journal*{tag}*"):
            r.delete(k)
        r.delete(claim_key(run, "held"))


@pytest.mark.services
def test_the_end_of_a_sweep_waits_out_a_dead_claim(redis_server, tmp_path):
    """A dead delivery's claim (a lease nobody renews) runs out while the sweep's end waits: its journal is
    recorded then."""
    from elo_per_token.ledger import FileLedger
    from elo_per_token.worker.journal import claim_key, recover_run

    r = redis_server.client()
    call = json.dumps({"kind": "call", "arm": "a", "usage": {"prompt_tokens": 1, "completion_tokens": 2}})
    r.rpush("ept:journal:deadrun:k1:att", call, call)
    r.sadd("ept:journals:deadrun:k1", "att")
    r.set(claim_key("deadrun", "k1"), "dead-worker", px=1500)
    assert recover_run(r, FileLedger(tmp_path), "deadrun", wait_s=0.0) == (0, 1)
    assert recover_run(r, FileLedger(tmp_path), "deadrun", wait_s=10.0) == (2, 0)
    assert list(FileLedger(tmp_path).list_blobs("deadrun", SPENT_DIR)) == ["spent/att.jsonl"]
