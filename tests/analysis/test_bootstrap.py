"""Bootstrap: equality with a slow explicit resampler, interval coverage, point estimate by hand."""

from __future__ import annotations

import numpy as np
import pytest

from elo_per_token.analysis.bootstrap import (
    PairData,
    bootstrap,
    fit_families,
    point_estimate,
    small_sample_factor,
)
from elo_per_token.analysis.bt import fit_bt
from elo_per_token.analysis.merge import ELO_SCALE, merge_thetas, theta_to_elo

FAMS = ["math", "code"]


def _simulate(rng, truth, tasks_per_family, reps=1, tie_rate=0.0):
    """All pairs compared in every task (times `reps`); ties become two half-weight rows.

    Ties happen with probability tie_rate and decisive outcomes are tilted so that a's expected score
    (win = 1, tie = 1/2) stays sigmoid(theta_a - theta_b): the half-win tie rule then estimates the true
    theta. (Ties that ignore theta would shrink every difference toward 0; see docs/statistics.md.)"""
    n_fam, k = truth.shape
    t = n_fam * tasks_per_family
    fam = np.repeat(np.arange(n_fam), tasks_per_family)
    ii, jj = np.triu_indices(k, 1)
    per = ii.size * reps
    task = np.repeat(np.arange(t), per)
    a, b = np.tile(np.tile(ii, reps), t), np.tile(np.tile(jj, reps), t)
    th = truth[fam[task]]
    rows = np.arange(a.size)
    p = 1 / (1 + np.exp(-(th[rows, a] - th[rows, b])))
    assert np.all((p >= tie_rate / 2) & (p <= 1 - tie_rate / 2))
    a_wins = rng.random(a.size) < (p - tie_rate / 2) / (1 - tie_rate)
    tie = rng.random(a.size) < tie_rate
    win, lose = np.where(a_wins, a, b), np.where(a_wins, b, a)
    winner = np.concatenate([win[~tie], a[tie], b[tie]])
    loser = np.concatenate([lose[~tie], b[tie], a[tie]])
    task_all = np.concatenate([task[~tie], task[tie], task[tie]])
    weight = np.concatenate([np.ones((~tie).sum()), np.full(2 * tie.sum(), 0.5)])
    tokens = rng.gamma(4.0, 250.0, (t, k)) * np.arange(1, k + 1)
    return fam, task_all, winner, loser, weight, tokens


def _data(rng, truth, tasks_per_family, **kw):
    fam, task, winner, loser, weight, tokens = _simulate(rng, truth, tasks_per_family, **kw)
    names = [f"f{i}" for i in range(truth.shape[0])]
    return PairData(fam, task, winner, loser, weight, truth.shape[1], names, tokens)


def _explicit_bootstrap(data, weights, anchor, rounds, seed, l2):
    """Slow reference: rebuild each resampled dataset row by row, fit with fit_bt, nanmean tokens.

    It replays the same random draws (per family, in family order, one [rounds, T_f] integer draw),
    so the two must agree to rounding; everything else is computed independently."""
    rng = np.random.default_rng(seed)
    k = data.n_arms
    fam_draws = []
    for f in range(len(data.families)):
        tasks_f = np.nonzero(data.task_family == f)[0]
        fam_draws.append((tasks_f, rng.integers(0, tasks_f.size, size=(rounds, tasks_f.size))))
    elo = np.empty((rounds, k))
    tpt = np.empty((rounds, k))
    w = dict(zip(data.families, weights / weights.sum(), strict=True))
    for r in range(rounds):
        thetas, toks = {}, []
        for f, (tasks_f, draws) in enumerate(fam_draws):
            # Expanded percentile (small_sample_factor): each family's deviation from its point fit is
            # stretched by s, for theta and for the family's mean tokens alike.
            # t quantile on the merged estimate's degrees of freedom: sum of (n_f - 1) over families.
            df = sum(int((data.task_family == g).sum()) - 1 for g in range(len(data.families)))
            s = small_sample_factor(tasks_f.size, df)
            all_rows = np.isin(data.task, tasks_f)
            th0 = fit_bt(data.winner[all_rows], data.loser[all_rows], k, l2=l2, weights=data.weight[all_rows])
            picked = tasks_f[draws[r]]
            rows = np.concatenate([np.nonzero(data.task == t)[0] for t in picked])
            th = fit_bt(data.winner[rows], data.loser[rows], k, l2=l2, weights=data.weight[rows])
            seen = np.isin(np.arange(k), np.concatenate([data.winner[rows], data.loser[rows]]))
            thetas[data.families[f]] = np.where(seen, th0 + s * (th - th0), np.nan)
            tok0 = np.nanmean(data.task_tokens[tasks_f], axis=0)
            toks.append(tok0 + s * (np.nanmean(data.task_tokens[picked], axis=0) - tok0))
        elo[r] = theta_to_elo(merge_thetas(thetas, w), anchor)
        # Tokens per task weighted like Elo: families weighted by w, renormalised over those the arm ran in.
        tf = np.array(toks)
        wf = np.array([w[f] for f in data.families])[:, None] * ~np.isnan(tf)
        tpt[r] = np.nansum(wf * tf, axis=0) / wf.sum(axis=0)
    return elo, tpt


def test_bootstrap_equals_explicit_resampling():
    rng = np.random.default_rng(4)
    truth = np.array([[0.0, 0.5, 1.0, -0.3], [0.2, -0.4, 0.9, 0.0], [0.0, 0.0, 0.3, 0.6]])
    data = _data(rng, truth, 25, reps=2, tie_rate=0.2)
    # Arm 3 never ran in the first 10 tasks of family 0: NaN tokens and no comparisons there.
    keep = ~((data.task < 10) & ((data.winner == 3) | (data.loser == 3)))
    tokens = data.task_tokens.copy()
    tokens[:10, 3] = np.nan
    data = PairData(
        data.task_family,
        data.task[keep],
        data.winner[keep],
        data.loser[keep],
        data.weight[keep],
        4,
        data.families,
        tokens,
    )
    weights = np.array([0.5, 0.3, 0.2])
    res = bootstrap(data, weights, anchor=1, rounds=30, seed=7, l2=1e-2)
    want_elo, want_tpt = _explicit_bootstrap(data, weights, 1, 30, 7, 1e-2)
    assert res.failed_rounds == 0
    assert np.allclose(res.elo, want_elo, atol=1e-7)
    assert np.allclose(res.tokens_per_task, want_tpt, rtol=1e-12)
    assert np.all(res.elo[:, 1] == 1000.0)


def test_bootstrap_is_reproducible_and_reports_progress():
    rng = np.random.default_rng(1)
    data = _data(rng, np.array([[0.0, 0.4, 0.8], [0.0, 0.2, 0.1]]), 40)
    seen = []
    a = bootstrap(data, np.ones(2), anchor=0, rounds=600, seed=3, progress=seen.append)
    b = bootstrap(data, np.ones(2), anchor=0, rounds=600, seed=3)
    c = bootstrap(data, np.ones(2), anchor=0, rounds=600, seed=4)
    assert np.array_equal(a.elo, b.elo) and np.array_equal(a.tokens_per_task, b.tokens_per_task)
    assert not np.array_equal(a.elo, c.elo)
    assert seen == sorted(seen) and seen[-1] == 600 and len(seen) >= 2
    assert a.elo.shape == (600, 3) and a.rounds == 600 and a.seed == 3


def test_point_estimate_by_hand():
    # Family math: arm0 beats arm1 3-1 (arm2 absent); family code: arm2 beats arm0 once, tie arm0/arm1.
    data = PairData(
        task_family=np.array([0, 0, 1]),
        task=np.array([0, 0, 1, 1, 2, 2, 2]),
        winner=np.array([0, 0, 0, 1, 2, 0, 1]),
        loser=np.array([1, 1, 1, 0, 0, 1, 0]),
        weight=np.array([1, 1, 1, 1, 1, 0.5, 0.5]),
        n_arms=3,
        families=FAMS,
        task_tokens=np.array([[100.0, 300.0, np.nan], [200.0, 500.0, np.nan], [150.0, 400.0, 1000.0]]),
    )
    elo, tpt, per_family = point_estimate(data, np.array([3.0, 1.0]), anchor=0, l2=1e-3)
    th_math = fit_bt(np.array([0, 0, 0, 1]), np.array([1, 1, 1, 0]), 2)
    th_code = fit_bt(np.array([2, 0, 1]), np.array([0, 1, 0]), 3, weights=np.array([1, 0.5, 0.5]))
    assert np.allclose(per_family["math"][:2], th_math, atol=1e-10) and np.isnan(per_family["math"][2])
    assert np.allclose(per_family["code"], th_code, atol=1e-10)
    # Merge = least squares with a family offset (docs/statistics.md section 3). Arms 0,1 are in both
    # families, so their difference is the weighted mean of the families' differences. Arm 2 is in code
    # only: code's offset comes from the shared arms 0,1, so arm 2 sits at code's view of it above the
    # midpoint of arms 0,1, i.e. theta2 - theta0 = c2 - (c0 + c1)/2 + d/2.
    d = 0.75 * (th_math[1] - th_math[0]) + 0.25 * (th_code[1] - th_code[0])
    d2 = th_code[2] - (th_code[0] + th_code[1]) / 2 + d / 2
    assert np.allclose(elo, 1000 + ELO_SCALE * np.array([0.0, d, d2]), atol=1e-8)
    # Tokens weighted like Elo (math 3 : code 1): arm 0 (150, 150), arm 1 (400, 400), arm 2 code only.
    assert np.allclose(tpt, [150.0, 400.0, 1000.0])
    fits = fit_families(data)
    assert fits["math"].fit.unobserved.tolist() == [2] and fits["code"].fit.converged


@pytest.mark.slow
def test_intervals_cover_true_elo_difference():
    truth = np.array([[0.0, 0.35, 0.7], [0.0, 0.1, 0.5]])
    weights = np.array([0.6, 0.4])
    true_diff = ELO_SCALE * (weights @ (truth - truth[:, :1]))  # merged Elo vs arm 0
    rng = np.random.default_rng(20261129)
    hits = np.zeros(3, dtype=int)
    for e in range(100):
        data = _data(rng, truth, 100, reps=2, tie_rate=0.1)
        res = bootstrap(data, weights, anchor=0, rounds=400, seed=e)
        lo, hi = np.percentile(res.elo, [2.5, 97.5], axis=0)
        d_lo, d_hi = np.percentile(res.elo[:, 2] - res.elo[:, 1], [2.5, 97.5])
        hits[:2] += ((lo <= 1000 + true_diff) & (1000 + true_diff <= hi))[1:]
        hits[2] += d_lo <= true_diff[2] - true_diff[1] <= d_hi
    print("coverage hits of 100:", hits.tolist())
    assert np.all(hits >= 90), hits


@pytest.mark.parametrize(
    ("change", "msg"),
    [
        ({"task_family": np.array([0, 2])}, "task_family"),
        ({"task": np.array([0, 5])}, "task holds an index"),
        ({"winner": np.array([0, 3])}, "winner holds an index"),
        ({"loser": np.array([0, 0])}, "same arm"),
        ({"weight": np.array([1.0, -1.0])}, "weight"),
        ({"task_tokens": np.ones((2, 2))}, "shape"),
        ({"task_tokens": -np.ones((2, 3))}, ">= 0"),
        ({"task": np.array([0])}, "same length"),
    ],
)
def test_pair_data_validation(change, msg):
    base = {
        "task_family": np.array([0, 1]),
        "task": np.array([0, 1]),
        "winner": np.array([0, 1]),
        "loser": np.array([1, 2]),
        "weight": np.array([1.0, 1.0]),
        "n_arms": 3,
        "families": FAMS,
        "task_tokens": np.ones((2, 3)),
    }
    with pytest.raises(ValueError, match=msg):
        PairData(**(base | change))


def test_bad_weights_anchor_rounds():
    rng = np.random.default_rng(0)
    data = _data(rng, np.zeros((2, 3)), 5)
    with pytest.raises(ValueError, match="family_weights"):
        bootstrap(data, np.array([1.0]), anchor=0)
    with pytest.raises(ValueError, match="family_weights"):
        point_estimate(data, np.array([0.0, 0.0]), anchor=0)
    with pytest.raises(ValueError, match="anchor"):
        bootstrap(data, np.ones(2), anchor=3)
    with pytest.raises(ValueError, match="rounds"):
        bootstrap(data, np.ones(2), anchor=0, rounds=0)


def test_unpenalised_separated_resamples_count_as_failed():
    # Family "code": arm 0 beat arm 1 in every task, so no resample has a finite unpenalised MLE.
    data = PairData(
        task_family=np.array([0, 0, 1, 1, 1]),
        task=np.array([0, 0, 1, 1, 2, 3, 4]),
        winner=np.array([0, 1, 1, 0, 0, 0, 0]),
        loser=np.array([1, 0, 0, 1, 1, 1, 1]),
        weight=np.ones(7),
        n_arms=2,
        families=FAMS,
        task_tokens=np.ones((5, 2)),
    )
    assert bootstrap(data, np.ones(2), anchor=0, rounds=50, seed=0, l2=0.0).failed_rounds == 50
    assert bootstrap(data, np.ones(2), anchor=0, rounds=50, seed=0, l2=1e-3).failed_rounds == 0


def test_fit_batch_size_bounds_memory_and_does_not_change_results():
    from elo_per_token.analysis.bootstrap import fit_batch_size

    # Bounded by the budget for any K, at least one round, never more than a draw block.
    assert fit_batch_size(5) == 250
    assert fit_batch_size(1000, 256 * 2**20) * 12 * 8 * 1000**2 <= 256 * 2**20
    assert fit_batch_size(100_000) == 1
    data = _data(np.random.default_rng(3), np.array([[0.0, 0.4, 0.9, 1.3], [0.0, -0.2, 0.5, 0.8]]), 40)
    w = np.array([0.5, 0.5])
    whole = bootstrap(data, w, anchor=0, rounds=30, seed=4)
    one_by_one = bootstrap(data, w, anchor=0, rounds=30, seed=4, fit_budget=1)
    np.testing.assert_allclose(one_by_one.elo, whole.elo, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(one_by_one.tokens_per_task, whole.tokens_per_task)
