"""The adaptive sweep's progress in the ledger (the run's `adaptive.json` blob), for `ept status`: the last
finished round, tokens, the arms still running, and once over, why the sweep stopped."""

from __future__ import annotations

import json
import time
from typing import Any

from elo_per_token.coordinator.adaptive.events import RoundEvent

__all__ = ["ADAPTIVE_BLOB", "read_state", "write_state"]

ADAPTIVE_BLOB = "adaptive.json"


def write_state(ledger: Any, run_id: str, event: RoundEvent) -> None:
    """The round just finished, for `ept status` (a blob: overwritten each round)."""
    blob = {**event.as_dict(), "at": time.time()}
    ledger.put_blob(run_id, ADAPTIVE_BLOB, json.dumps(blob, sort_keys=True).encode())


def read_state(ledger: Any, run_id: str) -> dict[str, Any] | None:
    """The adaptive state `write_state` left, None for a run that is not adaptive (or an unreadable blob)."""
    raw = ledger.get_blob(run_id, ADAPTIVE_BLOB)
    if raw is None:
        return None
    try:
        state = json.loads(raw)
    except ValueError:
        return None
    return state if isinstance(state, dict) else None
