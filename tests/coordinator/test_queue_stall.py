"""No livelock (issue 26 item 2): a grade queue nobody consumes stops the sweep within two minutes with a
message naming the queue and the cause, no job runs twice meanwhile (requests answered = calls recorded), and
`ept status` says why. Real Redis, real `ept worker` subprocesses, `ept sweep` as a subprocess, the simulator."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest
from fixtures_faults import FAULT_KEY, write_profiles
from fixtures_plans import write_plan_file
from fixtures_services import REPO, start_celery_workers

from elo_per_token.contracts.spent import SPENT_DIR, parse_spent
from elo_per_token.coordinator.consumers import QueueWatch, consumers_by_queue


def _calls_by_job(led, run_id: str) -> Counter:
    """Requests the ledger's call records account for, per job key (job objects and spent objects alike)."""
    out: Counter = Counter()
    lines = [
        json.loads(x) for k in led.list_jobs(run_id) for x in led.get_job(run_id, k).decode().splitlines()
    ]
    for name in led.list_blobs(run_id, SPENT_DIR):
        lines += parse_spent(led.get_blob(run_id, name), name)
    for x in lines:
        if x.get("kind") == "call":
            out[x["job_key"]] += int(x.get("attempts") or 1)
    return out


def _running(redis_server, queue: str) -> bool:
    """Whether a job of the queue is still held by a worker (its claim in Redis: worker.celery_job.Claims)."""
    return bool(list(redis_server.client().scan_iter("ept:claim:stall:*")))


@pytest.mark.services
@pytest.mark.slow
def test_a_grader_that_cannot_start_stops_the_sweep_in_two_minutes_and_nothing_runs_twice(
    tmp_path, redis_server, make_sim
):  # fmt: skip
    from elo_per_token.coordinator.status import run_status
    from elo_per_token.ledger import open_ledger

    sim = make_sim(api_key=FAULT_KEY, seed=4)
    profiles = write_profiles(tmp_path / "profiles.toml", sim.url)
    queue, grade = f"q-{uuid.uuid4().hex[:6]}", f"grade-{uuid.uuid4().hex[:6]}"
    ledger = str(tmp_path / "ledger")
    plan = write_plan_file(tmp_path / "plan.toml", [("greedy", [1]), ("majority", [2])], name="stall",
                           profile="fault-sim", suites=["code"], tasks_per_family=4, seed=3, ledger=ledger,
                           executor="celery", queue=queue, concurrency=2, batch_size=4, bootstrap_rounds=0)  # fmt: skip
    env = {"PYTHONPATH": str(REPO), "EPT_PROFILES": str(profiles), "EPT_SIM_API_KEY": FAULT_KEY,
           "EPT_GRADE_QUEUE": grade, "EPT_GRADE_TIMEOUT": "90", "EPT_BROKER_URL": redis_server.url}  # fmt: skip
    # The grader: its sandbox cannot start (no such Python), so it exits 2 and leaves its reason on the broker.
    g = subprocess.run([sys.executable, "-m", "elo_per_token", "worker", "--queue", grade],
                       env={**env, "EPT_SANDBOX_PYTHON": "/nonexistent/python3", "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert g.returncode == 2 and "cannot run its sandbox" in g.stderr, g.stderr
    workers = start_celery_workers(1, redis_server.url, tmp_path / "w", env=env, concurrency=2, queue=queue)
    try:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "elo_per_token", "sweep", str(plan), "--no-analysis"],
                           env={**__import__("os").environ, **env, "COLUMNS": "200"}, capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)  # fmt: skip
        took = time.monotonic() - t0
        out = p.stdout + p.stderr
        assert p.returncode != 0, out
        assert took < 120, (took, out[-2000:])
        assert repr(grade) in out and "cannot run its sandbox" in out, out[-2000:]
        # The jobs already running end when their grading wait does (EPT_GRADE_TIMEOUT): wait for the ledger.
        led = open_ledger(ledger)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and _running(redis_server, queue):
            time.sleep(2)
    finally:
        workers.stop()
    stats = sim.control.stats()
    recorded = _calls_by_job(led, "stall")
    assert stats["completion_requests"] > 0 and sum(recorded.values()) == stats["completion_requests"], (
        stats,
        recorded,
    )
    # Nothing ran twice: each job's requests at the server are exactly the calls of its one recorded run.
    assert {k: v for k, v in stats["by_job"].items() if v} == dict(recorded)
    st = run_status(led, "stall")
    assert st.stopped and repr(grade) in st.stopped
    shown = subprocess.run([sys.executable, "-m", "elo_per_token", "status", "stall", "--ledger", ledger],
                           env={**__import__("os").environ, **env}, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "stopped" in shown.stdout and grade in shown.stdout, shown.stdout + shown.stderr
    # With the broker at hand, status also says the grade queue has work and nobody consuming it, and why.
    assert f"queue {grade!r}" in shown.stdout and "no worker consuming it" in shown.stdout, shown.stdout
    assert "cannot run its sandbox" in shown.stdout


def test_queue_watch_stops_only_after_the_whole_window_with_work_and_no_consumer():
    state = {"replies": {}, "waiting": 3}
    w = QueueWatch("ept", "grade", inspect=lambda: state["replies"], waiting=lambda q: state["waiting"],
                   reason=lambda q: "bwrap: Can't mount proc" if q == "grade" else None, window=60, every=10)  # fmt: skip
    state["replies"] = {"w1": [{"name": "ept"}]}
    assert w.check(pending=5, now=0) is None
    assert w.check(pending=5, now=5) is None  # not due yet
    assert w.check(pending=5, now=50) is None
    msg = w.check(pending=5, now=61)
    assert msg and "'grade'" in msg and "Can't mount proc" in msg
    # A grader that comes back resets the clock.
    w2 = QueueWatch("ept", "grade", inspect=lambda: state["replies"], waiting=lambda q: 1, reason=lambda q: None,
                    window=60, every=10)  # fmt: skip
    state["replies"] = {"w1": [{"name": "ept"}]}
    assert w2.check(pending=1, now=0) is None
    state["replies"] = {"w1": [{"name": "ept"}], "g1": [{"name": "grade"}]}
    assert w2.check(pending=1, now=30) is None
    state["replies"] = {"w1": [{"name": "ept"}]}
    assert w2.check(pending=1, now=70) is None  # stalled since 70 only
    assert w2.check(pending=1, now=131) and "'grade'" in w2.check(pending=1, now=200)
    # No worker on the job queue: that queue is named.
    w3 = QueueWatch(
        "ept", None, inspect=lambda: {}, waiting=lambda q: 0, reason=lambda q: None, window=60, every=10
    )
    assert w3.check(pending=1, now=0) is None
    assert "'ept'" in (w3.check(pending=1, now=60) or "")
    # An unanswered broadcast (None) is no evidence either way; nothing pending is no stall.
    w4 = QueueWatch(
        "ept", None, inspect=lambda: None, waiting=lambda q: 0, reason=lambda q: None, window=1, every=0
    )
    assert all(w4.check(pending=1, now=t) is None for t in range(10))


def test_queue_lines_name_each_queue_with_work_and_no_consumer():
    from elo_per_token.coordinator.consumers import queue_lines

    waiting = {"ept": 0, "grade": 7}
    w = QueueWatch("ept", "grade", inspect=lambda: {"w1": [{"name": "ept"}]}, waiting=waiting.__getitem__,
                   reason=lambda q: "no sandbox" if q == "grade" else None)  # fmt: skip
    assert queue_lines(w) == ["queue 'grade': 7 message(s) waiting and no worker consuming it "
                              "(a worker failed to start: no sandbox)"]  # fmt: skip
    w.inspect = lambda: {"w1": [{"name": "ept"}, {"name": "grade"}]}
    assert queue_lines(w) == []
    w.inspect = lambda: None  # no answer: nothing claimed
    assert queue_lines(w) == []


def test_consumers_by_queue_reads_any_reply_shape():
    assert consumers_by_queue(None) == {}
    assert consumers_by_queue({"a": [{"name": "ept"}, {"name": "grade"}], "b": [{"name": "ept"}], "c": "junk",
                               "d": [1, {"nom": "x"}, {"name": 5}]}) == {"ept": 2, "grade": 1}  # fmt: skip
