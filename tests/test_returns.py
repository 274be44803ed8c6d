"""Diminishing-returns tables and the dominance warning, checked against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.merge import ELO_SCALE
from analysis.returns import family_dominance, per_strategy_table, returns_table


def test_reproduces_seed_section_5_table():
    arms = ["greedy", "best-of-4", "majority@8", "best-of-16", "tree-search"]
    df = returns_table(
        arms,
        ["greedy", "best_of_n", "majority", "best_of_n", "tree_search"],
        [1, 4, 8, 16, 40],
        np.array([1200.0, 4600.0, 9300.0, 18700.0, 41000.0]),
        np.array([1000.0, 1078.0, 1121.0, 1141.0, 1152.0]),
        None,
        None,
    )
    assert df["arm"].to_list() == arms
    assert df["d_elo"].to_list()[0] is None
    assert df["d_elo"].to_list()[1:] == pytest.approx([78, 43, 20, 11])
    assert df["d_elo_per_1k"].to_list()[1:] == pytest.approx([78 / 3.4, 43 / 4.7, 20 / 9.4, 11 / 22.3])
    assert round(df["d_elo_per_1k"][1], 1) == 22.9  # the seed's printed figure
    assert df["frontier"].to_list() == [True] * 5
    assert df["elo_lo"].null_count() == 5 and df["d_elo_per_1k_hi"].null_count() == 5
    assert df.columns == [
        "arm",
        "strategy",
        "budget_n",
        "tokens_per_task",
        "elo",
        "elo_lo",
        "elo_hi",
        "d_elo",
        "d_elo_lo",
        "d_elo_hi",
        "d_elo_per_1k",
        "d_elo_per_1k_lo",
        "d_elo_per_1k_hi",
        "frontier",
    ]


def test_three_arms_hand_computed_with_intervals():
    # Input order A, B, C; by tokens the rows are B (1000), C (2000), A (3000).
    es = np.array([[1040.0, 1000.0, 1120.0], [1070.0, 1000.0, 1080.0]])
    ts = np.array([[3000.0, 1000.0, 2000.0], [3500.0, 900.0, 2100.0]])
    df = returns_table(
        ["A", "B", "C"],
        ["s", "g", "s"],
        [8, 1, 4],
        np.array([3000.0, 1000.0, 2000.0]),
        np.array([1050.0, 1000.0, 1100.0]),
        es,
        ts,
        level=0.9,
    )
    rows = df.to_dicts()
    assert [r["arm"] for r in rows] == ["B", "C", "A"]
    assert [r["budget_n"] for r in rows] == [1, 4, 8]
    assert [r["d_elo"] for r in rows] == [None, pytest.approx(100.0), pytest.approx(-50.0)]
    assert [r["d_elo_per_1k"] for r in rows] == [None, pytest.approx(100.0), pytest.approx(-50.0)]
    assert [r["frontier"] for r in rows] == [True, True, False]  # A costs more than C and scores lower
    # With 2 rounds and level 0.9, the 5th/95th percentiles are min + 0.05/0.95 * (max - min).
    b, c, a = rows
    assert (b["elo_lo"], b["elo_hi"]) == (1000.0, 1000.0)
    assert (c["elo_lo"], c["elo_hi"]) == pytest.approx((1082.0, 1118.0))
    assert (a["elo_lo"], a["elo_hi"]) == pytest.approx((1041.5, 1068.5))
    assert (c["d_elo_lo"], c["d_elo_hi"]) == pytest.approx((82.0, 118.0))
    assert (a["d_elo_lo"], a["d_elo_hi"]) == pytest.approx((-76.5, -13.5))
    # per-1k samples: C vs B [120/1.0, 80/1.2]; A vs C [-80/1.0, -10/1.4]
    lo, hi = 80 / 1.2, 120.0
    assert (c["d_elo_per_1k_lo"], c["d_elo_per_1k_hi"]) == pytest.approx(
        (lo + 0.05 * (hi - lo), lo + 0.95 * (hi - lo))
    )
    lo, hi = -80.0, -10 / 1.4
    assert (a["d_elo_per_1k_lo"], a["d_elo_per_1k_hi"]) == pytest.approx(
        (lo + 0.05 * (hi - lo), lo + 0.95 * (hi - lo))
    )
    assert b["d_elo_lo"] is None and b["d_elo_per_1k_hi"] is None


def test_intervals_match_numpy_percentiles_without_token_samples():
    rng = np.random.default_rng(0)
    elo = np.array([1000.0, 1030.0, 1045.0, 1050.0])
    tokens = np.array([500.0, 1500.0, 4000.0, 9000.0])
    es = elo + rng.normal(0, 15, (300, 4))
    df = returns_table(["a", "b", "c", "d"], list("abcd"), [1, 2, 3, 4], tokens, elo, es, None)
    d = es[:, 1:] - es[:, :-1]
    want = np.percentile(d / np.diff(tokens) * 1000, [2.5, 97.5], axis=0)
    assert df["d_elo_per_1k_lo"].to_list()[1:] == pytest.approx(want[0].tolist())
    assert df["d_elo_per_1k_hi"].to_list()[1:] == pytest.approx(want[1].tolist())
    assert df["elo_lo"].to_list() == pytest.approx(np.percentile(es, 2.5, axis=0).tolist())


def test_equal_tokens_give_null_rate_and_nan_elo_is_null():
    df = returns_table(
        ["a", "b", "c"],
        ["x", "y", "z"],
        [1, 1, 1],
        np.array([100.0, 100.0, 300.0]),
        np.array([1000.0, 1010.0, np.nan]),
        None,
        None,
    )
    assert df["d_elo"].to_list()[1] == pytest.approx(10.0)
    assert df["d_elo_per_1k"].to_list()[1] is None
    assert df["elo"].to_list()[2] is None and df["frontier"].to_list() == [True, True, False]


def test_per_strategy_table_hand_computed():
    df = per_strategy_table(
        ["g1", "b4", "b2", "m8"],
        ["greedy", "bon", "bon", "maj"],
        [1, 4, 2, 8],
        np.array([1000.0, 3000.0, 2000.0, 5000.0]),
        np.array([1000.0, 1060.0, 1040.0, 1050.0]),
        None,
        None,
    )
    rows = df.to_dicts()
    assert [r["arm"] for r in rows] == ["g1", "b2", "b4", "m8"]
    assert [r["d_elo"] for r in rows] == [None, None, pytest.approx(20.0), None]
    assert [r["d_elo_per_1k"] for r in rows] == [None, None, pytest.approx(20.0), None]
    assert [r["frontier"] for r in rows] == [True, True, True, False]


def test_family_dominance_hand_computed():
    arms = ["greedy", "bo4", "bo8", "maj", "solo"]
    # theta differences vs greedy (arm 0): bo4 math .6 code .1 tool .1 -> contributions .24/.04/.02
    th = {
        "math": np.array([0.0, 0.6, 0.2, 0.0, np.nan]),
        "code": np.array([0.0, 0.1, 0.2, 0.0, np.nan]),
        "tool_use": np.array([0.0, 0.1, 0.2, 0.0, 0.9]),
    }
    w = {"math": 0.4, "code": 0.4, "tool_use": 0.2}
    warnings = family_dominance(th, w, arms)
    assert len(warnings) == 1
    msg = warnings[0]
    assert msg.startswith("bo4: family 'math' supplies 80%")
    assert f"{0.3 * ELO_SCALE:+.0f} Elo" in msg and "greedy" in msg
    # A stricter threshold flags bo8 too (shares .4/.4/.2); solo (one family) and maj (no gain) never.
    assert [m.split(":")[0] for m in family_dominance(th, w, arms, threshold=0.35)] == ["bo4", "bo8"]
    # Negative contributions from other families raise the dominant share above 1.
    th2 = {"math": np.array([0.0, 0.5]), "code": np.array([0.0, -0.3])}
    assert family_dominance(th2, {"math": 0.5, "code": 0.5}, ["a", "b"])[0].startswith(
        "b: family 'math' supplies 250%"
    )


def test_rejects_bad_shapes():
    with pytest.raises(ValueError, match="same length"):
        returns_table(["a"], ["a", "b"], [1], np.ones(1), np.ones(1), None, None)
    with pytest.raises(ValueError, match="elo_samples"):
        returns_table(["a", "b"], ["a", "b"], [1, 2], np.ones(2), np.ones(2), np.ones((3, 3)), None)
    with pytest.raises(ValueError, match="level"):
        returns_table(["a"], ["a"], [1], np.ones(1), np.ones(1), None, None, level=1.5)
