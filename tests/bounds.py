"""One way for property tests to bound what a call costs: CPU time of this process and peak Python memory."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def bounded(fn: Callable[[], T], time_s: float, memory_mb: float) -> T:
    """fn(), asserting it took under `time_s` of CPU and under `memory_mb` of peak Python allocations."""
    tracemalloc.start()
    t0 = time.process_time()
    try:
        out = fn()
    finally:
        took = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert took < time_s, f"{took:.2f}s of CPU"
    assert peak < memory_mb * 2**20, f"{peak / 2**20:.0f} MB peak"
    return out
