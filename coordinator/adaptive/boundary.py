"""A constant one-sided boundary for a statistic looked at after each round: the exact alternative to the
Bonferroni split over the looks.

A pair's mean over the tasks both arms ran is a random walk in the tasks (the tasks come in one random order,
so the shared tasks are exchangeable, and whether a pair runs a round depends only on what came before:
optional skipping leaves the walk's law). Standardised, it is a Brownian motion B(t)/sqrt(t) observed at the
information times t = r / R of the rounds r >= the first decision round (a pair that skips rounds is looked at
on a subset of these times, which can only cross less often). `look_z(alpha, times)` is the constant c with
P(max_t B(t)/sqrt(t) > c) = alpha (Pocock's boundary), by recursive numerical integration of the walk's density
below the boundary; with one look it is the normal quantile, and it is never above the Bonferroni z
(norm.ppf(1 - alpha / looks)), which it improves on because successive looks share most of their tasks
(9 looks at 0.2, 0.3, ..., 1.0, alpha 0.0125: 2.77 against 2.99, about 15% fewer tasks for the same claim).
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np
from scipy.stats import norm

__all__ = ["crossing_probability", "look_z", "round_times"]

_DX = 0.005  # grid step of the density (in units of the final standard deviation): error < 5% of alpha
_LIM = 7.0


def round_times(rounds: int, first: int) -> tuple[float, ...]:
    """Information times of the looks: rounds first..rounds of `rounds` equal rounds (round_bounds)."""
    if not 1 <= first <= rounds:
        raise ValueError(f"need 1 <= first <= rounds, got {first}, {rounds}")
    return tuple(r / rounds for r in range(first, rounds + 1))


def crossing_probability(c: float, times: tuple[float, ...]) -> float:
    """P(B(t) >= c sqrt(t) at some t in `times`) for a standard Brownian motion B."""
    x = np.arange(-_LIM, _LIM + _DX / 2, _DX)
    f = norm.pdf(x, scale=np.sqrt(times[0])) * _DX
    f[x >= c * np.sqrt(times[0])] = 0.0
    for a, b in itertools.pairwise(times):
        s = float(np.sqrt(b - a))
        h = np.arange(-6 * s, 6 * s + _DX / 2, _DX)
        f = np.convolve(f, norm.pdf(h, scale=s) * _DX, mode="same")
        f[x >= c * np.sqrt(b)] = 0.0
    return float(1.0 - f.sum())


@lru_cache(maxsize=256)
def look_z(alpha: float, times: tuple[float, ...]) -> float:
    """The constant one-sided boundary crossed with probability alpha over the looks at `times` (increasing,
    in (0, 1]); bisection between the one-look and the Bonferroni z, so never above the latter."""
    if not 0 < alpha < 0.5:
        raise ValueError(f"need 0 < alpha < 0.5, got {alpha}")
    if not times or any(not 0 < t <= 1 for t in times) or any(b <= a for a, b in itertools.pairwise(times)):
        raise ValueError(f"times must increase within (0, 1], got {times}")
    lo, hi = float(norm.ppf(1 - alpha)), float(norm.ppf(1 - alpha / len(times)))
    if len(times) == 1 or hi > _LIM - 1:  # beyond the grid's reach: Bonferroni, which is conservative
        return lo if len(times) == 1 else hi
    for _ in range(25):  # to 1e-7 of the bracket: far below the grid's own error
        mid = (lo + hi) / 2
        if crossing_probability(mid, times) > alpha:
            lo = mid
        else:
            hi = mid
    return hi
