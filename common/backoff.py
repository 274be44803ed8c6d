"""The one backoff formula of the project: exponential growth with full jitter.

Used by the egress client (provider retries), the worker's job retries and the ledger's storage retries.
Full jitter (a uniform draw in [0, ceiling]) keeps a fleet of workers from retrying in lock step.
"""

from __future__ import annotations

import math
import random

# 2**16 times the base is past every cap in use; clamping the exponent keeps a huge attempt count from
# overflowing a float.
_MAX_DOUBLINGS = 16


def backoff_ceiling(attempt: int, base_s: float, cap_s: float = math.inf) -> float:
    """The largest pause before retry number `attempt` (1 = the first retry): base_s * 2**(attempt-1), capped."""
    return min(cap_s, base_s * float(2 ** min(max(attempt - 1, 0), _MAX_DOUBLINGS)))


def backoff(attempt: int, base_s: float, cap_s: float = math.inf) -> float:
    """A full-jitter pause before retry number `attempt`: uniform in [0, backoff_ceiling(attempt, base_s, cap_s)]."""
    return random.uniform(0, backoff_ceiling(attempt, base_s, cap_s))
