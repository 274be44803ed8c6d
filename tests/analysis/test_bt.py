"""Bradley-Terry fit: exactness against independent minimisers, recovery of known theta, edge cases."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from elo_per_token.analysis.bt import (
    aggregate_wins,
    fit_bt,
    fit_bt_counts,
    fit_bt_detailed,
    mle_exists,
    newton_batch,
)


def _seed_port():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "seed_bt.py"
    spec = importlib.util.spec_from_file_location("seed_bt", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _simulate(rng, theta, m):
    """m BT comparisons between uniformly chosen distinct arms."""
    k = theta.size
    a = rng.integers(0, k, m)
    b = (a + rng.integers(1, k, m)) % k
    a_wins = rng.random(m) < 1.0 / (1.0 + np.exp(-(theta[a] - theta[b])))
    return np.where(a_wins, a, b), np.where(a_wins, b, a)


def _literal_minimiser(winner, loser, k, l2, weights):
    """Independent oracle: BFGS on the per-comparison sum (one-hot design matrix, no aggregation)."""
    x = np.zeros((winner.size, k))
    x[np.arange(winner.size), winner] = 1.0
    x[np.arange(winner.size), loser] = -1.0

    def f(th):
        s = x @ th
        return np.sum(weights * np.logaddexp(0.0, -s)) + l2 * th @ th

    def g(th):
        s = x @ th
        return -x.T @ (weights / (1.0 + np.exp(s))) + 2 * l2 * th

    res = minimize(f, np.zeros(k), jac=g, method="BFGS", options={"gtol": 1e-11, "maxiter": 10_000})
    return res.x - res.x.mean(), res


@pytest.mark.parametrize("l2", [1e-3, 0.5, 5.0])
def test_matches_independent_minimiser_of_literal_objective(l2):
    rng = np.random.default_rng(11)
    k = 6
    theta = rng.normal(0, 1, k)
    winner, loser = _simulate(rng, theta, 3000)
    weights = rng.choice([0.5, 1.0, 2.0], size=winner.size)
    want, res = _literal_minimiser(winner, loser, k, l2, weights)
    fit = fit_bt_detailed(winner, loser, k, l2=l2, weights=weights)
    assert fit.converged
    assert np.max(np.abs(fit.theta - want)) < 1e-6
    assert abs(fit.objective - res.fun) <= 1e-9 * abs(res.fun)
    assert np.array_equal(fit.theta, fit_bt(winner, loser, k, l2=l2, weights=weights))


def test_matches_seed_port_on_small_data():
    # The seed's L-BFGS-B with numeric gradients stops early, so only ~1e-3 agreement is expected.
    seed = _seed_port()
    rng = np.random.default_rng(3)
    theta = np.array([0.8, 0.1, -0.3, -0.6])
    winner, loser = _simulate(rng, theta, 400)
    want = seed.seed_bt_fit(list(zip(winner.tolist(), loser.tolist(), strict=True)), 4)
    got = fit_bt(winner, loser, 4)
    assert np.max(np.abs(got - want)) < 2e-3


def test_l2_positive_minimiser_is_already_centred():
    # The sum of the gradient is 2*l2*sum(theta), so the penalised minimiser has mean 0 before centring.
    rng = np.random.default_rng(5)
    winner, loser = _simulate(rng, np.array([1.0, 0.0, -1.0, 2.0]), 500)
    w = aggregate_wins(winner, loser, 4)
    fit = newton_batch(w[None], l2=0.3)
    un = fit.theta[0]  # returned centred; check by re-evaluating the gradient at it
    p = 1 / (1 + np.exp(-(un[:, None] - un[None, :])))
    grad = ((w + w.T) * p - w).sum(1) + 0.6 * un
    assert np.max(np.abs(grad)) < 1e-8


def test_recovers_known_theta_with_ties_and_replicates():
    rng = np.random.default_rng(2026)
    k = 8
    truth = np.linspace(-1.2, 1.2, k)
    rng.shuffle(truth)
    # 5,000 tasks x 2 replicates x 2 random pairs = 20k comparisons; 15% of outcomes are ties.
    n_tasks, reps = 5000, 2
    a = np.repeat(rng.integers(0, k, n_tasks * 2), reps)
    b = (a + np.repeat(rng.integers(1, k, n_tasks * 2), reps)) % k
    m = a.size
    assert m == 20_000
    tie = rng.random(m) < 0.15
    a_wins = rng.random(m) < 1 / (1 + np.exp(-(truth[a] - truth[b])))
    win = np.where(a_wins, a, b)
    lose = np.where(a_wins, b, a)
    # A tie is two half-weight rows, one each way.
    winner = np.concatenate([win[~tie], a[tie], b[tie]])
    loser = np.concatenate([lose[~tie], b[tie], a[tie]])
    weights = np.concatenate([np.ones((~tie).sum()), np.full(2 * tie.sum(), 0.5)])
    fit = fit_bt_detailed(winner, loser, k, weights=weights)
    assert fit.converged
    assert np.corrcoef(fit.theta, truth)[0, 1] > 0.99
    assert abs(fit.theta.mean()) < 1e-12


def test_tie_rows_equal_half_wins_each_way():
    w1 = fit_bt(np.array([0, 1, 0]), np.array([1, 0, 2]), 3, weights=np.array([0.5, 0.5, 1.0]))
    wins = np.array([[0, 0.5, 1.0], [0.5, 0, 0], [0, 0, 0]])
    assert np.allclose(w1, fit_bt_counts(wins).theta, atol=1e-12)


def test_hand_computed_two_arm_fit():
    # Two arms, a beats b 3 times, b beats a once, l2 = 0: theta_a - theta_b = log(3).
    fit = fit_bt_counts(np.array([[0.0, 3.0], [1.0, 0.0]]), l2=0.0)
    assert fit.converged
    assert np.allclose(fit.theta, [np.log(3) / 2, -np.log(3) / 2], atol=1e-10)


def test_unobserved_arms_are_reported_and_sit_at_zero():
    fit = fit_bt_detailed(np.array([0, 1, 0]), np.array([1, 0, 1]), 4)
    assert fit.unobserved.tolist() == [2, 3]
    assert fit.theta[2] == pytest.approx(fit.theta[3])
    assert fit.converged
    # Zero-weight comparisons do not count as observations.
    fit = fit_bt_detailed(np.array([0, 2]), np.array([1, 1]), 3, weights=np.array([1.0, 0.0]))
    assert fit.unobserved.tolist() == [2]


def test_perfect_separation_without_penalty_reports_non_convergence():
    wins = np.array([[0, 3, 2], [0, 0, 1], [0, 0, 0.0]])
    assert not mle_exists(wins)
    fit = fit_bt_counts(wins, l2=0.0)
    assert not fit.converged
    assert np.all(np.isfinite(fit.theta))
    # With a penalty the same data has a finite minimiser.
    assert fit_bt_counts(wins, l2=1e-3).converged


def test_fallback_optimiser_used_when_newton_stops_early():
    rng = np.random.default_rng(8)
    winner, loser = _simulate(rng, np.array([2.0, -1.0, 0.5]), 300)
    w = aggregate_wins(winner, loser, 3)
    full = fit_bt_counts(w)
    cut = fit_bt_counts(w, max_iter=1)  # Newton gives up after one step; scipy trust-exact finishes
    assert cut.converged
    assert np.allclose(cut.theta, full.theta, atol=1e-8)


def test_batched_newton_equals_single_fits():
    rng = np.random.default_rng(9)
    mats = []
    for _ in range(7):
        winner, loser = _simulate(rng, rng.normal(size=5), 200)
        mats.append(aggregate_wins(winner, loser, 5))
    batch = newton_batch(np.stack(mats))
    assert batch.converged.all()
    for i, w in enumerate(mats):
        assert np.allclose(batch.theta[i], fit_bt_counts(w).theta, atol=1e-10)


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"winner": [0, 3], "loser": [1, 0]}, "outside"),
        ({"winner": [0, -1], "loser": [1, 0]}, "outside"),
        ({"winner": [0, 1], "loser": [1, 1]}, "same arm"),
        ({"winner": [0.0, 1.0], "loser": [1, 0]}, "integer"),
        ({"winner": [0, 1], "loser": [1]}, "same length"),
        ({"weights": [1.0, -1.0]}, "finite and >= 0"),
        ({"weights": [1.0, np.nan]}, "finite and >= 0"),
        ({"l2": -1.0}, "l2"),
        ({"l2": np.inf}, "l2"),
    ],
)
def test_rejects_bad_input(kwargs, msg):
    args = {"winner": [0, 1], "loser": [1, 0], "n_arms": 3} | kwargs
    winner, loser = np.asarray(args.pop("winner")), np.asarray(args.pop("loser"))
    weights = args.pop("weights", None)
    with pytest.raises(ValueError, match=msg):
        fit_bt(
            winner,
            loser,
            args.pop("n_arms"),
            weights=None if weights is None else np.asarray(weights),
            **args,
        )


def test_rejects_bad_count_matrix():
    with pytest.raises(ValueError, match="square"):
        fit_bt_counts(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="diagonal"):
        fit_bt_counts(np.eye(2))
    with pytest.raises(ValueError, match="finite"):
        fit_bt_counts(np.array([[0, -1.0], [0, 0]]))


@st.composite
def _comparisons(draw):
    k = draw(st.integers(2, 6))
    m = draw(st.integers(1, 40))
    winner = np.array(draw(st.lists(st.integers(0, k - 1), min_size=m, max_size=m)))
    shift = np.array(draw(st.lists(st.integers(1, k - 1), min_size=m, max_size=m)))
    weights = np.array(draw(st.lists(st.floats(0.0, 3.0), min_size=m, max_size=m)))
    return k, winner, (winner + shift) % k, weights


@settings(max_examples=60, deadline=None)
@given(_comparisons(), st.sampled_from([1e-3, 0.1, 2.0]), st.randoms(use_true_random=False))
def test_properties_relabel_reverse_and_optimality(case, l2, rnd):
    k, winner, loser, weights = case
    fit = fit_bt_detailed(winner, loser, k, l2=l2, weights=weights)
    assert fit.converged
    # Relabelling arms permutes theta.
    perm = np.array(rnd.sample(range(k), k))
    permuted = fit_bt(perm[winner], perm[loser], k, l2=l2, weights=weights)
    assert np.allclose(permuted[perm], fit.theta, atol=1e-7)
    # Swapping every winner and loser negates theta.
    assert np.allclose(fit_bt(loser, winner, k, l2=l2, weights=weights), -fit.theta, atol=1e-7)
    # Optimality: no coordinate or random perturbation lowers the literal objective.
    x = np.zeros((winner.size, k))
    x[np.arange(winner.size), winner] = 1.0
    x[np.arange(winner.size), loser] = -1.0

    def f(th):
        return np.sum(weights * np.logaddexp(0.0, -(x @ th))) + l2 * th @ th

    base = f(fit.theta)
    assert abs(base - fit.objective) <= 1e-9 * max(1.0, base)
    for d in np.vstack([np.eye(k), np.random.default_rng(0).normal(size=(5, k))]):
        assert f(fit.theta + 1e-4 * d) >= base - 1e-10 * max(1.0, base)
        assert f(fit.theta - 1e-4 * d) >= base - 1e-10 * max(1.0, base)
