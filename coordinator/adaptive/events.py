"""The adaptive sweep's round event: what the round loop (core.run_adaptive) says after each round, typed.

The loop emits one `RoundEvent` per finished round: the live sweep writes it to the run's `adaptive.json`
blob for `ept status` (state.write_state, `as_dict`), the replay and the report read the result's history of
them, and `ept status` reads the blob back as a dict (the blob is storage: read defensively, cli.print_state).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["RoundEvent"]


@dataclass(frozen=True)
class RoundEvent:
    """One finished round: its number (1-based) of `rounds`, the tasks seen so far (a prefix of the task
    order), the sweep's tokens so far, the arms that run the next round, every arm's decision now, and why
    each arm that stopped receiving tasks stopped (arm -> one line). `finished` and `stop_reason` are set on
    the last event of a sweep that ended (not one interrupted)."""

    round: int
    rounds: int
    tasks: int
    tokens: float
    running: tuple[str, ...]
    status: Mapping[str, str]
    why: Mapping[str, str] = field(default_factory=dict)
    finished: bool = False
    stop_reason: str | None = None

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: the `adaptive.json` blob's fields (`finished` and `stop_reason` only once over)."""
        out: dict[str, object] = {
            "round": self.round,
            "rounds": self.rounds,
            "tasks": self.tasks,
            "tokens": self.tokens,
            "running": list(self.running),
            "status": dict(self.status),
            "why": dict(self.why),
        }
        if self.finished:
            out["finished"] = True
            out["stop_reason"] = self.stop_reason
        return out
