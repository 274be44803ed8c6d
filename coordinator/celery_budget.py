"""The run's spend counter on the broker (contracts.jobs.budget_key): set when a Celery sweep starts, held no
lower than what the coordinator has seen spent. Workers check it before a job's first API call."""

from __future__ import annotations

from typing import Any


def broker_redis(app: Any) -> Any:
    """A Redis client on the app's broker."""
    import redis

    return redis.Redis.from_url(str(app.conf.broker_url))


def start_budget(app: Any, run_id: str, spent: int) -> None:
    """Set the run's spend counter (contracts.jobs.budget_key) that workers check against the cap."""
    from elo_per_token.contracts.jobs import budget_key

    broker_redis(app).set(budget_key(run_id), spent, ex=7 * 24 * 3600)


# Raise the counter to at least ARGV[1] (never lower it): workers add to it concurrently, and anything that is
# not a number (a forged string) is replaced.
_FLOOR = """
local v = tonumber(redis.call('GET', KEYS[1]))
if v == nil or v < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1], 'EX', 604800) return 1 end
return 0
"""


def floor_budget(app: Any, run_id: str, spent: int) -> bool:
    """Hold the broker's spend counter at no less than what this coordinator has seen spent (earlier sessions
    plus the results it received): a counter forged low, by anyone who can write to the broker, is put back
    on the next poll, so workers stop at the cap. True when the counter was below (it was raised)."""
    from elo_per_token.contracts.jobs import budget_key

    return bool(broker_redis(app).eval(_FLOOR, 1, budget_key(run_id), int(spent)))
