"""An outage inside a Celery sweep (issue 38): the simulator stopped for 45 s mid-sweep and restarted on the
same port. Each worker process's provider client waits it out within the profile's patience
(egress.outage), so the sweep finishes in one `execute` with 0 failed jobs, and the sweep's weather (the
workers' reports, contracts.weather) tells the outage and the time it cost. Real Redis, real `ept worker`
subprocesses, the simulator over HTTP."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import pytest
from cli_runner import run_ept
from fixtures_faults import FAULT_KEY, fault_rig
from fixtures_services import start_celery_workers

from elo_per_token.simulator.control import start_in_thread

pytestmark = [pytest.mark.slow, pytest.mark.services]
OUTAGE_S = 45


def test_a_provider_outage_mid_celery_sweep_fails_no_job(tmp_path, redis_server, make_sim, monkeypatch):
    from rich.console import Console

    from elo_per_token.coordinator.sweep import execute
    from elo_per_token.egress.profiles import get_profile

    sim = make_sim(api_key=FAULT_KEY, latency_ms=50)
    rig = fault_rig(tmp_path, sim.url, name="outage", ledger=str(tmp_path / "ledger"), per_family=6,
                    max_retries=1, patience=120)  # fmt: skip
    rig.use_in_process(monkeypatch)
    ws = start_celery_workers(
        2, redis_server.url, tmp_path / "w", env=rig.env(), concurrency=2, queue=rig.plan.queue
    )
    restarted: list[Any] = []
    status: list[Any] = []
    buf = io.StringIO()  # the progress line's live refreshes
    console = Console(file=buf, force_terminal=True, width=250, color_system=None)

    def outage() -> None:
        while (
            sim.control.stats()["completion_requests"] < 1
        ):  # one worker process has an answer, the other not
            time.sleep(0.05)
        sim.stop()
        t0 = time.monotonic()
        time.sleep(OUTAGE_S / 3)  # every worker thread meets the closed port meanwhile
        # `ept status` from another process says what the progress line says.
        status.append(run_ept("status", rig.run_id, "--ledger", rig.ledger, columns=300))
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - t0)))
        restarted.append(start_in_thread({"api_key": FAULT_KEY, "latency_ms": 50}, port=sim.port))

    t = threading.Thread(target=outage, daemon=True)
    t.start()
    try:
        out = execute(rig.plan, rig.jobs, profile=get_profile("fault-sim"), broker_url=redis_server.url,
                      analyze=False, console=console)  # fmt: skip
        t.join(30)
        after = restarted[0].control.stats()["completion_requests"] if restarted else 0
    finally:
        ws.stop()
        for s in restarted:
            s.stop()
    assert restarted, "the outage never happened"
    assert out.completed and out.tally.failed == 0, (dict(out.tally.failures), out.tally.messages)
    assert out.tally.done + out.tally.skipped == len(rig.jobs)
    assert after > 0  # jobs went on after the restart
    w = out.tally.weather or {}
    assert w.get("outages", 0) >= 1 and OUTAGE_S - 5 <= w.get("outage_s", 0) <= OUTAGE_S + 30, w
    assert w["retries"].get("unreachable", 0) >= 1, w
    # The live progress line said so while the workers waited (their reports, read by the coordinator), and so
    # did `ept status` (the run lease's note).
    live = buf.getvalue()
    assert "provider unreachable since " in live and "waiting (patience 2 min)" in live, live[-2000:]
    assert status and status[0].returncode == 0, status[0].stderr if status else None
    shown = " ".join(status[0].stdout.split())
    assert "running now (" in shown and "provider unreachable since " in shown, status[0].stdout
    assert "waiting (patience 2 min)" in shown, status[0].stdout
