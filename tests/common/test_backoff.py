"""The one backoff formula (common/backoff.py) the egress client, the worker and the ledger share."""

from __future__ import annotations

import math
import random
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.common.backoff import backoff, backoff_ceiling


def test_callers_keep_their_numbers():
    # egress: base 0.5, cap 30 -> 0.5, 1, 2, ..., capped at 30
    assert [backoff_ceiling(a, 0.5, 30.0) for a in (1, 2, 3, 7, 8)] == [0.5, 1.0, 2.0, 30.0, 30.0]
    # ledger: base 0.2, cap 5
    assert [backoff_ceiling(a, 0.2, 5.0) for a in (1, 2, 5, 6)] == [0.2, 0.4, 3.2, 5.0]
    # worker: base 1.0, no cap
    assert [backoff_ceiling(a, 1.0) for a in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    random.seed(7)
    expected = random.uniform(0, 0.2 * 2**2)
    random.seed(7)
    assert backoff(3, 0.2, 10.0) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(0, 1e6),
    st.floats(0, math.inf) | st.just(math.inf),
)
def test_any_attempt_count_gives_a_bounded_pause_at_once(attempt, base, cap):
    """Degenerate attempt counts (0, negative, huge) neither overflow nor hang nor exceed the cap."""
    t0 = time.perf_counter()
    ceiling = backoff_ceiling(attempt, base, cap)
    pause = backoff(attempt, base, cap)
    assert time.perf_counter() - t0 < 0.5
    assert 0.0 <= pause <= ceiling <= cap
    assert ceiling <= base * 2**16
    if attempt <= 1:
        assert ceiling == min(cap, base)
