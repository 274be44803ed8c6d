"""Liveness by heartbeat, not by remote control (issue 38): a grader runs with Celery's remote control off, so
the coordinator's broadcast never lists it. A slow-but-working grader (a backlog that stays on its queue for
longer than the window) must not be declared dead; a grader that is not there still is. Real Redis, a real
`ept worker --queue grade-…` subprocess, real grade tasks (candidates that sleep) sent through Celery."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from fixtures_services import REPO, stop_proc

from elo_per_token.coordinator.consumers import QueueWatch, redis_watch
from elo_per_token.worker.heartbeat import heartbeat_key, live_consumers, start_heartbeat

pytestmark = [pytest.mark.services, pytest.mark.slow]

SLOW = "import time\ntime.sleep(4)\ndef f():\n    return 1\n"  # one verdict every ~4 s


def _grader(tmp_path, broker: str, queue: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "EPT_BROKER_URL": broker, "EPT_GRADE_QUEUE": queue,
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "elo_per_token", "worker", "--queue", queue, "--concurrency", "1",
         "--hostname", f"g-{uuid.uuid4().hex[:6]}@127.0.0.1", "--loglevel", "WARNING"],
        stdout=open(tmp_path / "grader.log", "wb"), stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip


def _watch_for(app, queue: str, seconds: float) -> str | None:
    """Run the coordinator's watch (window 3 s, a check per second) for `seconds`; its stop message or None."""
    watch = redis_watch(app, "ept-none", window=3.0)
    watch.grade_queue, watch.every = queue, 1.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (msg := watch.check(pending=0)) is not None:  # only the grade queue is watched here
            return msg
        time.sleep(0.25)
    return None


def test_a_slow_grader_is_alive_and_a_gone_one_is_not(tmp_path, redis_server):
    from elo_per_token.worker.celery_app import make_app
    from elo_per_token.worker.graders.remote import GRADE_TASK

    queue = f"grade-{uuid.uuid4().hex[:6]}"
    r = redis_server.client()
    g = _grader(tmp_path, redis_server.url, queue)
    app = make_app(redis_server.url)
    try:
        deadline = time.monotonic() + 60
        while live_consumers(r, queue) < 1:
            assert g.poll() is None, (tmp_path / "grader.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the grader never wrote its heartbeat"
            time.sleep(0.2)
        # Remote control cannot see it (the old evidence): no reply lists the grade queue. 3 s: under CI's load a
        # 1 s wait let a grader that did answer (EPT_GRADE_QUEUE's queue ran with remote control on) pass unseen.
        replies = app.control.inspect(timeout=3.0).active_queues() or {}
        assert not any(q.get("name") == queue for qs in replies.values() for q in qs), replies
        limits = {"timeout_s": 5.0, "cpu_s": 5, "memory_mb": 512, "nproc": 16, "fsize_mb": 4}
        results = [app.send_task(GRADE_TASK, args=[SLOW, ["assert f() == 1"], "f", limits], queue=queue)
                   for _ in range(6)]  # fmt: skip
        time.sleep(1.0)
        assert r.llen(queue) >= 3  # a backlog that waits longer than the window between two verdicts
        assert _watch_for(app, queue, 8.0) is None  # slow but working: never declared dead
        assert results[0].get(timeout=60)["passed"] == 1  # and it was indeed grading (1 of 1 test passed)
    finally:
        stop_proc(g)
    # Stopped: its key is gone at once; the backlog left on the queue now has no consumer.
    assert live_consumers(r, queue) == 0
    r.delete(queue)
    r.rpush(queue, "x")  # stands for the messages a dead grader leaves (nobody reads them now)
    msg = _watch_for(app, queue, 10.0)
    app.close()
    assert msg is not None and queue in msg and "no grader" in msg


def test_a_grader_never_started_is_still_a_dead_queue(redis_server):
    from elo_per_token.worker.celery_app import make_app

    queue = f"grade-{uuid.uuid4().hex[:6]}"
    r = redis_server.client()
    r.rpush(queue, "x", "y")
    app = make_app(redis_server.url)
    try:
        msg = _watch_for(app, queue, 10.0)
    finally:
        app.close()
    assert msg is not None and queue in msg


def test_a_heartbeat_expires_when_its_process_stops_refreshing(redis_server):
    r = redis_server.client()
    hb = start_heartbeat(r, "grade-hb", "n1", every=0.2, ttl=0.6)
    time.sleep(0.3)
    assert live_consumers(r, "grade-hb") == 1 and r.pttl(heartbeat_key("grade-hb", "n1")) > 0
    hb.stop()
    assert live_consumers(r, "grade-hb") == 0
    # A frozen or killed process: the key is not deleted, only no longer refreshed — it expires.
    r.set(heartbeat_key("grade-hb", "n2"), "1", px=300)
    assert live_consumers(r, "grade-hb") == 1
    time.sleep(0.5)
    assert live_consumers(r, "grade-hb") == 0


def test_a_draining_backlog_is_not_a_dead_queue():
    """No broadcast reply and no heartbeat, but fewer messages at each check: someone is consuming."""
    left = iter([10, 9, 9, 8, 7, 7, 6, 5, 5, 4, 3, 3, 2, 1])
    w = QueueWatch("ept", "grade", inspect=lambda: {}, waiting=lambda q: next(left), reason=lambda q: None,
                   window=25, every=10)  # fmt: skip
    assert all(w.check(pending=0, now=t) is None for t in range(0, 140, 10))
    # The same without progress: stopped after the window.
    w2 = QueueWatch("ept", "grade", inspect=lambda: {}, waiting=lambda q: 5, reason=lambda q: None,
                    window=25, every=10)  # fmt: skip
    assert any(w2.check(pending=0, now=t) for t in range(0, 40, 10))
