"""Fault: the only Celery worker is SIGKILLed mid-job and the sweep is stopped before the job is delivered
again (issue 38: "journal before send, recovered at the end of the sweep as well as on redelivery"). The calls
the dead delivery was answered are recorded by the time `ept sweep` exits: the simulator's answered calls equal
the calls in the ledger (job objects + spent/). Real Redis, a real `ept worker` and `ept sweep`, the simulator
over HTTP with a scripted hang that holds the job in flight while the worker is killed."""

from __future__ import annotations

import signal

import pytest
from fixtures_faults import FAULT_KEY, fault_rig, tail, wait_until
from fixtures_services import start_celery_workers

pytestmark = [pytest.mark.slow, pytest.mark.services]


def test_calls_of_a_delivery_that_died_are_recorded_by_the_end_of_the_sweep(tmp_path, redis_server, make_sim):
    # Two completions answered, the third hangs: the worker (one thread) is killed holding a paid, unrecorded call
    # (or two, if the first job had a single call and landed).
    sim = make_sim(api_key=FAULT_KEY, seed=6, script=["ok", "ok", "hang"], hang_s=300.0)
    rig = fault_rig(tmp_path, sim.url, name="jend", ledger=str(tmp_path / "ledger"), per_family=1,
                    timeout=120.0, max_retries=0)  # fmt: skip
    worker = start_celery_workers(1, redis_server.url, tmp_path / "w", env=rig.env(), concurrency=1,
                                  queue=rig.plan.queue)  # fmt: skip
    r = redis_server.client()
    try:
        coord = rig.sweep(redis_server.url)

        def two_answered_one_hanging() -> bool:
            st = sim.control.stats()
            return st["requests"] >= 3 and sum(st["by_status"].values()) >= 2

        wait_until(two_answered_one_hanging, 90, "two answered calls and a hung one")
        worker.procs[0].send_signal(signal.SIGKILL)
        worker.procs[0].wait(10)
        answered = sum(sim.control.stats()["by_status"].values())
        assert answered == 2
        assert list(r.scan_iter(f"ept:journals:{rig.run_id}:*")), "the hung job journaled its answered call"
        # The dead worker's claim runs out (20 s lease); nothing delivers the job again before the user stops.
        wait_until(lambda: not list(r.scan_iter(f"ept:claim:{rig.run_id}:*")), 60, "the dead claim to expire")
        coord.send_signal(signal.SIGTERM)
        coord.wait(timeout=60)
    finally:
        worker.stop()
    led = rig.open_ledger()
    facts = rig.facts()
    recorded = facts.calls + facts.spent_calls
    assert recorded == answered, (facts, tail(rig.log))
    assert facts.spent_calls >= 1 and "died mid-job" in rig.log.read_text(), tail(rig.log)
    assert all(r_ == "lost" for r_ in _spent_reasons(led, rig.run_id))
    # Nothing left on the broker once recorded.
    assert not list(r.scan_iter(f"ept:journal*:{rig.run_id}:*"))


def _spent_reasons(led, run_id: str) -> list[str]:
    from elo_per_token.contracts.spent import SPENT_DIR, parse_spent

    return [
        x["spent_reason"]
        for n in led.list_blobs(run_id, SPENT_DIR)
        for x in parse_spent(led.get_blob(run_id, n), n)
    ]
