"""Diminishing-returns tables, frontier probability, the ratio rule and the heterogeneity warning."""

from __future__ import annotations

import numpy as np
import pytest

from elo_per_token.analysis.curve import ArmCurve
from elo_per_token.analysis.returns import (
    family_heterogeneity,
    frontier_probability,
    frontier_steps_table,
    per_strategy_table,
    returns_table,
)


def test_reproduces_seed_section_5_table():
    arms = ["greedy", "best-of-4", "majority@8", "best-of-16", "tree-search"]
    df = returns_table(
        ArmCurve(
            arms,
            ["greedy", "best_of_n", "majority", "best_of_n", "tree_search"],
            [1, 4, 8, 16, 40],
            np.array([1200.0, 4600.0, 9300.0, 18700.0, 41000.0]),
            np.array([1000.0, 1078.0, 1121.0, 1141.0, 1152.0]),
            None,
            None,
        )
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
        "d_tokens",
        "d_tokens_lo",
        "d_tokens_hi",
        "frontier_prob",
        "per_1k_resolved",
        "per_1k_nonpositive_rounds",
        "per_1k_note",
    ]


def test_three_arms_hand_computed_with_intervals():
    # Input order A, B, C; by tokens the rows are B (1000), C (2000), A (3000).
    es = np.array([[1040.0, 1000.0, 1120.0], [1070.0, 1000.0, 1080.0]])
    ts = np.array([[3000.0, 1000.0, 2000.0], [3500.0, 900.0, 2100.0]])
    df = returns_table(
        ArmCurve(
            ["A", "B", "C"],
            ["s", "g", "s"],
            [8, 1, 4],
            np.array([3000.0, 1000.0, 2000.0]),
            np.array([1050.0, 1000.0, 1100.0]),
            es,
            ts,
            level=0.9,
        )
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
    df = returns_table(ArmCurve(["a", "b", "c", "d"], list("abcd"), [1, 2, 3, 4], tokens, elo, es, None))
    d = es[:, 1:] - es[:, :-1]
    want = np.percentile(d / np.diff(tokens) * 1000, [2.5, 97.5], axis=0)
    assert df["d_elo_per_1k_lo"].to_list()[1:] == pytest.approx(want[0].tolist())
    assert df["d_elo_per_1k_hi"].to_list()[1:] == pytest.approx(want[1].tolist())
    assert df["elo_lo"].to_list() == pytest.approx(np.percentile(es, 2.5, axis=0).tolist())


def test_equal_tokens_give_null_rate_and_nan_elo_is_null():
    df = returns_table(
        ArmCurve(
            ["a", "b", "c"],
            ["x", "y", "z"],
            [1, 1, 1],
            np.array([100.0, 100.0, 300.0]),
            np.array([1000.0, 1010.0, np.nan]),
            None,
            None,
        )
    )
    assert df["d_elo"].to_list()[1] == pytest.approx(10.0)
    assert df["d_elo_per_1k"].to_list()[1] is None
    # a and b cost the same and b is stronger: a is weakly dominated, so off the frontier (issue 12 case 4;
    # before, only strictly cheaper arms could dominate and both were "on" it).
    assert df["elo"].to_list()[2] is None and df["frontier"].to_list() == [False, True, False]


def test_per_strategy_table_hand_computed():
    df = per_strategy_table(
        ArmCurve(
            ["g1", "b4", "b2", "m8"],
            ["greedy", "bon", "bon", "maj"],
            [1, 4, 2, 8],
            np.array([1000.0, 3000.0, 2000.0, 5000.0]),
            np.array([1000.0, 1060.0, 1040.0, 1050.0]),
            None,
            None,
        )
    )
    rows = df.to_dicts()
    assert [r["arm"] for r in rows] == ["g1", "b2", "b4", "m8"]
    assert [r["d_elo"] for r in rows] == [None, None, pytest.approx(20.0), None]
    assert [r["d_elo_per_1k"] for r in rows] == [None, None, pytest.approx(20.0), None]
    assert [r["frontier"] for r in rows] == [True, True, True, False]


def test_ratio_only_where_the_token_step_is_resolved():
    # Issue 12 case 3: two arms ~1% apart in cost (4000 vs 4050 tokens, true ΔElo +5.6 -> 111 per 1k). The
    # token step's interval includes 0, so the ratio is not a number; dropping the rounds with a step <= 0
    # used to print e.g. -859 [-5278, +63].
    rng = np.random.default_rng(1)
    r = 1000
    ts = np.column_stack([4000 + rng.normal(0, 30, r), 4050 + rng.normal(0, 30, r)])
    es = np.column_stack([np.full(r, 1000.0), 1005.6 + rng.normal(0, 8, r)])
    df = returns_table(
        ArmCurve(
            ["a", "b"], ["x", "y"], [1, 2], np.array([4000.0, 4050.0]), np.array([1000.0, 1005.6]), es, ts
        )
    )
    row = df.row(1, named=True)
    assert row["per_1k_resolved"] is False
    assert row["d_elo_per_1k"] is None and row["d_elo_per_1k_lo"] is None and row["d_elo_per_1k_hi"] is None
    assert row["d_tokens_lo"] < 0 < row["d_tokens_hi"]
    assert row["per_1k_nonpositive_rounds"] == int(np.sum(ts[:, 1] - ts[:, 0] <= 0)) > 0
    assert df.row(0, named=True)["per_1k_resolved"] is None  # the first row has no step at all


def test_resolved_ratio_counts_nonpositive_rounds_at_the_far_end():
    # A resolved step (interval > 0) with a few rounds <= 0: those rounds are not dropped but put at +inf
    # (their ΔElo is positive), so the upper bound is the quantile of all rounds, not of a selection.
    # (The step's spread is moderate: a ratio interval many times its value is not reported, issue 25.)
    es = np.column_stack([np.full(200, 1000.0), np.full(200, 1010.0)])
    d = np.linspace(400.0, 600.0, 200)
    d[:3] = [-5.0, 0.0, -1.0]
    ts = np.column_stack([np.full(200, 1000.0), 1000.0 + d])
    df = returns_table(
        ArmCurve(
            ["a", "b"], ["x", "y"], [1, 2], np.array([1000.0, 1500.0]), np.array([1000.0, 1010.0]), es, ts
        )
    )
    row = df.row(1, named=True)
    assert row["per_1k_resolved"] is True and row["per_1k_nonpositive_rounds"] == 3
    ratio = np.where(d > 0, 10.0 / np.where(d > 0, d, 1) * 1000, np.inf)
    assert row["d_elo_per_1k_hi"] == pytest.approx(np.percentile(ratio, 97.5))
    assert row["d_elo_per_1k_lo"] == pytest.approx(np.percentile(ratio, 2.5))
    kept = ratio[np.isfinite(ratio)]
    assert row["d_elo_per_1k_hi"] > np.percentile(kept, 97.5)  # dropping would have understated it


def test_frontier_probability_from_rounds():
    # Three arms truly all on the frontier but close: the point label marks one off, the probability
    # says how sure that is.
    es = np.array(
        [[1000.0, 1010.0, 1020.0], [1000.0, 1020.0, 1015.0], [1000.0, 995.0, 1030.0], [1000, 1010, 1010]]
    )
    ts = np.tile([100.0, 200.0, 300.0], (4, 1))
    # round 2: arm 2 below arm 1 -> off; round 3: arm 1 below arm 0 -> off; round 4: arm 2 ties arm 1 at more
    # tokens -> weakly dominated, off.
    assert frontier_probability(es, ts).tolist() == [1.0, 0.75, 0.5]
    df = returns_table(
        ArmCurve(["a", "b", "c"], ["x"] * 3, [1, 2, 3], ts[0], np.array([1000.0, 1012.0, 1010.0]), es, ts)
    )
    assert df["frontier_prob"].to_list() == [1.0, 0.75, 0.5]
    assert df["frontier"].to_list() == [True, True, False]


def test_vs_frontier_skips_dominated_arms():
    # b is dominated (costs more than a, weaker); c's step is measured from a, not from b, so b does not
    # inflate it: vs previous row c gains 80 over b, vs the frontier 20 over a.
    tok = np.array([100.0, 200.0, 300.0, 400.0])
    elo = np.array([1000.0, 940.0, 1020.0, 1030.0])
    arms = ["a", "b", "c", "d"]
    rows = returns_table(ArmCurve(arms, arms, [1, 1, 1, 1], tok, elo, None, None))
    front = frontier_steps_table(ArmCurve(arms, arms, [1, 1, 1, 1], tok, elo, None, None))
    assert rows["d_elo"].to_list()[2] == pytest.approx(80.0)
    assert front["vs"].to_list() == [None, "a", "a", "c"]
    assert front["d_elo"].to_list()[1:] == pytest.approx([-60.0, 20.0, 10.0])
    assert front["d_elo_per_1k"].to_list()[2] == pytest.approx(20.0 / 200 * 1000)


def _family_rounds(rng, means: dict[str, np.ndarray], sd: float, rounds: int = 400):
    return {f: m + rng.normal(0, sd, (rounds, m.size)) for f, m in means.items()}


def test_heterogeneity_warns_only_on_evidence():
    rng = np.random.default_rng(5)
    arms = ["greedy", "bo4", "bo8"]
    w = {"math": 0.6, "code": 0.4}
    # Issue 12 case 8: math has the largest weight and effects, code agrees within noise: no warning
    # (the share-of-gain rule said "math supplies 109% ... while other families lose").
    agree = {"math": np.array([0.0, 0.10, 0.20]), "code": np.array([0.0, 0.02, 0.16])}
    assert family_heterogeneity(agree, _family_rounds(rng, agree, 0.08), w, arms) == []
    # A real interaction: bo4 is much stronger in math than in code, far beyond the noise.
    split = {"math": np.array([0.0, 0.9, 0.2]), "code": np.array([0.0, -0.3, 0.2])}
    msgs = family_heterogeneity(split, _family_rounds(rng, split, 0.08), w, arms)
    assert msgs and msgs[0].startswith("bo4: the families disagree")
    # One family: nothing to test.
    assert (
        family_heterogeneity(
            {"math": agree["math"]}, {"math": _family_rounds(rng, agree, 0.1)["math"]}, w, arms
        )
        == []
    )


def test_heterogeneity_false_alarm_rate_is_bounded():
    # No interaction, 200 experiments: each family's estimate = truth + noise of the stated sd; the
    # Bonferroni-adjusted test should warn in about alpha = 5% of experiments or fewer.
    rng = np.random.default_rng(11)
    truth = np.array([0.0, 0.2, 0.35, 0.5])
    alarms = 0
    for _ in range(200):
        point = {f: truth + rng.normal(0, 0.1, 4) for f in ("math", "code", "tool")}
        rounds = _family_rounds(rng, point, 0.1, rounds=300)
        alarms += bool(family_heterogeneity(point, rounds, {"math": 1, "code": 1, "tool": 1}, list("abcd")))
    assert alarms <= 18, alarms  # 5% of 200 = 10; binomial 99.9% bound ~ 19


def test_rejects_bad_shapes():
    with pytest.raises(ValueError, match="same length"):
        returns_table(ArmCurve(["a"], ["a", "b"], [1], np.ones(1), np.ones(1), None, None))
    with pytest.raises(ValueError, match="elo_samples"):
        returns_table(ArmCurve(["a", "b"], ["a", "b"], [1, 2], np.ones(2), np.ones(2), np.ones((3, 3)), None))
    with pytest.raises(ValueError, match="level"):
        returns_table(ArmCurve(["a"], ["a"], [1], np.ones(1), np.ones(1), None, None, level=1.5))
