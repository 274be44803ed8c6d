"""Synthetic run tables with known truth, for the adaptive sweep's tests (tests/coordinator/)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import expit

from elo_per_token.coordinator.adaptive.run_table import RunTable


def synthetic_table(
    ability: Sequence[float], cost: Sequence[float], tasks: int = 600, seed: int = 0
) -> RunTable:
    """A full grid of `tasks` tasks (families a, b, c in turn) by one arm per `ability` (logit) and `cost`
    (mean tokens per task): task difficulty ~ N(-1, 1.2), outcomes Bernoulli(expit(ability - difficulty)),
    tokens cost x lognormal(0, 0.35), rounded."""
    rng = np.random.default_rng(seed)
    k = len(ability)
    fam = [("a", "b", "c")[i % 3] for i in range(tasks)]
    d = rng.normal(0, 1.2, tasks) - 1.0
    scores = (rng.uniform(size=(tasks, k)) < expit(np.asarray(ability)[None, :] - d[:, None])).astype(float)
    tokens = np.round(np.asarray(cost, dtype=float)[None, :] * rng.lognormal(0, 0.35, (tasks, k)))
    arms = [f"arm{i}" for i in range(k)]
    return RunTable([f"t{i}" for i in range(tasks)], fam, arms, arms, [1] * k, scores, tokens)
