"""Cross-family merge, weight parsing and the Elo transform, checked against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.merge import ELO_BASE, ELO_SCALE, merge_thetas, parse_weights, theta_to_elo
from contracts.errors import InputError

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


def test_merge_renormalises_over_families_that_observed_the_arm():
    t = {"math": np.array([0.0, 1.0, np.nan]), "code": np.array([2.0, 0.0, -2.0])}
    # math centred over arms 0,1: [-0.5, 0.5, -]; code centred: [2, 0, -2]
    got = merge_thetas(t, {"math": 0.5, "code": 0.5})
    assert np.allclose(got, [0.75, 0.25, -2.0])


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
