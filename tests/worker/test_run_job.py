"""run_job end to end: provider errors end the job but keep its calls; results are the ledger format polars
reads; no credentials anywhere; judge mode produces explicit pairwise judgments at evaluation cost."""

from __future__ import annotations

import json

import polars as pl
from fixtures_sim import SIM_KEY

from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.records import JobResult
from elo_per_token.egress.client import ProviderClient
from elo_per_token.simulator.brain import TaskBrain
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.job import run_job
from elo_per_token.worker.judge import combine, judge_job, run_judgments

MATH = load_builtin_suite("math")


def client(sim, key: str = SIM_KEY, **kw) -> ProviderClient:
    return ProviderClient(sim.profile(**kw), api_key=key, backoff_base=0.01, backoff_cap=0.05)


def test_credential_error_ends_the_job_without_a_score(sim_keyed):
    res = run_job(
        Job("r", MATH[0], "best_of_n", 4, seed=1), client(sim_keyed, key="sk-wrong-key-000000000000")
    )
    assert res.outcome.score is None and res.outcome.correct is None
    assert res.outcome.error["class"] == "credential" and "EPT_SIM_API_KEY" in res.outcome.error["message"]
    assert len(res.calls) == 1 and res.calls[0].error["class"] == "credential" and res.calls[0].usage is None
    assert "sk-wrong-key-000000000000" not in res.to_jsonl().decode()


def test_error_mid_job_keeps_the_calls_already_made(make_sim):
    sim = make_sim(script=["ok", "ok", "400"])  # third request is rejected (permanent, no retry)
    res = run_job(Job("r", MATH[3], "majority", 5, seed=1), client(sim, supports_n=False), concurrency=1)
    # The strategy's request was refused after it had spent tokens: a loss (score 0) that keeps them.
    assert (
        res.outcome.error is None and res.outcome.score == 0.0 and res.outcome.failure["class"] == "permanent"
    )
    ok = [c for c in res.calls if c.error is None]
    failed = [c for c in res.calls if c.error is not None]
    assert [c.call_index for c in ok] == [0, 1] and [c.call_index for c in failed] == [2]
    assert res.tokens == sum(c.usage["prompt_tokens"] + c.usage["completion_tokens"] for c in ok) > 0


def test_4xx_on_a_profiles_first_request_is_a_credential_problem_naming_the_key(make_sim):
    # LiteLLM answers a key it cannot check with 400 "No connected db": before any request succeeded, a 4xx
    # says nothing about the request body. The job is unscored (egress), not a loss.
    sim = make_sim(script=["proxy_400"])
    res = run_job(Job("r", MATH[3], "majority", 2, seed=1), client(sim, supports_n=False), concurrency=1)
    assert res.outcome.score is None and res.outcome.error["class"] == "credential"
    assert (
        "No connected db" in res.outcome.error["message"]
        and "$EPT_SIM_API_KEY" in res.outcome.error["message"]
    )


def test_transient_errors_are_retried_and_counted(make_sim):
    sim = make_sim(script=["500", "500", "ok"])
    res = run_job(Job("r", MATH[4], "greedy", 1), client(sim, supports_n=False))
    assert res.ok and res.calls[0].attempts == 3


def test_missing_usage_is_flagged_not_invented(make_sim):
    sim = make_sim(rate_missing_usage=1.0)
    res = run_job(Job("r", MATH[4], "majority", 3, seed=2), client(sim, supports_n=False))
    assert res.ok and all(c.usage is None and c.usage_missing for c in res.calls)
    assert res.tokens == 0


def test_job_results_are_ledger_lines_polars_reads(sim, tmp_path):
    jobs = [
        Job("run1", MATH[i], s, n, seed=7)
        for i in range(3)
        for s, n in (("greedy", 1), ("majority", 4), ("best_of_n", 2))
    ]
    results = [run_job(j, client(sim, supports_n=False)) for j in jobs]
    for r in results:
        (tmp_path / (r.job.key.replace("/", "__") + ".jsonl")).write_bytes(r.to_jsonl())
    df = pl.read_ndjson(list(tmp_path.glob("*.jsonl")))
    calls = df.filter(pl.col("kind") == "call")
    outcomes = df.filter(pl.col("kind") == "outcome")
    assert outcomes.height == len(jobs) and calls.height == sum(len(r.calls) for r in results)
    tok = calls.group_by("job_key").agg(
        (pl.col("usage").struct.field("prompt_tokens") + pl.col("usage").struct.field("completion_tokens"))
        .sum()
        .alias("t")
    )
    assert dict(tok.iter_rows()) == {r.job.key: r.tokens for r in results}
    assert set(outcomes["arm"]) == {"greedy@1", "majority@4", "best_of_n@2"}
    assert outcomes["score"].is_between(0, 1).all()
    # Round trip: the lines rebuild the same result.
    lines = [json.loads(x) for x in results[5].to_jsonl().decode().splitlines()]
    back = JobResult.from_lines(lines, results[5].job)
    assert back.tokens == results[5].tokens and back.outcome.answer == results[5].outcome.answer


def test_no_credentials_in_job_or_result(sim_keyed):
    res = run_job(Job("r", MATH[1], "best_of_n", 2, seed=1), client(sim_keyed))
    assert res.ok
    blob = res.to_jsonl().decode() + res.job.to_json()
    assert SIM_KEY not in blob and SIM_KEY[-12:] not in blob


def test_combine_cancels_position_bias():
    assert combine("A", "B") == "A"  # arm_a first then arm_a second (shown as B): arm_a wins both
    assert combine("B", "A") == "B"
    assert combine("A", "A") == "tie"  # each order prefers whatever is shown first
    assert combine("tie", "tie") == "tie" and combine("A", None) == "A"


def test_judge_mode_pairs_both_orders_at_evaluation_cost(sim):
    brain = TaskBrain(MATH)
    p = client(sim)
    wins = {"A": 0, "B": 0, "tie": 0}
    for task in MATH[:20]:
        right, wrong = f"work...\nAnswer: {task['reference']}", f"work...\nAnswer: {task['distractors'][0]}"
        assert brain.is_correct(task, right) and not brain.is_correct(task, wrong)
        job = judge_job("r", task, seed=1)
        res = run_judgments(job, {"good@1": right, "bad@1": wrong, "meh@1": wrong}, p)
        assert res.ok and len(res.judgments) == 3 and len(res.calls) == 6
        assert (
            all(c.role == "judge" for c in res.calls) and res.tokens == 0
        )  # evaluation cost, not strategy cost
        by_pair = {(j["arm_a"], j["arm_b"]): j for j in res.judgments}
        wins[by_pair[("bad@1", "good@1")]["winner"]] += 1
        lines = [json.loads(x) for x in res.to_jsonl().decode().splitlines()]
        assert sum(1 for x in lines if x["kind"] == "judgment") == 3
    assert wins["B"] >= 12 and wins["A"] <= 3  # the correct answer (arm_b here) wins most pairs


def test_judge_reads_bare_answers_too(sim):
    # Judge mode is usually fed the arms' extracted answers, not whole replies.
    p = client(sim)
    picked = 0
    for task in MATH[20:40]:
        res = run_judgments(
            judge_job("r", task), {"a@1": str(task["distractors"][0]), "b@1": str(task["reference"])}, p
        )
        picked += res.judgments[0]["winner"] == "B"
    assert picked >= 12
