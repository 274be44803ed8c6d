"""ε-relaxed frontier identification (issue 41): on / off / within the margin, the margin's settings, the
replay over task orders, and that with no margin the sweep is the strict rule unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from bounds import bounded
from fixtures_adaptive import synthetic_table as _table
from fixtures_plans import plan_toml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.coordinator.adaptive.budget import unfinished
from elo_per_token.coordinator.adaptive.epsilon import (
    WITHIN,
    Margin,
    assess_eps,
    eps_balance,
    eps_truth,
    eps_wrong,
    rel_token_stats,
)
from elo_per_token.coordinator.adaptive.replay import replay_adaptive, replay_orders
from elo_per_token.coordinator.adaptive.sequential import (
    OFF,
    ON,
    OPEN,
    PairStats,
    assess_holm,
    elo_from_balance,
    pair_stats,
)
from elo_per_token.coordinator.adaptive.settings import AdaptiveSettings


def test_eps_balance_inverts_the_reports_elo_reading():
    for eps in (0.0, 10.0, 40.0, 300.0):
        assert float(elo_from_balance(eps_balance(eps))) == pytest.approx(eps, abs=1e-6)


def test_equal_arms_are_open_without_a_margin_and_within_it_with_one_at_a_fraction_of_the_tokens():
    table = _table((1.0, 1.0, 1.0), (1000, 1200, 1400), tasks=300, seed=2)
    strict = replay_adaptive(table, AdaptiveSettings(seed=0, futility=False, epsilon_elo=0))
    wide = replay_adaptive(
        table, AdaptiveSettings(seed=0, futility=False, epsilon_elo=60, epsilon_tokens=0.05)
    )
    assert [r.status for r in strict.result.reports][1:] == [OPEN, OPEN]
    # the cheapest arm is on; within (not ε-dominated) is its correct classification too, and stops it sooner
    assert wide.result.reports[0].status in (ON, WITHIN)
    assert [r.status for r in wide.result.reports][1:] == [WITHIN, WITHIN]
    assert wide.token_share < 0.6 < 0.95 < strict.token_share  # classified arms stop spending
    assert all("within the margin" in r.reason for r in wide.result.reports[1:])
    n_within = sum(r.status == WITHIN for r in wide.result.reports)
    assert f"{n_within} within" in _title(wide.result) and "margin 60 Elo / 5% tokens" in _title(wide.result)


def _title(res) -> str:
    from elo_per_token.coordinator.adaptive.report import classification_line

    return classification_line(res)


def test_an_arm_dominated_by_far_more_than_the_margin_is_never_called_within():
    """arm2 is 1.5 logit weaker than arm1 and 10x costlier: off by far more than 10 Elo, in every order."""
    table = _table((0.0, 1.5, 0.0), (500, 1000, 10000), tasks=600, seed=5)
    for seed in range(4):
        out = replay_adaptive(table, AdaptiveSettings(seed=seed, epsilon_elo=10, epsilon_tokens=0.05))
        assert out.result.reports[2].status == OFF


def test_eps_truth_and_wrong_on_a_known_design():
    tok = np.array([100.0, 200.0, 210.0, 1000.0])
    acc = np.array([0.5, 0.7, 0.705, 0.4])
    bal = acc[:, None] - acc[None, :]
    m = Margin(elo=10, tokens=0.05)  # b_ε = 0.0288
    # arm2 is truly on (stronger); arm3 is beaten by arm1 by 0.3 and 5x cheaper: off by more than the margin.
    assert eps_truth(tok, bal, m) == [ON, ON, ON, OFF]
    acc2 = np.array([0.5, 0.7, 0.69, 0.4])  # arm2 now dominated by arm1 by 0.01 < b_ε: within
    assert eps_truth(tok, acc2[:, None] - acc2[None, :], m) == [ON, ON, WITHIN, OFF]
    assert eps_truth(tok, acc2[:, None] - acc2[None, :], Margin()) == [ON, ON, OFF, OFF]
    assert eps_wrong(WITHIN, OFF) and eps_wrong(ON, WITHIN) and eps_wrong(OFF, ON)
    assert not (eps_wrong(OFF, WITHIN) or eps_wrong(WITHIN, ON) or eps_wrong(OPEN, OFF))


def test_relative_token_difference_is_the_stated_share():
    t = np.array([[100.0, 96.0], [200.0, 190.0], [np.nan, 5.0]])
    mean, se, n = rel_token_stats(t, 0.05)
    assert n[0, 1] == 2 and mean[0, 1] == pytest.approx(np.mean([0.95 * 100 - 96, 0.95 * 200 - 190]))
    assert mean[1, 0] == pytest.approx(np.mean([0.95 * 96 - 100, 0.95 * 190 - 200]))
    assert np.isnan(mean[0, 0]) and se[0, 1] > 0


_cell = st.one_of(st.floats(-1e9, 1e9), st.just(float("nan")), st.sampled_from([0.0, 1.0]))


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(t=st.integers(1, 120), k=st.integers(1, 6), seed=st.integers(0, 2**16), looks=st.integers(1, 12),
       kind=st.sampled_from(["random", "ties", "nan", "hostile"]))  # fmt: skip
def test_no_margin_is_the_strict_rule_and_a_margin_decides_only_on_its_own_claims(t, k, seed, looks, kind):
    """assess_eps with no margin is assess_holm exactly; with one, every status is what its own claims say
    (off: a confident dominator; on: every arm not off confidently beaten on one axis; within: every arm not
    off ruled out as an ε-dominator; open otherwise); no evidence decides nothing; bounded time and memory."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, (t, k)).astype(float)
    tok = rng.lognormal(6, 1, (t, k))
    if kind == "ties":
        s[:] = 1.0
    elif kind == "nan":
        s[:] = np.nan
    elif kind == "hostile":
        tok = np.asarray(
            [[float(x) for x in rng.choice([np.nan, 0.0, -5.0, 1e300, 3.0], k)] for _ in range(t)]
        )
    w = np.ones(t)
    times = tuple(r / looks for r in range(1, looks + 1))

    def run():
        stp = pair_stats(s, tok, w)
        eps = assess_eps(stp, tok, 0.05, looks, 2, Margin(40, 0.05), times)
        with np.errstate(all="ignore"):
            left = unfinished(eps, [f"a{i}" for i in range(k)], np.nanmean(tok, axis=0), 2.8, 3.4, t + 100)
        return stp, assess_eps(stp, tok, 0.05, looks, 2, Margin()), eps, left

    stp, plain, eps, left = bounded(run, time_s=10, memory_mb=50)
    # fixed-budget note on the same hostile data: names exactly the open arms, a sane count, no NaN cost
    assert left.arms == [f"a{i}" for i, x in enumerate(eps.status) if x == OPEN]
    assert left.tasks is None or left.tasks >= 0
    assert not np.isnan(left.tokens) and left.tokens >= 0 and isinstance(left.line(), str)
    strict = assess_holm(stp, 0.05, looks, 2)
    assert plain.status == strict.status
    assert (plain.stronger == strict.stronger).all() and (plain.cheaper == strict.cheaper).all()
    for i, a in enumerate(eps.status):
        live = [j for j in range(k) if j != i and eps.status[j] != OFF]
        beaten = all(eps.cheaper[i, j] or eps.stronger[i, j] for j in live)
        ruled_out = all(beaten or eps.q_below[j, i] or eps.tok_close[i, j] for j in live)
        dominated = any(eps.dom[j, i] for j in range(k) if j != i)
        want = OFF if dominated else ON if beaten else WITHIN if ruled_out else OPEN
        assert a == want
        if a == OFF:
            assert eps.dominated_by[i] is not None and eps.dom[eps.dominated_by[i], i]
    if kind == "nan":  # no quality evidence: no on/off claim (within may rest on the tokens route alone)
        assert all(x in (OPEN, WITHIN) for x in eps.status) or k == 1


def test_a_within_claim_costs_no_more_with_16_arms_than_with_2():
    """Intersection-union: a within claim needs every pair's test at once, so its z does not grow with the
    arms (the Bonferroni split over 2 (K - 1) tests did: 16 arms called this arm open)."""
    from elo_per_token.coordinator.adaptive.boundary import round_times
    from elo_per_token.coordinator.adaptive.epsilon import eps_z

    times = round_times(10, 2)  # rounds 2..10 of 10: the default sweep's 9 looks
    assert eps_z(0.05, 9, 16, times) == eps_z(0.05, 9, 2, times) < 2.8
    k, m = 16, Margin(60, 0.05)
    z = eps_z(0.05, 9, k, times)
    nan = np.full((k, k), 0.0)
    q = nan.copy()
    q[0, 1:], q[1:, 0] = -0.171 + 2.9 * 0.05, 0.171 - 2.9 * 0.05  # every arm's q_j0 + 2.9 se just below b_ε
    q_se = np.full((k, k), 0.05)
    c = np.full((k, k), 0.0)
    c[0, 1:], c[1:, 0] = 100.0, -100.0  # arm 0 the costliest: the quality route must settle it
    stats = PairStats(q, q_se, c, np.full((k, k), 10.0), np.full((k, k), 600))
    tok = np.tile(np.r_[2000.0, np.full(k - 1, 1900.0)], (600, 1))
    a = assess_eps(stats, tok, 0.05, 9, 2, m, times)
    assert z < 2.9 and a.status[0] == WITHIN


def test_replay_orders_scores_each_order_against_the_full_grids_classification():
    table = _table((0.0, 1.0, 1.0, -0.5), (500, 1500, 1600, 20000), tasks=300, seed=3)
    summ = bounded(
        lambda: replay_orders(table, AdaptiveSettings(epsilon_elo=40, epsilon_tokens=0.05), orders=5),
        time_s=60, memory_mb=100,
    )  # fmt: skip
    assert len(summ.shares) == len(summ.classified) == len(summ.wrong) == 5
    assert all(0 < x <= 1 for x in summ.shares) and len(set(summ.shares)) > 1  # orders differ
    assert summ.truth[0] == ON and summ.truth[3] == OFF and sum(summ.wrong) == 0
    assert summ.intervals >= 5 * 4 and "5 task orders" in summ.line() and "90th pct" in summ.line()


def test_plan_margin_fields_are_validated_with_file_line_field_and_delta_is_alpha():
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.adaptive.sweep import settings_of
    from elo_per_token.coordinator.plan import parse_plan

    for bad, field in (({"epsilon_elo": -1}, "adaptive.epsilon_elo"), ({"epsilon_tokens": 1.0}, "adaptive.epsilon_tokens"),
                       ({"epsilon_tokens": "5%"}, "adaptive.epsilon_tokens"), ({"delta": 0.1, "alpha": 0.1}, "adaptive.delta")):  # fmt: skip
        with pytest.raises(InputError) as ei:
            parse_plan(
                plan_toml([("greedy", [1])], {"adaptive": bad}, name="x", suites=["math"]), file="p.toml"
            )
        assert ei.value.field == field and ei.value.file == "p.toml" and ei.value.line is not None
    plan = parse_plan(plan_toml([("greedy", [1])], {"adaptive": {"delta": 0.1, "epsilon_elo": 10, "epsilon_tokens": 0.05}},
                                name="x", suites=["math"]))  # fmt: skip
    s = settings_of(plan)
    assert (s.alpha, s.epsilon_elo, s.epsilon_tokens) == (0.1, 10.0, 0.05)


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
def test_replay_adaptive_cli_orders_and_margin(tmp_path):
    """`ept replay-adaptive RUN --orders K --epsilon-elo E`: one line with the share's mean/median/90th pct
    and the classification error; a bad margin exits 2 naming the flag."""
    import subprocess
    import sys

    from fixtures_stats import Arm, Experiment, write_experiment

    exp = Experiment([Arm("greedy", 1, 0.0, 500), Arm("best_of_n", 4, 1.0, 1500), Arm("majority", 8, -0.5, 20000)],
                     {"math": 30, "code": 30})  # fmt: skip
    run = write_experiment(tmp_path / "run.jsonl", exp, seed=1)
    cmd = [sys.executable, "-m", "elo_per_token", "replay-adaptive", str(run)]
    r = subprocess.run(
        [*cmd, "--orders", "3", "--epsilon-elo", "40"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 task orders, margin 40 Elo / 5% tokens: token share mean" in r.stdout and "90th pct" in r.stdout
    auto = subprocess.run([*cmd, "--orders", "2"], capture_output=True, text=True, timeout=120)
    assert (
        auto.returncode == 0
        and "(auto: the smallest the full grid of 60 tasks settles at δ=5%)" in auto.stdout
    )
    word = subprocess.run([*cmd, "--epsilon-elo", "wide"], capture_output=True, text=True, timeout=120)
    assert word.returncode == 2 and "--epsilon-elo" in word.stderr and not word.stdout
    bad = subprocess.run([*cmd, "--epsilon-tokens", "1.5"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--epsilon-tokens" in bad.stderr and not bad.stdout


@pytest.mark.slow
def test_live_adaptive_sweep_with_a_margin_classifies_every_arm_as_the_full_sweep_does(
    tmp_path, make_sim, monkeypatch
):
    """A real `ept sweep --adaptive` path (run_adaptive_sweep on the local executor against the simulator) at
    the default margin (auto: the smallest the grid settles) ends with every arm classified, and its classification agrees with the full sweep's own
    ε-classification (eps_truth of the full grid's values) on the same plan and seed."""
    from fixtures_sim import SIM_KEY

    from elo_per_token.coordinator.adaptive.core import plan_margin
    from elo_per_token.coordinator.adaptive.replay import full_values
    from elo_per_token.coordinator.adaptive.run_table import read_run_table
    from elo_per_token.coordinator.adaptive.sweep import run_adaptive_sweep, settings_of
    from elo_per_token.coordinator.plan import parse_plan
    from elo_per_token.coordinator.sweep import execute

    monkeypatch.setenv("EPT_SIM_API_KEY", SIM_KEY)
    sim = make_sim(api_key=SIM_KEY)
    adaptive = {"rounds": 4, "min_rounds": 2}  # the default margin: auto, from the design
    plan = parse_plan(plan_toml([("greedy", [1]), ("majority", [3]), ("best_of_n", [4])], {"adaptive": adaptive},
                                name="live", profile="sim-openai", suites=["math", "tool_use"], tasks_per_family=40,
                                seed=3, ledger=tmp_path / "live", concurrency=4, bootstrap_rounds=0))  # fmt: skip
    import io

    from rich.console import Console

    buf = io.StringIO()
    live = run_adaptive_sweep(plan, profile=sim.profile(), console=Console(file=buf, width=400))
    assert live.completed and live.result is not None
    first = buf.getvalue().splitlines()[0]  # the margin is said before any job runs
    assert (
        first.startswith("adaptive sweep: 3 arms, 80 tasks in 4 rounds")
        and live.result.margin.describe() in first
    )
    assert "(auto: the smallest the full grid of 80 tasks settles at δ=5%)" in first
    full_plan = plan.with_overrides(name="full", ledger=str(tmp_path / "full"))
    full = execute(full_plan, None, profile=sim.profile(), analyze=False)
    assert full.completed and full.tally.failed == 0
    s = settings_of(plan)
    assert s.epsilon_elo is None and live.result.margin.auto and live.result.margin.tokens == 0.05
    table = read_run_table([str(tmp_path / "full" / "runs" / "full")])
    assert live.result.margin == plan_margin(table.families, s)  # the margin is the full grid's design's
    tok, bal = full_values(table)
    truth = eps_truth(tok, bal, live.result.margin)
    got = [r.status for r in live.result.reports]
    assert OPEN not in got, (got, truth)
    assert 150 < live.result.margin.elo < 250  # 80 tasks: the margin this grid can settle
    assert not any(eps_wrong(a, b) for a, b in zip(got, truth, strict=True)), (got, truth)
    assert live.result.tokens_spent < full.tally.tokens


def _two_arm_sweep_end(margin_elo: float, tasks: int, draws: int) -> float:
    """Share of full grids (every task decided: a win or a loss, the widest spread) on which arm 1, as strong
    as arm 0 and 10% costlier, is shown within the margin of it at the grid's end (the sweep's last look)."""
    from elo_per_token.coordinator.adaptive.boundary import round_times

    rng = np.random.default_rng(7)
    times = round_times(10, 2)
    hits = 0
    for _ in range(draws):
        win = rng.integers(0, 2, tasks).astype(float)
        s = np.c_[win, 1 - win]
        tok = np.c_[np.full(tasks, 1000.0), np.full(tasks, 1100.0)]
        a = assess_eps(pair_stats(s, tok, np.ones(tasks)), tok, 0.05, 9, 2, Margin(margin_elo, 0.05), times)
        hits += a.status[1] == WITHIN
    return hits / draws


def test_the_auto_margin_is_the_smallest_the_full_grid_settles_at_delta():
    """auto (the default): at its margin the full grid shows two equally strong arms within the margin of each
    other with probability about 1 - δ (0.95) even when every task is decided; at 0.6x the margin it mostly
    cannot; it shrinks as 1/sqrt(tasks), grows with unequal family weights, and ε = 0 is the strict rule."""
    from elo_per_token.coordinator.adaptive.core import plan_margin

    fam = [("a", "b", "c")[i % 3] for i in range(600)]
    m = plan_margin(fam, AdaptiveSettings())
    assert m.auto and 55 < m.elo < 65 and m.tokens == 0.05 and m.tasks == 600
    assert (
        m.describe()
        == f"margin {m.elo:.0f} Elo / 5% tokens (auto: the smallest the full grid of 600 tasks settles at δ=5%)"
    )
    assert _two_arm_sweep_end(m.elo, 600, 300) >= 0.9
    assert _two_arm_sweep_end(0.6 * m.elo, 600, 300) <= 0.6
    bigger = plan_margin([("a", "b", "c")[i % 3] for i in range(2400)], AdaptiveSettings())
    assert bigger.elo == pytest.approx(m.elo / 2, rel=0.03)
    assert plan_margin(fam, AdaptiveSettings(), weights={"a": 3, "b": 1, "c": 1}).elo > m.elo
    strict = plan_margin(fam, AdaptiveSettings(epsilon_elo=0))
    assert not strict.active and strict.describe() == "no margin (on/off only)"
    given_ = plan_margin(fam, AdaptiveSettings(epsilon_elo=30))
    assert (given_.elo, given_.tokens, given_.auto) == (30, 0.05, False)


@settings(max_examples=60, deadline=None)
@given(fams=st.lists(st.sampled_from(["a", "b", "c", "", "é" * 40]), min_size=1, max_size=3000),
       weights=st.one_of(st.none(), st.dictionaries(st.sampled_from(["a", "b", "c", "zz"]),
                                                    st.floats(0, 1e12), max_size=4)),
       alpha=st.floats(0.001, 0.49), rounds=st.integers(1, 40), min_rounds=st.integers(1, 40))  # fmt: skip
def test_the_auto_margin_is_finite_and_bounded_on_any_design(fams, weights, alpha, rounds, min_rounds):
    """Degenerate designs (one task, one family, zero or huge weights, more rounds than tasks): the auto
    margin is a finite number >= 0 whose balance is a valid win balance, in bounded time and memory."""
    from elo_per_token.coordinator.adaptive.core import plan_margin

    cfg = AdaptiveSettings(alpha=alpha, rounds=rounds, min_rounds=min(min_rounds, rounds))
    m = bounded(lambda: plan_margin(fams, cfg, weights), time_s=5, memory_mb=50)
    assert np.isfinite(m.elo) and m.elo >= 0 and 0 <= m.balance < 1 and m.tasks == len(fams)
    assert m.auto and isinstance(m.describe(), str)


def test_plan_margin_auto_is_the_default_and_can_be_written_out():
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.adaptive.sweep import settings_of
    from elo_per_token.coordinator.plan import parse_plan

    def plan(table):
        return parse_plan(
            plan_toml([("greedy", [1])], {"adaptive": table}, name="x", suites=["math"]), file="p.toml"
        )

    assert settings_of(plan({})).epsilon_elo is None and settings_of(plan({})).epsilon_tokens is None
    s = settings_of(plan({"epsilon_elo": "auto", "epsilon_tokens": "auto"}))
    assert (s.epsilon_elo, s.epsilon_tokens) == (None, None)
    for bad in ("automatic", "60"):
        with pytest.raises(InputError) as ei:
            plan({"epsilon_elo": bad})
        assert ei.value.field == "adaptive.epsilon_elo" and '"auto"' in str(ei.value)
    with pytest.raises(InputError) as ei:
        plan({"rounds": "auto"})  # only the margins take "auto"
    assert ei.value.field == "adaptive.rounds"
