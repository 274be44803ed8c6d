"""One way for property tests to bound what a call costs: CPU time of this process and peak Python memory."""

from __future__ import annotations

import contextlib
import subprocess
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


def bounded_pure(fn: Callable[[], T], time_s: float, memory_mb: float) -> T:
    """bounded() for a function without side effects, called twice: its CPU time untraced, then its peak memory
    traced. tracemalloc makes allocation-heavy code 5-10x slower (a 300k-item flood: 0.34 s untraced, 3.5 s
    traced), so one traced call would bound the tracer's cost, not the code's."""
    t0 = time.process_time()
    with contextlib.suppress(Exception):  # the traced call below raises it again, for the caller to see
        fn()
    took = time.process_time() - t0
    assert took < time_s, f"{took:.2f}s of CPU"
    return bounded(fn, float("inf"), memory_mb)


def wait_with_peak(proc: subprocess.Popen[bytes], timeout: float, every_s: float = 0.1) -> tuple[int, int]:
    """Wait for `proc`; (its exit code, its peak resident memory in KiB), read from /proc/<pid>/status VmHWM
    while it runs. Not getrusage(RUSAGE_CHILDREN): Linux carries ru_maxrss across fork and exec, so a child
    of a pytest process that has grown past the bound would report the parent's peak. VmHWM only grows, so
    sampling misses at most the last `every_s` of growth."""
    deadline, peak = time.monotonic() + timeout, 0
    while (code := proc.poll()) is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except (OSError, ValueError):
            pass  # exiting between poll and open
        if time.monotonic() > deadline:
            proc.kill()
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(every_s)
    return code, peak
