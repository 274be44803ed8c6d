"""Pocock's constant boundary over the looks (coordinator/adaptive/boundary.py): exact crossing probability, never above
Bonferroni, refuses what it cannot compute."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from bounds import bounded
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from elo_per_token.coordinator.adaptive.boundary import crossing_probability, look_z, round_times


def test_boundary_is_crossed_with_probability_alpha_by_a_simulated_walk():
    """9 looks at 0.2 .. 1.0: the walk crosses the boundary with probability alpha (a seeded Monte Carlo of
    200k walks agrees to its own error), and the boundary is well below Bonferroni's."""
    times = round_times(10, 2)
    c = look_z(0.0125, times)
    assert norm.ppf(1 - 0.0125) < c < norm.ppf(1 - 0.0125 / 9) - 0.15
    rng = np.random.default_rng(0)
    walk = np.cumsum(rng.normal(0.0, np.sqrt(0.1), (200_000, 10)), axis=1)[:, 1:]
    hit = float((walk / np.sqrt(np.asarray(times)) >= c).any(axis=1).mean())
    assert abs(hit - 0.0125) < 4 * np.sqrt(0.0125 / 200_000) + 0.0008
    assert look_z(0.01, (1.0,)) == pytest.approx(norm.ppf(0.99))


@settings(max_examples=40, deadline=None)
@given(
    alpha=st.one_of(st.floats(-1, 2), st.just(float("nan")), st.floats(1e-9, 0.49)),
    times=st.one_of(
        st.lists(st.one_of(st.floats(-0.5, 1.5), st.just(float("nan"))), min_size=0, max_size=12),
        st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=12).map(lambda x: sorted(set(x))),
    ),
)
def test_look_z_is_between_one_look_and_bonferroni_or_refuses(alpha, times):
    """Hostile levels and times: a ValueError, or a boundary between the one-look and the Bonferroni z whose
    crossing probability is at most alpha; bounded time and memory."""
    tt = tuple(times)
    try:
        c = bounded(lambda: look_z(alpha, tt), time_s=10, memory_mb=50)
    except ValueError:
        ok = (
            0 < alpha < 0.5
            and tt
            and all(0 < t <= 1 for t in tt)
            and all(b > a for a, b in itertools.pairwise(tt))
        )
        assert not ok
        return
    assert norm.ppf(1 - alpha) - 1e-9 <= c <= norm.ppf(1 - alpha / len(tt)) + 1e-9
    # the grid's cell at the boundary counts as crossed: the computed probability errs high by < dx x the
    # density's peak, which is 0.4 / sqrt(t) at the first look (the grid is in units of the final sd)
    assert crossing_probability(c, tt) <= alpha + 0.005 * 0.4 / np.sqrt(tt[0]) + 1e-9
