"""Adaptive sweeps (issue 29): the stopping statistics, the round loop, the replay executor, and
`ept sweep --adaptive` against the simulator on the local executor (interrupted, then resumed)."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
import tracemalloc
from dataclasses import replace

import numpy as np
import pytest
from fixtures_adaptive import synthetic_table as _table
from fixtures_plans import plan_toml
from fixtures_sim import SIM_KEY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.coordinator.adaptive.core import round_bounds, run_adaptive, task_order
from elo_per_token.coordinator.adaptive.events import RoundEvent
from elo_per_token.coordinator.adaptive.replay import (
    full_rule_decisions,
    reach,
    replay_adaptive,
    replay_runner,
)
from elo_per_token.coordinator.adaptive.run_table import RunTable
from elo_per_token.coordinator.adaptive.sequential import (
    OFF,
    ON,
    OPEN,
    assess,
    claim_power,
    decision_z,
    futile,
    holm_claims,
    holm_step_z,
    needs_data,
    pair_stats,
    reachable_needs,
    report_z,
)
from elo_per_token.coordinator.adaptive.settings import AdaptiveSettings


def test_task_order_is_a_stratified_permutation_and_rounds_cover_the_grid():
    fams = ["m"] * 60 + ["c"] * 30 + ["t"] * 30
    order = task_order(fams, seed=3)
    assert sorted(order) == list(range(120)) and order != list(range(120))
    bounds = round_bounds(120, 10)
    assert bounds[0][0] == 0 and bounds[-1][1] == 120 and len(bounds) == 10
    for lo, hi in bounds:  # every round holds each family in proportion (12 tasks: 6 m, 3 c, 3 t, +-1)
        got = [fams[i] for i in order[lo:hi]]
        assert abs(got.count("m") - 6) <= 1 and abs(got.count("c") - 3) <= 1 and abs(got.count("t") - 3) <= 1
    assert task_order(fams, seed=3) == order and task_order(fams, seed=4) != order


def test_dominated_expensive_arms_stop_early_and_the_report_says_why():
    table = _table((0.0, 1.0, 1.5, -0.5, -0.8), (500, 1500, 4000, 20000, 40000))
    out = replay_adaptive(table, AdaptiveSettings(epsilon_elo=0, seed=1))
    rep = {r.arm: r for r in out.result.reports}
    for arm in ("arm3", "arm4"):
        assert rep[arm].status == OFF and rep[arm].stopped_round is not None and rep[arm].tasks < 600
        assert "off the frontier" in rep[arm].reason and "cheaper and stronger" in rep[arm].reason
    assert out.token_share < 0.5  # the expensive arms are ~90% of the grid's tokens
    assert not any(out.wrong) and out.truth == [True, True, True, False, False]
    # The spend is the sum of what the replay returned: each job's real tokens, counted once.
    ran = sum(r.tokens for r in out.result.reports)
    assert out.result.tokens_spent == pytest.approx(ran)


def test_width_keeps_frontier_arms_running_until_their_step_is_resolved():
    table = _table((0.0, 1.2, 2.4, -0.5), (500, 1500, 4000, 30000), tasks=600, seed=4)
    plain = replay_adaptive(table, AdaptiveSettings(epsilon_elo=0, seed=1)).result
    loose = replay_adaptive(table, AdaptiveSettings(epsilon_elo=0, seed=1, width=1e9)).result
    tight = replay_adaptive(table, AdaptiveSettings(epsilon_elo=0, seed=1, width=1e-6)).result
    assert [r.status for r in plain.reports] == [ON, ON, ON, OFF]
    assert loose.tokens_spent == plain.tokens_spent  # any resolved step is narrower than 1e9
    # A width no interval reaches: the frontier arms above the cheapest run the whole grid.
    assert tight.stop_reason == "grid exhausted" and tight.reports[2].tasks == 600 > plain.reports[2].tasks
    step = tight.reports[2].per_1k
    assert step is not None and step[0] < step[1] < step[2]  # ΔElo per 1k over arm1, with its interval


def test_arms_too_close_spend_the_whole_grid_and_stay_open():
    table = _table((1.0, 1.0, 1.0), (1000, 1200, 1400), tasks=300, seed=2)
    out = replay_adaptive(table, AdaptiveSettings(epsilon_elo=0, seed=0, futility=False))
    assert out.result.stop_reason == "grid exhausted" and out.token_share > 0.95
    statuses = [r.status for r in out.result.reports]
    assert statuses[1:] == [OPEN, OPEN]  # never a confident wrong frontier for equal arms
    assert all("stayed open" in r.reason for r in out.result.reports[1:])


def test_futility_stops_arms_the_grid_cannot_separate_and_says_open():
    table = _table((1.0, 1.0, 1.0), (1000, 1200, 1400), tasks=300, seed=2)
    out = replay_adaptive(table, AdaptiveSettings(epsilon_elo=0, seed=0))
    assert out.token_share < 0.5 and "not separable within the grid" in out.result.stop_reason
    reports = out.result.reports
    assert [r.status for r in reports[1:]] == [OPEN, OPEN]  # open, never a confident frontier
    assert all("not separable within the grid" in r.reason and "covers 0" in r.reason for r in reports[1:])
    assert all(r.tasks < 300 and r.stopped_round is not None for r in reports[1:])


def test_status_says_why_each_arm_stopped(tmp_path):
    import io

    from rich.console import Console

    from elo_per_token.coordinator.adaptive.cli import print_state
    from elo_per_token.coordinator.adaptive.state import write_state
    from elo_per_token.ledger import open_ledger

    table = _table((0.0, 1.0, 1.0, -0.5), (500, 1000, 1200, 5000), tasks=300, seed=2)
    events: list[RoundEvent] = []
    res = run_adaptive(
        table.families,
        table.arms,
        replay_runner(table),
        AdaptiveSettings(epsilon_elo=0),
        on_round=events.append,
    )
    led = open_ledger(tmp_path / "led")
    write_state(led, "r", replace(events[-1], finished=True, stop_reason=res.stop_reason))
    buf = io.StringIO()
    print_state(led, "r", Console(file=buf, width=400))
    out = buf.getvalue()
    stopped = [r for r in res.reports if r.stopped_round is not None]
    assert stopped and "why each stopped" in out
    for r in stopped:
        assert f"{r.arm}: " in out and f"(after round {r.stopped_round + 1})" in out
    assert res.reports[3].status == OFF and "arm3: off: " in out  # the costly weak arm is dominated


def test_token_cap_stops_the_sweep():
    table = _table((0.0, 0.3, 0.6), (500, 900, 1300), tasks=300)
    full = replay_adaptive(table, AdaptiveSettings(epsilon_elo=0, futility=False))
    assert full.result.tokens_spent > 200_000  # without a cap these arms run (nearly) the whole grid
    out = replay_adaptive(table, AdaptiveSettings(epsilon_elo=0, max_tokens=200_000, futility=False))
    assert out.result.stop_reason.startswith("token cap") and "next round" in out.result.stop_reason
    # Stopped before the round that would pass the cap: under it, and within about one round of it.
    assert 200_000 - 30 * (500 + 900 + 1300) * 2 < out.result.tokens_spent <= 200_000
    assert all("stayed open (token cap" in r.reason for r in out.result.reports if r.status == OPEN)


def test_z_spends_the_error_budget_over_rounds_and_comparisons():
    assert report_z(0.05, 1) == pytest.approx(1.95996, abs=1e-4)
    assert report_z(0.05, 9) > report_z(0.05, 1)
    assert decision_z(0.05, 9, 12) > report_z(0.05, 9)
    with pytest.raises(ValueError):
        report_z(0.0, 3)


def test_a_run_of_ties_is_not_certainty():
    s = np.ones((50, 2))  # both arms always right: 50 ties
    t = np.column_stack([np.full(50, 100.0), np.full(50, 200.0)])
    a = assess(pair_stats(s, t, np.ones(50)), z=3.0, min_tasks=10)
    assert not a.stronger.any()
    assert a.status == [ON, OPEN]  # the cheaper arm is on; the other could still be as strong: open


_finite = st.one_of(st.floats(-1e12, 1e12), st.just(float("nan")), st.sampled_from([0.0, 1.0]))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    k=st.integers(1, 6),
    t=st.integers(0, 40),
    data=st.data(),
)
def test_hostile_results_give_bounded_decisions_in_bounded_time_and_memory(k, t, data):
    """Degenerate and hostile stored results (NaN, constant, huge, negative tokens, one task, no task): the
    policy ends with a decision per arm, within the grid, fast and in little memory."""
    scores = np.asarray(data.draw(st.lists(_finite, min_size=t * k, max_size=t * k)), dtype=float).reshape(
        t, k
    )
    tokens = np.asarray(data.draw(st.lists(_finite, min_size=t * k, max_size=t * k)), dtype=float).reshape(
        t, k
    )
    fams = [data.draw(st.sampled_from(["a", "b", "\u202e", ""])) for _ in range(t)]
    if t == 0:
        return
    table = RunTable(
        [f"t{i}" for i in range(t)], fams, [f"x{i}" for i in range(k)], ["s"] * k, [1] * k, scores, tokens
    )
    tracemalloc.start()
    t0 = time.perf_counter()
    out = replay_adaptive(
        table, AdaptiveSettings(epsilon_elo=0, rounds=data.draw(st.integers(1, 12)), min_rounds=1)
    )
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 20 and peak < 50 * 2**20
    assert {r.status for r in out.result.reports} <= {ON, OFF, OPEN}
    assert all(0 <= r.tasks <= t for r in out.result.reports)
    assert out.result.rounds_run <= out.result.rounds_planned <= max(1, t)


_degenerate = st.sampled_from(["ties", "nan", "one", "huge", "zero", "random"])


def _degenerate_matrix(kind: str, t: int, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    scores = rng.integers(0, 2, (t, k)).astype(float)
    tokens = rng.uniform(1, 1e4, (t, k))
    if kind == "ties":
        scores[:] = 1.0
    elif kind == "nan":
        scores[:], tokens[:] = np.nan, np.nan
    elif kind == "one":
        scores, tokens = scores[:1], tokens[:1]
    elif kind == "huge":
        tokens[:] = 1e300
    elif kind == "zero":
        tokens[:] = 0.0
    return scores, tokens


@settings(max_examples=80, deadline=None)
@given(kind=_degenerate, t=st.integers(1, 400), k=st.integers(1, 7), seed=st.integers(0, 2**16),
       power=st.floats(0.01, 0.99), remaining=st.integers(0, 10**6))  # fmt: skip
def test_stopping_functions_on_degenerate_matrices_decide_nothing_from_no_evidence(
    kind, t, k, seed, power, remaining
):
    """All ties, all NaN, one task, huge or zero tokens: a valid assessment in bounded time and memory; no
    confident quality claim without a score difference, no claim at all from no data or one task, and
    futility only ever marks open arms (it never decides)."""
    scores, tokens = _degenerate_matrix(kind, t, k, np.random.default_rng(seed))
    tracemalloc.start()
    t0 = time.perf_counter()
    z = decision_z(0.05, 9, k)
    a = assess(pair_stats(scores, tokens, np.ones(scores.shape[0])), z, 2)
    n_end = a.stats.n + remaining
    fut = futile(a, n_end, z, power)
    fut2, wants = reachable_needs(a, n_end, z, power)
    need = needs_data(a, None, fut, wants)
    cp = claim_power(a.stats.q, a.stats.q_se, a.stats.n, n_end, z)
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 5 and peak < 20 * 2**20
    assert set(a.status) <= {ON, OFF, OPEN} and len(a.status) == len(fut) == len(need) == k
    assert np.all((cp >= 0) & (cp <= 1))
    assert all(a.status[i] == OPEN for i in range(k) if fut[i]) and fut2 == fut
    # Only an open arm with a reachable decision wants comparisons, never with itself; it keeps running.
    assert not wants.diagonal().any()
    assert all(a.status[i] == OPEN and not fut[i] and need[i] for i in range(k) if wants[i].any())
    live = [a.status[i] == OPEN and not fut[i] for i in range(k)]
    assert need == [live[i] or (a.status[i] != OFF and bool(wants[:, i].any())) for i in range(k)]
    if kind in ("ties", "nan", "one"):
        assert not a.stronger.any()  # no score difference (or no data): no confident quality claim
    if kind in ("nan", "one") and k > 1:
        assert not a.cheaper.any() and a.status == [OPEN] * k
    if kind == "zero":
        assert not a.cheaper.any()  # equal tokens never make an arm confidently cheaper


@settings(max_examples=60, deadline=None)
@given(t=st.integers(2, 300), k=st.integers(2, 8), seed=st.integers(0, 2**16), looks=st.integers(1, 20),
       kind=_degenerate)  # fmt: skip
def test_holm_claims_include_every_bonferroni_claim_and_keep_the_claims_direction(t, k, seed, looks, kind):
    """Holm's first step is the Bonferroni split over the arm's 2 (K - 1) tests: it claims at least as much;
    every claim points the way the estimate does, and pairs without data claim nothing."""
    rng = np.random.default_rng(seed)
    scores, tokens = _degenerate_matrix(kind, t, k, rng)
    scores = scores + (rng.uniform(size=scores.shape) < 0.3) * rng.integers(0, 2, k)[None, :]
    stats = pair_stats(scores, tokens, np.ones(scores.shape[0]))
    stronger, cheaper = holm_claims(stats, 0.05, looks, 2)
    bonf = assess(stats, decision_z(0.05, looks, k), 2)
    assert np.all(stronger >= bonf.stronger) and np.all(cheaper >= bonf.cheaper)
    with np.errstate(invalid="ignore"):
        assert not np.any(stronger & ~(stats.q > 0)) and not np.any(cheaper & ~(stats.c < 0))
    assert not np.any((stronger | cheaper) & (stats.n < 2))


@settings(max_examples=60, deadline=None)
@given(t=st.integers(2, 300), k=st.integers(1, 8), seed=st.integers(0, 2**16), looks=st.integers(1, 20),
       kind=_degenerate, remaining=st.integers(0, 10**5), power=st.floats(0.01, 0.99))  # fmt: skip
def test_holm_step_z_lies_between_the_last_and_first_holm_step_and_calls_fewer_arms_futile(
    t, k, seed, looks, kind, remaining, power
):
    """The final look tests an open claim at a Holm step: never stricter than the flat Bonferroni split
    (decision_z), never laxer than a single test per look (report_z); a laxer z only raises conditional
    power, so every arm futile at holm_step_z is futile at decision_z too. Bounded time and memory."""
    rng = np.random.default_rng(seed)
    scores, tokens = _degenerate_matrix(kind, t, k, rng)
    scores = scores + (rng.uniform(size=scores.shape) < 0.3) * rng.integers(0, 2, k)[None, :]
    tracemalloc.start()
    t0 = time.perf_counter()
    stats = pair_stats(scores, tokens, np.ones(scores.shape[0]))
    z = holm_step_z(stats, 0.05, looks, 2)
    a = assess(stats, decision_z(0.05, looks, k), 2)
    n_end = stats.n + remaining
    fut_holm, fut_flat = futile(a, n_end, z, power), futile(a, n_end, decision_z(0.05, looks, k), power)
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 5 and peak < 20 * 2**20
    assert z.shape == (k, k) and np.all(np.isfinite(z))
    assert np.all(z <= decision_z(0.05, looks, k) + 1e-12) and np.all(z >= report_z(0.05, looks) - 1e-12)
    assert all(f <= g for f, g in zip(fut_holm, fut_flat, strict=True))


def test_holm_step_z_is_bonferroni_while_nothing_is_settled_and_one_test_when_one_is_left():
    """3 arms: with no data every test is open (z = the flat split over 2 (K - 1) = 4 tests); with arm 0
    cheaper than both by a mile and arm 1 cheaper than arm 2, every token test is settled, so arm 2's family
    (and arm 1's) has its 2 quality tests left and arm 0's quality tests face z over 2 tests."""
    none = pair_stats(np.full((5, 3), np.nan), np.full((5, 3), np.nan), np.ones(5))
    assert np.allclose(holm_step_z(none, 0.05, 4, 2), decision_z(0.05, 4, 3))
    rng = np.random.default_rng(0)
    tokens = np.array([100.0, 1000.0, 2000.0])[None, :] * rng.lognormal(0, 0.05, (200, 3))
    scores = (rng.uniform(size=(200, 3)) < 0.5).astype(float)  # equal arms: no quality test settles
    z = holm_step_z(pair_stats(scores, tokens, np.ones(200)), 0.05, 4, 2)
    assert np.allclose(z[0, 1], report_z(0.05, 4 * 2)) and np.allclose(z[1, 2], report_z(0.05, 4 * 2))


def test_reach_counts_the_full_grids_decisions_the_adaptive_sweep_makes_the_same_way():
    """Full grid: arm 0 on, arm 1 on, arm 2 off, arm 3 open. Adaptive: arm 0 on (reached), arm 1 open (not),
    arm 2 on (the other way: not), arm 3 off (the full grid decided nothing there: not counted)."""
    assert reach([ON, OPEN, ON, OFF], [ON, ON, OFF, OPEN]) == (1, 3)
    assert reach([OPEN, OPEN], [OPEN, OPEN]) == (0, 0)


def test_full_rule_decisions_on_a_grid_with_a_known_answer_and_the_replay_reaches_them():
    """Arm 0 cheapest (never solves), arm 1 twice its cost (always solves), arm 2 costliest (never solves):
    the same test on the whole grid says on, on, off (arm 1 cheaper and stronger than arm 2); two equal arms
    at equal cost stay open. The adaptive replay makes the first three decisions: reach 3 of 3."""
    t = 300
    fam = [("a", "b", "c")[i % 3] for i in range(t)]
    rng = np.random.default_rng(1)
    tokens = np.array([100.0, 200.0, 300.0])[None, :] * rng.lognormal(0, 0.1, (t, 3))
    scores = np.tile([0.0, 1.0, 0.0], (t, 1))
    arms = ["cheap", "strong", "dominated"]
    table = RunTable([f"t{i}" for i in range(t)], fam, arms, arms, [1] * 3, scores, tokens)
    settings_ = AdaptiveSettings(epsilon_elo=0)
    assert full_rule_decisions(table, settings_) == [ON, ON, OFF]
    out = replay_adaptive(table, settings_)
    assert out.full_rule == [ON, ON, OFF] and out.reach == (3, 3)
    assert out.token_share < 0.5
    equal = RunTable(table.tasks, fam, ["x", "y"], ["x", "y"], [1, 1], (rng.uniform(size=(t, 2)) < 0.5) * 1.0,
                     np.full((t, 2), 100.0))  # fmt: skip
    assert full_rule_decisions(equal, settings_) == [OPEN, OPEN]
    assert replay_adaptive(equal, settings_).reach == (0, 0)


def test_claim_power_is_1_when_confident_0_when_no_data_can_come_and_falls_with_the_estimate():
    z = 3.0
    conf = claim_power(np.array(0.5), np.array(0.1), np.array(100), np.array(100), z)
    stuck = claim_power(np.array(0.05), np.array(0.1), np.array(100), np.array(100), z)
    assert float(conf) == 1.0 and float(stuck) == 0.0
    powers = [
        float(claim_power(np.array(m), np.array(0.1), np.array(50), np.array(500), z))
        for m in (0.0, 0.1, 0.3)
    ]
    assert powers[0] < 0.01 < powers[1] < powers[2] and powers[2] > 0.99


def test_plan_futility_must_be_a_boolean():
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.plan import parse_plan

    with pytest.raises(InputError) as ei:
        parse_plan(plan_toml([("greedy", [1])], {"adaptive": {"futility": 1}}, name="x", suites=["math"]))
    assert ei.value.field == "adaptive.futility"
    plan = parse_plan(
        plan_toml([("greedy", [1])], {"adaptive": {"futility": False}}, name="x", suites=["math"])
    )
    assert plan is not None


def _ran_rounds(res, k):
    """Per arm: the rounds (0-based) it ran in, from the history (round 1 runs every arm; round r + 1 runs
    the arms history[r] lists as running)."""
    ran = [[0] for _ in range(k)]
    for r, ev in enumerate(res.history[:-1], start=1):
        for arm in ev.running:
            ran[res.arms.index(arm)].append(r)
    return ran


def _check_spend(table, res, settings):
    """Each arm's report counts exactly the tasks of the rounds it ran in; the sweep's tokens are the sum of
    what those cells cost in the table; an arm not running at the end says after which round it stopped."""
    bounds = round_bounds(len(table.tasks), settings.rounds)
    order = task_order(table.families, settings.seed)
    ran = _ran_rounds(res, len(table.arms))
    spent = 0.0
    for i, rep in enumerate(res.reports):
        cells = [order[t] for r in ran[i] for t in range(*bounds[r])]
        assert rep.tasks == len(cells)
        spent += float(table.tokens[cells, i].sum())
        # stopped_round: the last round it ran in; None only for an arm that ran in the sweep's last round.
        assert (
            rep.stopped_round == ran[i][-1]
            if rep.stopped_round is not None
            else ran[i][-1] == res.rounds_run - 1
        )
    assert res.tokens_spent == pytest.approx(spent)


def test_a_stopped_arm_runs_again_when_an_open_arm_needs_it():
    """Close frontier neighbours (seed 5): arm5 stops, then an open arm needs a comparison with it and it
    runs again (twice); without the restart the pair would stay frozen and the open arm's futility final.
    Its report counts every round it ran in, and nothing else."""
    table = _table((0.0, 0.5, 0.55, 1.0, 1.05, 1.1, 0.2, -0.2), (600, 1200, 1300, 3000, 3300, 3600, 9000, 15000),
                   seed=5)  # fmt: skip
    settings = AdaptiveSettings(epsilon_elo=0, seed=5)
    res = replay_adaptive(table, settings).result
    ran = _ran_rounds(res, 8)[5]
    gaps = [b for a, b in itertools.pairwise(ran) if b > a + 1]
    assert len(gaps) >= 2, ran  # stopped and restarted, twice
    _check_spend(table, res, settings)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), k=st.integers(2, 7), tasks=st.integers(3, 240), rounds=st.integers(1, 12),
       futility=st.booleans(), spread=st.floats(0.0, 2.0))  # fmt: skip
def test_restarts_keep_the_spend_accounting_exact_in_bounded_time(seed, k, tasks, rounds, futility, spread):
    """Any run (arms from equal to far apart, any round count): whatever stops and restarts, each report's
    task count and the sweep's tokens match the rounds each arm ran in, in bounded time and memory."""
    from bounds import bounded

    rng = np.random.default_rng(seed)
    table = _table(tuple(rng.uniform(0, spread, k)), tuple(rng.uniform(100, 5000, k)), tasks=tasks, seed=seed)
    settings = AdaptiveSettings(epsilon_elo=0, seed=seed, rounds=rounds, min_rounds=1, futility=futility)
    res = bounded(lambda: replay_adaptive(table, settings).result, time_s=20, memory_mb=64)
    _check_spend(table, res, settings)


def test_failed_jobs_are_skipped_not_scored():
    table = _table((0.0, 1.0), (500, 1500), tasks=60)
    table.scores[::7, 1] = np.nan  # jobs the full run had no graded result for
    runner = replay_runner(table)
    got = runner(0, list(range(14)), [0, 1])
    assert (0, 1) not in got and (1, 1) in got and len(got) == 14 * 2 - 2
    res = run_adaptive(table.families, table.arms, runner, AdaptiveSettings(epsilon_elo=0, futility=False))
    assert res.reports[1].tasks == 60 - len(range(0, 60, 7))


# ----------------------------------------------------------------- the sweep on the local executor


_READS: list[tuple[str, list[str]]] = []  # (folder, the reads of its files) while an _object_reads is open


def _audit(event: str, args: tuple) -> None:
    if event != "open" or not _READS or not isinstance(args[0], str):
        return
    path, mode, flags = args
    # open(): a mode string; os.open(): mode None and the flags say whether it writes
    reading = mode in ("r", "rb") if mode is not None else not flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
    folder, seen = _READS[-1]
    if reading and path.startswith(folder + os.sep) and not os.path.basename(path).startswith("."):
        seen.append(path)


_HOOKED: list[bool] = []


class _object_reads:
    """Every file under `folder` opened for reading inside the block (an audit hook: the real reads)."""

    def __init__(self, folder: str) -> None:
        self.entry: tuple[str, list[str]] = (folder, [])

    def __enter__(self) -> list[str]:
        import sys

        if not _HOOKED:
            sys.addaudithook(_audit)
            _HOOKED.append(True)
        _READS.append(self.entry)
        return self.entry[1]

    def __exit__(self, *exc: object) -> None:
        _READS.remove(self.entry)


def _adaptive_plan(tmp_path, name="ad1", futility=False):
    from elo_per_token.coordinator.plan import parse_plan

    body = plan_toml([("greedy", [1]), ("majority", [3])], {"adaptive": {"rounds": 3, "min_rounds": 1, "futility": futility, "epsilon_elo": 0}},
                     name=name, profile="sim-openai", suites=["math", "tool_use"], tasks_per_family=6, seed=3,
                     ledger=tmp_path / name, concurrency=2, bootstrap_rounds=0)  # fmt: skip
    return parse_plan(body)


def test_plan_adaptive_table_is_validated_with_file_line_field():
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.plan import parse_plan

    body = plan_toml([("greedy", [1])], {"adaptive": {"rounds": 0}}, name="x", suites=["math"])
    with pytest.raises(InputError) as ei:
        parse_plan(body, file="p.toml")
    assert ei.value.field == "adaptive.rounds" and ei.value.file == "p.toml" and ei.value.line is not None
    with pytest.raises(InputError) as ei:
        parse_plan(plan_toml([("greedy", [1])], {"adaptive": {"bogus": 1}}, name="x", suites=["math"]))
    assert ei.value.field == "adaptive.bogus"


@pytest.mark.slow
@pytest.mark.parametrize("futility", [False, True])
def test_adaptive_sweep_local_interrupted_then_resumed_loses_and_duplicates_nothing(
    tmp_path, make_sim, monkeypatch, futility
):
    from elo_per_token.coordinator.adaptive.state import read_state
    from elo_per_token.coordinator.adaptive.sweep import run_adaptive_sweep
    from elo_per_token.ledger import open_ledger
    from elo_per_token.worker.job import run_job

    monkeypatch.setenv("EPT_SIM_API_KEY", SIM_KEY)
    sim = make_sim(api_key=SIM_KEY)
    ref = run_adaptive_sweep(_adaptive_plan(tmp_path, "ref", futility), profile=sim.profile())
    assert ref.completed and ref.result is not None
    # Both ways the sweep has a second round to interrupt (job 15 is in it); with futility it is the rule
    # that ends the sweep, so the resumed run must rebuild the futility state from the ledger too.
    assert ref.result.rounds_run >= 2
    assert ("not separable" in ref.result.stop_reason) == futility
    ref_keys = open_ledger(tmp_path / "ref").list_jobs("ref")

    count, lock = [0], threading.Lock()

    def stopping_run(job, provider):
        with lock:
            count[0] += 1
            if count[0] == 15:  # mid-way through round 2: the coordinator is told to stop (SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)
        return run_job(job, provider)

    plan = _adaptive_plan(tmp_path, "ad1", futility)
    first = run_adaptive_sweep(plan, profile=sim.profile(), run=stopping_run)
    assert not first.completed and first.result is None
    led = open_ledger(tmp_path / "ad1")
    partial = led.list_jobs("ad1")
    assert 0 < len(partial) < len(ref_keys)
    state = read_state(led, "ad1")
    assert state is not None and state["round"] == 1 and state["running"]
    sim.control.reset()
    again = run_adaptive_sweep(plan, profile=sim.profile())
    assert again.completed and again.result is not None
    # Nothing lost or duplicated: the same jobs as an uninterrupted sweep, none discarded as a duplicate,
    # finished jobs not requested again, and the same decisions.
    assert led.list_jobs("ad1") == ref_keys
    assert sum(o.tally.duplicate for o in first.outcomes + again.outcomes) == 0
    assert not (set(sim.control.stats()["by_job"]) & partial)
    assert again.result.frontier == ref.result.frontier
    assert again.result.tokens_spent == pytest.approx(ref.result.tokens_spent)
    final = read_state(led, "ad1")
    assert final is not None and final["round"] == again.result.rounds_run and final["finished"]


@pytest.mark.slow
def test_replay_of_a_full_run_makes_the_live_adaptive_sweeps_decisions(tmp_path, make_sim, monkeypatch):
    """The replay executor returns what each job returned in the full run, with its real tokens: replaying a
    full sweep gives the live adaptive sweep's decisions and spend (the simulator is deterministic), and
    `ept replay-adaptive RUN --json` says the same."""
    import json
    import subprocess
    import sys

    from elo_per_token.coordinator.adaptive.run_table import read_run_table
    from elo_per_token.coordinator.adaptive.sweep import run_adaptive_sweep, settings_of
    from elo_per_token.coordinator.sweep import execute

    monkeypatch.setenv("EPT_SIM_API_KEY", SIM_KEY)
    sim = make_sim(api_key=SIM_KEY)
    plan = _adaptive_plan(tmp_path, "live")
    jobs_dir = str(tmp_path / "live" / "runs" / "live" / "jobs")
    with _object_reads(jobs_dir) as reads:
        live = run_adaptive_sweep(plan, profile=sim.profile())
    assert live.completed and live.result is not None
    # The sweep holds its table between rounds: each job object is read once (the old loop re-read the run
    # after every round: each object once per round after its own).
    n_objects = sum(len(files) for _, _, files in os.walk(jobs_dir))
    assert live.result.rounds_run >= 2 and 0 < len(reads) <= n_objects and len(set(reads)) == len(reads)
    full_plan = plan.with_overrides(name="full", ledger=str(tmp_path / "full"))
    full = execute(full_plan, None, profile=sim.profile(), analyze=False)
    assert full.completed and full.tally.failed == 0
    run_dir = str(tmp_path / "full" / "runs" / "full")
    out = replay_adaptive(read_run_table([run_dir]), settings_of(plan))
    assert out.result.frontier == live.result.frontier
    # round by round the same events: the live table kept in memory equals the replay's whole-run reading
    assert [replace(e, tokens=0.0) for e in out.result.history] == [
        replace(e, tokens=0.0) for e in live.result.history
    ]
    assert [e.tokens for e in out.result.history] == pytest.approx([e.tokens for e in live.result.history])
    assert out.result.tokens_spent == pytest.approx(live.result.tokens_spent)
    assert out.full_tokens == pytest.approx(full.tally.tokens)
    cmd = [sys.executable, "-m", "elo_per_token", "replay-adaptive", run_dir]
    res = subprocess.run([*cmd, "--seed", str(plan.seed), "--rounds", "3", "--min-rounds", "1", "--no-futility",
                          "--epsilon-elo", "0", "--json"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    got = json.loads(res.stdout)
    assert got["tokens_spent"] == pytest.approx(live.result.tokens_spent)
    assert {a["arm"]: a["status"] for a in got["arms"]} == live.result.frontier
    bad = subprocess.run([*cmd, "--rounds", "0"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--rounds" in bad.stderr and not bad.stdout


@settings(max_examples=80, deadline=None)
@given(table=st.dictionaries(st.text(max_size=12), st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                                                          st.text(max_size=5), st.booleans(), st.none()), max_size=4))  # fmt: skip
def test_hostile_adaptive_table_is_refused_with_its_field_or_accepted(table):
    """An [adaptive] table in a user's plan: any content is either valid settings or an InputError naming
    adaptive.<field>, quickly; never another exception."""
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.adaptive.settings import check_adaptive
    from elo_per_token.coordinator.adaptive.sweep import settings_of
    from elo_per_token.coordinator.plan import _V, Plan

    t0 = time.perf_counter()
    try:
        check_adaptive(table, _V("p.toml", ""))
    except InputError as e:
        assert (e.field or "").startswith("adaptive") and e.file == "p.toml"
    else:
        plan = Plan(name="x", profile="p", suites=("math",), arms=(), raw={"adaptive": table})
        settings_of(plan).check()
    assert time.perf_counter() - t0 < 2


@pytest.mark.slow
def test_adaptive_sweep_cli_with_a_wrong_key_stops_with_the_egress_exit_and_no_secret(tmp_path, make_sim):
    """`ept sweep --adaptive` through the CLI: a revoked key stops the round like a full sweep (exit 3, the fix
    named), the adaptive sweep does not go on to the next round, and the key never appears in the output."""
    import subprocess
    import sys

    sim = make_sim(api_key=SIM_KEY)
    prof = tmp_path / "profiles.toml"
    prof.write_text(f'[profiles.sim-test]\nprotocol = "openai"\nbase_url = "{sim.url}"\n'
                    'api_key_env = "EPT_SIM_API_KEY"\nmodel = "ept-sim-1"\ntimeout = 10\n')  # fmt: skip
    plan = tmp_path / "plan.toml"
    plan.write_text(plan_toml([("greedy", [1]), ("majority", [3])], {"adaptive": {"rounds": 3}}, name="eg",
                              profile="sim-test", suites=["math"], tasks_per_family=12, seed=3,
                              ledger=tmp_path / "led", concurrency=1, bootstrap_rounds=0))  # fmt: skip
    wrong = "sk-wrong-0123456789abcdefQRST"
    env = {**os.environ, "EPT_PROFILES": str(prof), "EPT_SIM_API_KEY": wrong}
    r = subprocess.run([sys.executable, "-m", "elo_per_token", "sweep", str(plan)], env=env, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    out = r.stdout + r.stderr
    assert r.returncode == 3, out
    assert "ept doctor" in out and "rerun the same command to resume" in out
    assert wrong not in out and wrong[:-4] not in out  # at most the masked form sk-…QRST
    assert sim.control.stats()["by_status"].get("200", 0) == 0
    from elo_per_token.coordinator.adaptive.state import read_state
    from elo_per_token.ledger import open_ledger

    assert (
        read_state(open_ledger(tmp_path / "led"), "eg") is None
    )  # no round finished, none was started after


@settings(max_examples=60, deadline=None)
@given(blob=st.one_of(st.binary(max_size=200), st.dictionaries(st.sampled_from(["round", "rounds", "tasks", "tokens",
       "running", "status", "why", "finished", "stop_reason"]), st.one_of(st.none(), st.text(max_size=8), st.floats(),
       st.integers(), st.lists(st.text(max_size=4), max_size=3), st.dictionaries(st.text(max_size=4),
       st.text(max_size=4), max_size=3)), max_size=8).map(lambda d: __import__("json").dumps(d).encode())))  # fmt: skip
def test_status_reads_a_hostile_adaptive_blob_without_crashing(tmp_path_factory, blob):
    """`ept status` reads adaptive.json back from storage: any bytes there print a line or nothing, fast."""
    import io

    from rich.console import Console

    from elo_per_token.coordinator.adaptive.cli import print_state
    from elo_per_token.coordinator.adaptive.state import ADAPTIVE_BLOB
    from elo_per_token.ledger import open_ledger

    led = open_ledger(tmp_path_factory.mktemp("led"))
    led.put_blob("r", ADAPTIVE_BLOB, blob)
    buf = io.StringIO()
    t0 = time.perf_counter()
    print_state(led, "r", Console(file=buf, width=200))
    assert time.perf_counter() - t0 < 2 and len(buf.getvalue()) < 20_000


@pytest.mark.slow
def test_demo_with_replicates_gives_the_resampled_benchmark_aligned_replicates(tmp_path, monkeypatch):
    """`ept demo --replicates 2` (2 tasks per family): run demo-t2-r2, every (task, arm) run twice with its own
    seed; the benchmark's reader splits it into replicate tables on the same tasks and arms, and its exact
    truth is the mean over replicate pairs (hand-checked on one pair of arms)."""
    import importlib.util
    import sys
    from pathlib import Path

    from cli_runner import run_ept

    out = tmp_path / "d"
    res = run_ept("demo", "--tasks-per-family", "2", "--replicates", "2", "--out", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    run = out / "ledger" / "runs" / "demo-t2-r2"
    assert run.is_dir()
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_adaptive.py"
    spec = importlib.util.spec_from_file_location("bench_adaptive", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_adaptive", bench)  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    base, scores, tokens = bench.replicate_tables(str(run))
    assert scores.shape == tokens.shape == (2, 6, 9) and len(base.tasks) == 6 and len(base.arms) == 9
    assert np.isfinite(tokens).all() and (tokens > 0).all()
    # Sampling arms draw per seed: some replicate pair differs somewhere (greedy at temperature 0 does not).
    assert (scores[0] != scores[1]).any() or (tokens[0] != tokens[1]).any()
    tok, bal = bench.replicate_truth(base.families, scores, tokens)
    from elo_per_token.coordinator.adaptive.core import task_weights

    w = task_weights(base.families, None)
    by_hand = np.mean(
        [w[t] * np.mean([np.sign(scores[r, t, 0] - scores[q, t, 1]) for r in range(2) for q in range(2)])
         for t in range(6)]
    )  # fmt: skip
    assert bal[0, 1] == pytest.approx(by_hand) and bal[1, 0] == pytest.approx(-by_hand)
    assert tok == pytest.approx(tokens.mean(axis=(0, 1)))
    bad = run_ept("demo", "--replicates", "0", "--out", str(tmp_path / "e"))
    assert bad.returncode == 2 and "--replicates" in bad.stderr and not (tmp_path / "e").exists()


@pytest.mark.slow
def test_after_an_adaptive_sweep_the_elo_table_agrees_with_the_adaptive_decisions(tmp_path, make_sim):
    """Issue 37 item 5: the ordinary table after `ept sweep --adaptive` shows each arm's sequential status in its
    frontier column (no bootstrap `on (100%)` for an open arm), defers its recommendation to the adaptive
    decisions, and neither suggests `ept retry` nor calls the unrun tasks "the harder tasks"."""
    import re
    import subprocess
    import sys

    sim = make_sim(api_key=SIM_KEY)
    prof = tmp_path / "profiles.toml"
    prof.write_text(f'[profiles.sim-test]\nprotocol = "openai"\nbase_url = "{sim.url}"\n'
                    'api_key_env = "EPT_SIM_API_KEY"\nmodel = "ept-sim-1"\ntimeout = 10\n')  # fmt: skip
    plan = tmp_path / "plan.toml"
    plan.write_text(plan_toml([("greedy", [1]), ("majority", [3, 6])], {"adaptive": {"rounds": 3}}, name="ad5",
                              profile="sim-test", suites=["math"], tasks_per_family=30, seed=3,
                              ledger=tmp_path / "led", concurrency=4, bootstrap_rounds=50))  # fmt: skip
    env = {**os.environ, "EPT_PROFILES": str(prof), "EPT_SIM_API_KEY": SIM_KEY, "COLUMNS": "300"}
    r = subprocess.run([sys.executable, "-m", "elo_per_token", "sweep", str(plan), "--adaptive"], env=env,
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    adaptive = out.split("Adaptive sweep:", 1)[1].split("Elo table of the tasks each arm ran", 1)[0]
    status = {
        m.group(1): m.group(2) for m in re.finditer(r"│ (\S+@\d+)\s+│ (on|off|open|within)\s", adaptive)
    }
    assert len(status) == 3, adaptive
    table = out.split("Diminishing returns (", 1)[1]
    assert table.split("\n", 1)[0].count("adaptive sweep: frontier = the sequential decisions") == 1
    for arm, decided in status.items():
        row = next(x for x in table.splitlines() if x.startswith(f"│ {arm}"))
        assert f"{decided} (adaptive)" in row, (arm, decided, row)
    assert "Recommendation: from the adaptive decisions above" in out
    assert "ept retry" not in out and "harder tasks" not in out
