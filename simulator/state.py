"""The simulator's mutable state: config, brain, request counter, script, stats and the prompt cache."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from elo_per_token.simulator.config import SimConfig
from elo_per_token.simulator.generic import Brain


@dataclass
class SimState:
    config: SimConfig
    brain: Brain
    counter: int = 0  # completion requests since start/reset: drives deterministic faults
    script: list[str] = field(default_factory=list)
    stats: dict[str, Counter[str]] = field(default_factory=dict)
    tokens: Counter[str] = field(default_factory=Counter)
    prefixes: set[bytes] = field(
        default_factory=set
    )  # hashes of prompt prefixes seen (the simulated prompt cache)
    stopping: asyncio.Event | None = None

    def __post_init__(self) -> None:
        self.script = list(self.config.script)
        self.reset_stats()

    def reset_stats(self) -> None:
        self.counter = 0
        self.stats = {
            k: Counter()
            for k in ("by_route", "by_status", "by_fault", "by_job", "by_arm", "by_role", "by_gen")
        }
        self.tokens = Counter()

    def stats_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: dict(v) for k, v in self.stats.items()}
        d["requests"] = sum(self.stats["by_route"].values())
        d["completion_requests"] = self.counter
        d["tokens"] = dict(self.tokens)
        return d


STATE = web.AppKey("state", SimState)
