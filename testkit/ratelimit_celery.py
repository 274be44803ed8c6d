"""The rate-limit measurement of testkit/ratelimit_clients.py for a Celery sweep: 2 `ept worker` processes × 4
threads on a real Redis (their limiter's buckets and the provider's stated room shared there), the coordinator in
this process, the simulator behind testkit/ratelimit_proxy.py. Wall time is the proxy's span (first request to
last reply): the workers' start-up and the coordinator's bookkeeping are not the limiter's time."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fixtures_faults import FAULT_KEY, fault_rig
from fixtures_services import start_celery_workers
from ratelimit_clients import schedule_row
from ratelimit_proxy import RateLimitProxy


def _env(rig: Any) -> dict[str, str | None]:
    """Point this process (the coordinator) at the rig's profiles; the previous values, to restore."""
    new = {"EPT_PROFILES": str(rig.profiles), "EPT_SIM_API_KEY": FAULT_KEY}
    old = {k: os.environ.get(k) for k in new}
    os.environ.update(new)
    return old


def measure_celery(sim_url: str, client: str, redis_url: str, tmp: Path, *, rpm: int, tpm: int, window_s: float,
                   per_family: int, workers: int = 2, threads: int = 4, free: float | None = None,
                   latency_s: float = 0.0) -> dict[str, Any]:  # fmt: skip
    """One Celery sweep ("celery-limits": rpm/tpm on the profile; "celery-headers": none; "celery-free": no
    limits at the proxy, for the sweep's own pace) through a fresh proxy: its 429s and span as a share of the
    schedules the limits allow."""
    import redis

    from elo_per_token.coordinator.sweep import execute
    from elo_per_token.egress.profiles import get_profile

    tmp.mkdir(parents=True, exist_ok=True)
    unlimited = client == "celery-free"
    proxy = RateLimitProxy(sim_url, rpm=10**9 if unlimited else rpm, tpm=10**12 if unlimited else tpm,
                           window_s=window_s).start()  # fmt: skip
    rig = fault_rig(tmp, proxy.url, name=client, ledger=str(tmp / "ledger"), per_family=per_family,
                    concurrency=workers * threads, max_retries=8, timeout=60)  # fmt: skip
    if client == "celery-limits":
        rig.profiles.write_text(rig.profiles.read_text() + f"rpm = {rpm}\ntpm = {tpm}\n")
    r = redis.Redis.from_url(redis_url)
    for k in r.scan_iter("ept:rl:*"):  # a previous measurement's buckets, room and learned pause
        r.delete(k)
    old = _env(rig)
    ws = start_celery_workers(workers, redis_url, tmp / "w", env=rig.env(), concurrency=threads,
                              queue=rig.plan.queue)  # fmt: skip
    try:
        out = execute(
            rig.plan, rig.jobs, profile=get_profile("fault-sim"), broker_url=redis_url, analyze=False
        )
    finally:
        ws.stop()
        proxy.stop()
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    if not out.completed or out.tally.failed:
        raise RuntimeError(f"{client}: the sweep did not finish cleanly: {dict(out.tally.failures)}")
    ok = proxy.stats["ok"]
    if unlimited:
        return {"client": client, "calls": ok, "calls_per_s": round(ok / proxy.span_s(), 1)}
    return schedule_row(client, proxy.stats, ok, proxy.stats["tokens"], proxy.span_s(), rpm=rpm, tpm=tpm,
                        window_s=window_s, free=free, latency_s=latency_s)  # fmt: skip
