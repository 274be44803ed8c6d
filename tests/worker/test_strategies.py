"""Strategies against the simulator over HTTP: call counts, roles, seeds and token accounting per budget;
determinism under concurrency; the registry; and the accuracy acceptance (majority/best-of-n beat greedy
with diminishing returns)."""

from __future__ import annotations

from collections import Counter

import pytest
from fixtures_sim import SIM_KEY

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.jobs import Job
from elo_per_token.egress.client import ProviderClient
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.job import run_job
from elo_per_token.worker.strategies import STRATEGIES, Strategy, StrategyResult
from elo_per_token.worker.strategies.base import MAX_TOOL_STEPS, sample
from elo_per_token.worker.strategies.tree_search import level_sizes

MATH = load_builtin_suite("math")
CODE = load_builtin_suite("code")
TOOL = load_builtin_suite("tool_use")


def client(sim, protocol: str = "openai", **kw) -> ProviderClient:
    return ProviderClient(sim.profile(protocol, **kw), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)


def roles(res) -> Counter:
    return Counter(c.role for c in res.calls)


def usage_sum(res) -> int:
    return sum(c.usage["prompt_tokens"] + c.usage["completion_tokens"] for c in res.calls)


def check_accounting(res, sim) -> None:
    """Every call is recorded once, with the seed its index fixes; tokens are exactly the calls' usage."""
    idx = [c.call_index for c in res.calls]
    assert len(idx) == len(set(idx)) and idx == sorted(idx)
    assert all(c.seed == res.job.call_seed(c.call_index) for c in res.calls)
    assert all(c.usage is not None and c.usage["prompt_tokens"] > 0 for c in res.calls)
    assert res.tokens == usage_sum(res) > 0
    # The simulator saw exactly the requests we recorded (X-EPT-Job header counts).
    assert sim.control.stats()["by_job"][res.job.key] == len(res.calls)


def test_greedy_is_one_call(sim):
    res = run_job(Job("r", MATH[0], "greedy", 1, seed=3), client(sim))
    assert roles(res) == {"sample": 1} and res.ok and res.outcome.score in (0.0, 1.0)
    check_accounting(res, sim)


@pytest.mark.parametrize("n", [1, 4, 8])
def test_best_of_n_makes_n_samples_and_n_verifier_calls(sim, n):
    res = run_job(Job("r", MATH[5], "best_of_n", n, seed=1), client(sim, supports_n=False))
    assert roles(res) == {"sample": n, "verifier": n}
    assert [c.call_index for c in res.calls] == list(range(2 * n))
    check_accounting(res, sim)
    assert len(res.outcome.grader["strategy"]["scores"]) == n


def test_best_of_n_batched_when_the_profile_supports_n(sim):
    res = run_job(Job("r", MATH[5], "best_of_n", 8, seed=1), client(sim, supports_n=True))
    samples = [c for c in res.calls if c.role == "sample"]
    assert len(samples) == 1 and (samples[0].n_requested, samples[0].n_returned) == (8, 8)
    assert roles(res)["verifier"] == 8
    check_accounting(res, sim)


def test_shortfall_of_choices_is_made_up_with_extra_calls(sim):
    sim.control.set(rate_fewer_choices=1.0)  # the server returns one choice whatever n asks for
    res = run_job(Job("r", MATH[7], "majority", 5, seed=2), client(sim, supports_n=True))
    samples = [c for c in res.calls if c.role == "sample"]
    assert [(c.call_index, c.n_requested, c.n_returned) for c in samples] == [(i, 5 - i, 1) for i in range(5)]
    assert len(res.outcome.grader["strategy"]["votes"]) >= 1
    check_accounting(res, sim)


@pytest.mark.parametrize("n", [3, 8])
def test_majority_makes_n_sample_calls_and_votes(sim, n):
    res = run_job(Job("r", MATH[9], "majority", n, seed=5), client(sim, supports_n=False))
    assert roles(res) == {"sample": n}
    assert res.outcome.grader["strategy"]["n_valid"] == n
    assert sum(res.outcome.grader["strategy"]["votes"].values()) <= n
    check_accounting(res, sim)


@pytest.mark.parametrize("b, d, w", [(2, 3, 2), (3, 3, 2), (3, 2, 1)])
def test_tree_search_calls_follow_depth_branching_and_beam(sim, b, d, w):
    job = Job("r", MATH[11], "tree_search", b, params={"depth": d, "beam": w}, seed=4)
    res = run_job(job, client(sim, supports_n=False))
    nodes = sum(level_sizes(b, d, w))
    assert nodes == b + (d - 1) * min(w, b) * b
    assert roles(res) == {"search_node": nodes, "verifier": nodes}
    assert job.arm == f"tree_search@{b}[beam={w},depth={d}]"
    check_accounting(res, sim)


def test_code_best_of_n_uses_visible_tests_as_a_free_verifier(sim):
    res = run_job(Job("r", CODE[3], "best_of_n", 6, seed=1), client(sim, supports_n=False))
    assert roles(res) == {"sample": 6} and res.outcome.grader["strategy"]["verifier"] == "tests"
    check_accounting(res, sim)
    llm = run_job(
        Job("r", CODE[3], "best_of_n", 3, params={"verifier": "llm"}, seed=1), client(sim, supports_n=False)
    )
    assert roles(llm) == {"sample": 3, "verifier": 3}


def test_tool_task_runs_an_agent_loop(sim):
    solved = 0
    for task in TOOL[:12]:
        res = run_job(Job("r", task, "greedy", 1, seed=0), client(sim))
        turns = [c for c in res.calls if c.role == "tool_turn"]
        assert len(turns) >= 2 and [c.call_index for c in turns] == list(range(len(turns)))
        assert turns[0].finish_reason == "tool_calls" and turns[-1].finish_reason == "stop"
        assert res.outcome.grader["n_tool_calls"] >= 1
        check_accounting(res, sim)
        solved += bool(res.outcome.correct)
    assert solved >= 4  # the brain only answers right after a right tool result


def test_tool_task_samples_occupy_fixed_index_blocks(sim):
    res = run_job(Job("r", TOOL[1], "majority", 3, seed=0), client(sim))
    for c in res.calls:
        assert c.role == "tool_turn"
    starts = {c.call_index // MAX_TOOL_STEPS for c in res.calls}
    assert starts == {0, 1, 2}
    check_accounting(res, sim)


def _fingerprint(res):
    return [(c.call_index, c.role, c.seed, c.usage, c.n_returned) for c in res.calls], res.outcome.answer


def test_same_job_same_records_regardless_of_concurrency(make_sim):
    job = Job("r", MATH[20], "tree_search", 3, seed=9)
    a = run_job(job, client(make_sim(latency_ms=5, latency_jitter_ms=5)), concurrency=8)
    b = run_job(job, client(make_sim()), concurrency=1)
    assert _fingerprint(a) == _fingerprint(b)
    other_seed = run_job(Job("r", MATH[20], "tree_search", 3, seed=10), client(make_sim()))
    assert _fingerprint(other_seed) != _fingerprint(a)


def test_registry_rejects_bad_strategies_budgets_and_params(sim):
    p = client(sim)
    with pytest.raises(InputError, match="unknown strategy 'beam_me_up'"):
        run_job(Job("r", MATH[0], "beam_me_up", 1), p)
    with pytest.raises(InputError, match="budget_n = 1") as e:
        run_job(Job("r", MATH[0], "greedy", 4), p)
    assert e.value.field == "budget_n"
    with pytest.raises(InputError, match="no parameter 'depth'"):
        run_job(Job("r", MATH[0], "majority", 4, params={"depth": 2}), p)
    with pytest.raises(InputError, match="must be one of"):
        run_job(Job("r", MATH[0], "best_of_n", 4, params={"verifier": "vibes"}), p)
    assert sim.control.stats()["by_job"] == {}  # nothing was called


def test_adding_a_strategy_is_one_entry(sim, monkeypatch):
    # The docs' example: a strategy that takes the first of two samples. (monkeypatch only edits our own
    # registry dict for the duration of the test.)
    def run(ctx):
        cands = sample(ctx, 0, 2, temperature=0.7)
        return StrategyResult(cands[0], {"kept": 0})

    monkeypatch.setitem(
        STRATEGIES, "first_of_two", Strategy("first_of_two", run, budget_meaning="fixed", fixed_budget=2)
    )
    res = run_job(Job("r", MATH[2], "first_of_two", 2), client(sim, supports_n=False))
    assert roles(res) == {"sample": 2} and res.outcome.grader["strategy"] == {"kept": 0}


@pytest.mark.slow
def test_more_samples_beat_greedy_with_diminishing_returns():
    """Acceptance: on the built-in suites (simulator over HTTP), majority@8 and best_of_n@8 beat greedy, and
    the accuracy bought per extra 1k tokens shrinks as n grows (1 -> 4 -> 16). 120 tasks x 7 arms = 840 jobs."""
    from elo_per_token.coordinator.suite_accuracy import draw_tasks, run_arms, summarise

    arms = [
        ("greedy", 1),
        ("majority", 4),
        ("majority", 8),
        ("majority", 16),
        ("best_of_n", 4),
        ("best_of_n", 8),
        ("best_of_n", 16),
    ]
    tasks = draw_tasks(120, ["math", "code", "tool_use"], seed=0)
    rows = run_arms(tasks, arms, seed=0, supports_n=True)
    assert len(rows) == 840 and not any(r["error"] for r in rows)
    t = {r["arm"]: r for r in summarise(rows).iter_rows(named=True)}
    g = t["greedy@1"]
    assert t["majority@8"]["accuracy"] > g["accuracy"] + 0.05
    assert t["best_of_n@8"]["accuracy"] > g["accuracy"] + 0.05

    def per_1k(lo, hi):
        return (hi["accuracy"] - lo["accuracy"]) / ((hi["tokens_per_job"] - lo["tokens_per_job"]) / 1000)

    for s in ("majority", "best_of_n"):
        first, later = per_1k(g, t[f"{s}@4"]), per_1k(t[f"{s}@4"], t[f"{s}@16"])
        assert first > later, (s, first, later)
        assert t[f"{s}@16"]["tokens_per_job"] > 3 * t[f"{s}@4"]["tokens_per_job"] * 0.9


def test_strategies_over_the_anthropic_protocol(sim):
    p = client(sim, protocol="anthropic")  # no `n` in this protocol: samples are always separate calls
    res = run_job(Job("r", MATH[6], "best_of_n", 3, seed=1), p)
    assert roles(res) == {"sample": 3, "verifier": 3} and all(c.n_requested == 1 for c in res.calls)
    check_accounting(res, sim)
    # The tool loop survives the OpenAI <-> Anthropic message conversion: same outcomes as over OpenAI.
    oa = client(sim)
    for task in TOOL[:8]:
        a = run_job(Job("r", task, "greedy", 1), p).outcome
        o = run_job(Job("r", task, "greedy", 1), oa).outcome
        assert (a.answer, a.correct) == (o.answer, o.correct)
