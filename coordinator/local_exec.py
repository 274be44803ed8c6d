"""The local executor of a sweep: the provider client and its rate limiter for the run's profile, then
coordinator.local.run_local with the sweep's live tally as its hooks (coordinator/celery_exec.py is the Celery
executor's counterpart)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.jobs import Job
from elo_per_token.coordinator.plan import Plan
from elo_per_token.coordinator.sweep_live import LiveTally
from elo_per_token.ledger import Ledger

if TYPE_CHECKING:  # annotations only
    from elo_per_token.contracts.records import JobResult
    from elo_per_token.egress.profiles import Profile


def run_sweep_local(
    plan: Plan,
    todo: Iterable[Job],
    ledger: Ledger,
    profile: Profile,
    live: LiveTally,
    run: Callable[[Job, Any], JobResult] | None,
    had_failure: Collection[str] = frozenset(),
    check_existing: bool = True,
) -> bool:
    """Run `todo` on this process's thread pool, over a provider client made for the profile (its key checked
    first, the plan's rate limits); the provider's outage note and weather reach the live tally."""
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.worker.ratelimit import Limits, make_rate_limiter

    if not profile.api_key():
        raise InputError(
            f"environment variable {profile.api_key_env} is not set (profile {profile.name!r} reads the key "
            "from it; `ept doctor` checks the whole setup)",
            field="profile",
        )
    lim = plan.limits_for(profile.name)
    limiter = make_rate_limiter(profile.name, Limits(lim.rpm or profile.rpm, lim.tpm or profile.tpm))
    provider = ProviderClient(profile, rate_limiter=limiter)
    live.weather_note = provider.outage.describe
    try:
        return _run_with(todo, ledger, provider, plan, live, run, had_failure, check_existing)
    finally:
        live.weather_note = lambda: None
        live.tally.weather = provider.weather()


def _run_with(
    todo: Any,
    ledger: Ledger,
    provider: Any,
    plan: Plan,
    live: LiveTally,
    run: Any,
    had_failure: Collection[str],
    check_existing: bool,
) -> bool:
    """run_local with the sweep's settings, over the provider client made for it; each job's task is checked
    against the run's record (worker.taskcheck), as a Celery worker checks it."""
    from elo_per_token.coordinator.local import run_local
    from elo_per_token.worker.taskcheck import RunTasks

    tally = live.tally
    return run_local(
        todo,
        ledger,
        provider,
        concurrency=plan.concurrency,
        on_result=live.on_result,
        on_retry=live.on_retry,
        should_stop=tally.should_stop,
        run=run,
        clear_failures=had_failure,
        check_existing=check_existing,
        cancel_queued=tally.over_budget,
        queue_factor=1 if tally.cap is not None else 2,
        on_abandon=lambda n: setattr(tally, "abandoned", n),
        transcripts=plan.transcripts,
        tasks=RunTasks(),
        on_tick=live.refresh,
    )
