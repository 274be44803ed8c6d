"""The "missing ones are the harder tasks" check is a permutation test with a stated level (issue 37 item 7),
not a fixed 0.1 gap: its p-value against hand computation, its size under missing-completely-at-random, its
power when an arm fails on the hardest tasks, the large-family normal limit, and hostile inputs."""

from __future__ import annotations

import numpy as np
import polars as pl
from bounds import bounded
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.analysis.missing import HARDER_ALPHA, PERMUTATIONS, flagged_arms, harder_p_value


def test_p_value_by_hand_one_missing_task_of_four() -> None:
    # The missing task is the hardest (0.0) of four: a random single task is that hard with probability 1/4.
    p = harder_p_value(np.array([0.0, 1.0, 1.0, 1.0]), np.array([True, False, False, False]), np.zeros(4))
    assert abs(p - 0.25) < 0.035, p
    # Two of four missing, the two hardest (0.0, 0.2): 1 of C(4,2) = 6 pairs is that hard.
    p2 = harder_p_value(np.array([0.0, 0.2, 0.9, 1.0]), np.array([True, True, False, False]), np.zeros(4))
    assert abs(p2 - 1 / 6) < 0.03, p2
    # Nothing missing, or the easiest tasks missing: never flagged.
    assert harder_p_value(np.array([0.5, 0.6]), np.array([False, False]), np.zeros(2)) == 1.0
    assert harder_p_value(np.array([0.0, 1.0]), np.array([False, True]), np.zeros(2)) == 1.0


def test_strata_keep_each_familys_missing_count() -> None:
    """A family that is harder overall is not evidence: with one missing task in each of two families of very
    different difficulty, a random draw within each family is as hard as the observed one half the time."""
    d = np.array([0.0, 0.1, 0.9, 1.0])
    fam = np.array(["hard", "hard", "easy", "easy"])
    p = harder_p_value(d, np.array([False, True, True, False]), fam)
    assert abs(p - 0.75) < 0.04, p  # (0.1, 0.9) is <= the sum in 3 of the 4 equally likely draws


def test_size_under_missing_completely_at_random_and_power_on_the_hardest_tasks() -> None:
    rng = np.random.default_rng(11)
    n, m, runs = 60, 6, 300
    false = 0
    for r in range(runs):
        d = rng.beta(2, 2, n)
        miss = np.zeros(n, dtype=bool)
        miss[rng.choice(n, m, replace=False)] = True
        false += harder_p_value(d, miss, np.zeros(n), seed=r) < HARDER_ALPHA
    assert false / runs <= HARDER_ALPHA + 3 * np.sqrt(HARDER_ALPHA * (1 - HARDER_ALPHA) / runs), false
    d = rng.beta(2, 2, n)
    miss = d <= np.quantile(d, 0.2)  # fails on the hardest 20%
    assert harder_p_value(d, miss, np.zeros(n)) <= 1 / (1 + PERMUTATIONS) + 1e-12


def test_large_families_use_the_normal_limit_or_draws_with_replacement() -> None:
    rng = np.random.default_rng(3)
    d = rng.random(30_000)  # 1999 x 30,000 draws is over the permutation budget: the normal limit
    miss = np.zeros(d.size, dtype=bool)
    miss[np.argsort(d)[:400]] = True  # clearly harder
    assert harder_p_value(d, miss, np.zeros(d.size)) < 0.001
    miss = np.zeros(d.size, dtype=bool)
    miss[rng.choice(d.size, 3000, replace=False)] = True  # at random: p is not small
    small = d[:5000]
    msmall = miss[:5000]
    p_norm, p_perm = harder_p_value(d, miss, np.zeros(d.size)), harder_p_value(small, msmall, np.zeros(5000))
    assert p_norm > 0.001 and p_perm > 0.001
    # 2 of 30,000 missing (draws with replacement): the two hardest tasks give p at its floor; two at the
    # median give about the share of random pairs at most that hard (~0.5).
    two = np.zeros(d.size, dtype=bool)
    two[np.argsort(d)[:2]] = True
    assert harder_p_value(d, two, np.zeros(d.size)) <= 2 / (1 + PERMUTATIONS)
    mid = np.zeros(d.size, dtype=bool)
    mid[np.argsort(d)[15_000:15_002]] = True
    assert 0.4 < harder_p_value(d, mid, np.zeros(d.size)) < 0.6


def test_flagged_arms_apply_the_level_over_the_arms_tested() -> None:
    table = pl.DataFrame({"arm": ["a", "b", "c"], "p_harder": [0.01, 0.02, None]})
    # Bonferroni over 3 arms: 0.05 / 3 = 0.0167 -> only a
    assert flagged_arms(table) == ["a"]
    assert flagged_arms(table.head(1)) == ["a"] and flagged_arms(None) == []


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    d=st.lists(st.one_of(st.floats(0, 1), st.sampled_from([0.0, 1.0, 0.5])), min_size=1, max_size=400),
    data=st.data(),
)
def test_any_input_gives_a_p_value_in_bounds_quickly(d: list[float], data: st.DataObject) -> None:
    n = len(d)
    miss = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    fam = np.array(data.draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=n, max_size=n)))
    p = bounded(lambda: harder_p_value(np.array(d), miss, fam), time_s=5.0, memory_mb=128)
    assert 0.0 < p <= 1.0
    if miss.all() or not miss.any():
        assert p == 1.0 or miss.all()


def test_budget_pick_fits_with_its_token_interval_not_only_its_mean() -> None:
    """Issue 37 item 7: an arm whose mean is under the budget but whose interval is not (a rare 50x-long
    reply) is not the budget pick; the text states the upper end; without a bootstrap it says it may exceed."""
    from elo_per_token.analysis.recommend import parse_budget, recommend

    arms = ["cheap@1", "spiky@4"]
    elo, tok = np.array([1000.0, 1060.0]), np.array([800.0, 2900.0])
    rng = np.random.default_rng(0)
    elo_s = np.column_stack([rng.normal(1000, 0.1, 400), rng.normal(1060, 5, 400)])
    tok_s = np.column_stack([rng.normal(800, 10, 400), 2900 + rng.exponential(400, 400)])  # upper end ~4k
    rec = recommend(arms, elo, tok, elo_s, budget=parse_budget("3k"), tokens_samples=tok_s)
    assert rec["budget"]["arm"] == "cheap@1", rec["budget"]
    assert "at most" in rec["budget"]["text"] and "upper end of its 95% interval" in rec["budget"]["text"]
    roomy = recommend(arms, elo, tok, elo_s, budget=parse_budget("5k"), tokens_samples=tok_s)
    assert roomy["budget"]["arm"] == "spiky@4"
    point = recommend(arms, elo, tok, None, budget=parse_budget("3k"))
    assert point["budget"]["arm"] == "spiky@4" and "may exceed the budget" in point["budget"]["text"]
    none = recommend(arms, elo, tok, elo_s, budget=parse_budget("500"), tokens_samples=tok_s)
    assert none["budget"]["arm"] is None and "no arm fits" in none["budget"]["text"]
