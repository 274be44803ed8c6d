"""The strategy registry. Add a strategy: write one module with a `STRATEGY = Strategy(...)` entry and
list it in `_MODULES` below (see docs/strategies.md)."""

from __future__ import annotations

from typing import Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.worker.strategies import best_of_n, greedy, majority, tree_search
from elo_per_token.worker.strategies.base import Candidate, JobContext, Strategy, StrategyResult

_MODULES = (greedy, best_of_n, majority, tree_search)
STRATEGIES: dict[str, Strategy[Any]] = {m.STRATEGY.name: m.STRATEGY for m in _MODULES}

__all__ = ["STRATEGIES", "Candidate", "JobContext", "Strategy", "StrategyResult", "get_strategy"]


def get_strategy(name: str) -> Strategy[Any]:
    if name not in STRATEGIES:
        raise InputError(
            f"unknown strategy '{name}' (known: {', '.join(sorted(STRATEGIES))})", field="strategy"
        )
    return STRATEGIES[name]
