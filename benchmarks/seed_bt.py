"""BASELINE ONLY — a straightforward Bradley-Terry fit (`bt_fit`, the snippet the project started from).

It minimises -Σ log σ(θ_winner − θ_loser) + l2·‖θ‖² over the comparisons and returns θ − mean(θ).
Not used by the product. It exists as (1) the speed baseline in benchmarks/bench_bt.py and (2) a test
oracle in tests/analysis/test_bt.py. Kept deliberately naive: a Python loop over every comparison inside the
objective, and L-BFGS-B with numerically differenced gradients.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize


def seed_bt_fit(wins, n_models, l2=1e-3):
    """wins: list of (i, j) meaning i beat j once. Returns theta with mean 0 (as the seed does)."""

    def neg_log_likelihood(theta):
        ll = 0.0
        for i, j in wins:
            s = theta[i] - theta[j]
            ll += -np.logaddexp(0.0, -s)
        reg = l2 * np.sum(theta**2)
        return -ll + reg

    theta0 = np.zeros(n_models)
    res = minimize(neg_log_likelihood, theta0, method="L-BFGS-B")
    return res.x - res.x.mean()


def seed_theta_to_elo(theta, base=1000.0, scale=400.0 / np.log(10)):
    return base + scale * theta
