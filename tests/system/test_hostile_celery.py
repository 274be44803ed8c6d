"""Issue 23 item 4 on Celery: a drip, an endless stream, a silent server or a huge body no longer holds a worker's
claim forever. Real Redis, real Celery worker processes, `ept sweep` as a process, the hostile provider over
HTTP with mostly slow attacks: every job ends (scored or failed with a class) within its deadlines, no message is
redelivered to pay again, and the workers are alive at the end."""

from __future__ import annotations

import pytest
from fixtures_faults import FAULT_KEY, fault_rig, tail
from hostile_provider import start_hostile

pytestmark = [pytest.mark.slow, pytest.mark.services]

TIMEOUT_S, RETRIES = 0.5, 1


def test_slow_and_endless_replies_release_celery_workers(tmp_path, redis_server):
    weights = {"ok": 3.0, "drip": 1.0, "header_drip": 1.0, "endless": 1.0, "stall": 1.0, "huge": 1.0}
    h = start_hostile(key=FAULT_KEY, seed=24, weights=weights, huge_mb=16)
    rig = fault_rig(tmp_path, h.url, name="hcel", ledger=str(tmp_path / "ledger"), per_family=5)
    rig.profiles.write_text(
        f'[profiles.fault-sim]\nprotocol = "openai"\nbase_url = "{h.url}"\napi_key_env = "EPT_SIM_API_KEY"\n'
        f'model = "hostile-1"\ntimeout = {TIMEOUT_S}\nmax_retries = {RETRIES}\nmax_response_mb = 1\n'
    )
    workers = rig.start_workers(2, redis_server.url)
    try:
        coord = rig.sweep(redis_server.url)
        rc = coord.wait(timeout=300)
        alive = [p.poll() is None for p in workers.procs]
    finally:
        workers.stop()
        stats = h.stats()
        h.stop()
    assert rc in (0, 1), tail(rig.log)
    assert all(alive), alive
    facts = rig.facts()
    assert facts.lost == 0 and facts.duplicates == 0 and facts.jobs + facts.failed == len(rig.jobs), facts
    assert {"drip", "endless", "stall", "huge"} <= set(stats["served"]), stats["served"]
    assert stats["longest_s"] < TIMEOUT_S + 2.0, stats["longest_s"]
    # Within the visibility timeout (10 s here): no message came back to another worker to be paid again.
    budget = {j.key: j.budget_n for j in rig.jobs}
    assert all(n <= budget[k] * (RETRIES + 1) * 3 for k, n in stats["by_job"].items() if k), stats["by_job"]
