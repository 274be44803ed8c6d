"""Cross-family merge, weight parsing and the Elo transform, checked against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elo_per_token.analysis.bootstrap import PairData, point_estimate
from elo_per_token.analysis.merge import (
    ELO_BASE,
    ELO_SCALE,
    merge_fit,
    merge_thetas,
    parse_weights,
    theta_to_elo,
)
from elo_per_token.contracts.errors import InputError

FAMS = ["math", "code", "tool_use"]


def test_constants():
    assert abs(ELO_SCALE - 173.717792761) < 1e-8
    assert ELO_BASE == 1000.0


def test_parse_weights_seed_example_and_normalisation():
    assert parse_weights("math=0.4,code=0.4,tool_use=0.2", FAMS) == pytest.approx(
        {"math": 0.4, "code": 0.4, "tool_use": 0.2}
    )
    w = parse_weights(" math = 2 , code=1,tool_use=1 ", FAMS)
    assert w == pytest.approx({"math": 0.5, "code": 0.25, "tool_use": 0.25})


def test_parse_weights_default_equal_and_absent_families_zero():
    assert parse_weights(None, FAMS) == pytest.approx({f: 1 / 3 for f in FAMS})
    assert parse_weights("", FAMS) == pytest.approx({f: 1 / 3 for f in FAMS})
    assert parse_weights("math=3", FAMS) == {"math": 1.0, "code": 0.0, "tool_use": 0.0}


@pytest.mark.parametrize(
    ("spec", "msg"),
    [
        ("math=-0.1,code=1", "finite number >= 0"),
        ("math=nan", "finite number >= 0"),
        ("chess=1", "unknown family 'chess'"),
        ("math", "malformed"),
        ("=1", "malformed"),
        ("math=", "malformed"),
        ("math=abc", "not a number"),
        ("math=0,code=0", "all weights are zero"),
        ("math=1,math=2", "twice"),
    ],
)
def test_parse_weights_rejects(spec, msg):
    with pytest.raises(InputError, match=msg) as exc:
        parse_weights(spec, FAMS)
    assert exc.value.field == "--weights"
    assert "--weights" in str(exc.value)


def test_merge_is_seed_weighted_sum_of_centred_thetas():
    t = {"math": np.array([1.0, 2.0, 3.0]), "code": np.array([0.0, 0.0, 3.0])}
    # centred: math [-1, 0, 1], code [-1, -1, 2]; weights 0.75/0.25
    got = merge_thetas(t, {"math": 0.75, "code": 0.25})
    assert np.allclose(got, [-1.0, -0.25, 1.25])


def test_merge_fits_family_offsets_from_shared_arms():
    # Before issue 12 each family was centred over its own arms ([0.75, 0.25, -2]): math's zero point then
    # depended on lacking arm 2. Now: theta_f[k] = theta[k] + b_f by weighted least squares. Arms 0,1 are
    # shared: their difference is the mean of math's (+1) and code's (-2) -> theta0 - theta1 = 0.5; arm 2 is
    # code-only, so it sits where code puts it relative to arms 0,1 (code: -2 vs their mean 1, plus half
    # of the merged 0-1 gap): theta2 - theta0 = -2 - 1 - 0.25 = -3.25; the result has mean 0.
    t = {"math": np.array([0.0, 1.0, np.nan]), "code": np.array([2.0, 0.0, -2.0])}
    got, offsets = merge_fit(t, {"math": 0.5, "code": 0.5})
    assert np.allclose(got, [1.25, 0.75, -2.0])
    assert np.allclose(got, merge_thetas(t, {"math": 0.5, "code": 0.5}))
    assert set(offsets) == {"math", "code"}


def test_merge_is_invariant_to_which_arms_a_family_lacks():
    # Families that agree up to a constant: whatever arms are missing, the merge returns the truth.
    rng = np.random.default_rng(3)
    truth = rng.normal(size=6)
    for trial in range(20):
        t = {f: truth + rng.normal() * 5 for f in FAMS}
        for f in FAMS[1:]:
            drop = rng.choice(6, size=rng.integers(0, 3), replace=False)
            t[f][drop] = np.nan
        w = dict(zip(FAMS, rng.dirichlet(np.ones(3)), strict=True))
        assert np.allclose(merge_thetas(t, w), truth - truth.mean()), trial


def _expected_counts(truth_by_family: dict[str, np.ndarray], tasks: int = 50) -> PairData:
    """Noise-free data: every task gives each pair its expected win counts (weights p and 1 - p), so the
    fit recovers the truth exactly (NaN in truth = the family never ran that arm)."""
    fams = list(truth_by_family)
    k = len(next(iter(truth_by_family.values())))
    tf, task, win, lose, wt = [], [], [], [], []
    for f, th in enumerate(truth_by_family.values()):
        for _ in range(tasks):
            t = len(tf)
            tf.append(f)
            for i in range(k):
                for j in range(i + 1, k):
                    if np.isnan(th[i]) or np.isnan(th[j]):
                        continue
                    p = 1 / (1 + np.exp(-(th[i] - th[j])))
                    task += [t, t]
                    win += [i, j]
                    lose += [j, i]
                    wt += [p, 1 - p]
    tok = np.tile(np.arange(1, k + 1) * 100.0, (len(tf), 1))
    return PairData(np.array(tf), np.array(task), np.array(win), np.array(lose), np.array(wt), k, fams, tok)


def test_clone_observed_in_one_family_equals_its_original():
    # Issue 12 case 2: arm 3 is a clone of arm 2 (same strength) that only math ran. Per-family centring
    # put it 9.5 Elo above the original; the offset merge puts it exactly on it.
    base = np.array([0.0, 0.4, 0.9])
    data = _expected_counts({"math": np.append(base, 0.9), "code": np.append(base, np.nan)})
    elo, _, _ = point_estimate(data, np.ones(2), anchor=0, l2=1e-9)
    assert elo[3] == pytest.approx(elo[2], abs=1e-3)
    assert np.allclose(elo[:3], 1000 + ELO_SCALE * base, atol=1e-3)


def test_anchor_missing_from_one_family_moves_no_arm():
    # Issue 12 case 2: the anchor (arm 0) is absent from code. Every Elo is still the truth.
    truth = np.array([0.0, 0.3, 0.5, 1.1])
    data = _expected_counts({"math": truth, "code": np.where(np.arange(4) == 0, np.nan, truth)})
    elo, _, _ = point_estimate(data, np.array([0.3, 0.7]), anchor=0, l2=1e-9)
    assert np.allclose(elo, 1000 + ELO_SCALE * truth, atol=1e-3)


def test_merge_zero_weight_family_ignored_and_unobserved_arm_nan():
    t = {"math": np.array([0.0, 1.0, np.nan]), "code": np.array([5.0, 0.0, -2.0])}
    got = merge_thetas(t, {"math": 1.0, "code": 0.0})
    assert np.allclose(got[:2], [-0.5, 0.5])
    assert math.isnan(got[2])


def test_merge_batched_rows_equal_single_rows():
    rng = np.random.default_rng(0)
    t = {f: rng.normal(size=(4, 5)) for f in FAMS}
    t["code"][1, 2] = np.nan
    w = {"math": 0.2, "code": 0.5, "tool_use": 0.3}
    batch = merge_thetas(t, w)
    for r in range(4):
        assert np.allclose(batch[r], merge_thetas({f: v[r] for f, v in t.items()}, w))


def test_theta_to_elo_and_anchor():
    th = np.array([-0.5, 0.0, 0.5])
    assert np.allclose(theta_to_elo(th), 1000 + ELO_SCALE * th)
    anchored = theta_to_elo(th, anchor=0)
    assert anchored[0] == 1000.0
    assert anchored[2] == pytest.approx(1000 + ELO_SCALE)
    # Elo differences do not depend on the anchor.
    assert np.allclose(np.diff(anchored), np.diff(theta_to_elo(th, anchor=2)))
    rows = theta_to_elo(np.array([[0.1, 0.3], [0.2, -0.2]]), anchor=1)
    assert np.all(rows[:, 1] == 1000.0)
    with pytest.raises(ValueError, match="anchor"):
        theta_to_elo(th, anchor=3)
