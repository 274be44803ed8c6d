"""TaskBrain: task lookup, determinism, accuracy recovering its stated model, distractors, verifier
signal, tree steps, tools protocol, judge, degrade over HTTP."""

from __future__ import annotations

import json
import statistics

import pytest
from fixtures_sim import SIM_KEY

from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.prompts import (
    final_answer_line,
    judge_messages,
    parse_score,
    parse_winner,
    prompt_kind,
    solve_messages,
    step_messages,
    verify_messages,
)
from elo_per_token.egress.client import ProviderClient
from elo_per_token.simulator.brain import TaskBrain
from elo_per_token.simulator.generic import BrainRequest, estimate_tokens
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.job import run_job

MATH = load_builtin_suite("math")
CODE = load_builtin_suite("code")
TOOL = load_builtin_suite("tool_use")
BRAIN = TaskBrain()


def req(messages, temperature=0.0, seed=0, tools=None, degrade=0.0):
    return BrainRequest(messages=messages, temperature=temperature, seed=seed, tools=tools, degrade=degrade)


def test_finds_tasks_from_every_prompt_kind():
    t = MATH[10]
    for msgs in (
        solve_messages(t),
        verify_messages(t, "x"),
        step_messages(t, [], 1, 3),
        judge_messages(t, "a", "b"),
    ):
        assert BRAIN.find_task(msgs, prompt_kind(msgs))["task_id"] == t["task_id"]
    unknown = BRAIN.respond(req([{"role": "user", "content": "Tell me a joke about ducks."}]))
    assert unknown.text  # generic text, not a crash


def test_greedy_is_deterministic_per_task_and_sampling_varies_with_seed():
    t = MATH[40]
    greedy = {BRAIN.respond(req(solve_messages(t), 0.0, seed=s)).text for s in range(5)}
    assert len(greedy) == 1
    sampled = {BRAIN.respond(req(solve_messages(t), 0.7, seed=s)).text for s in range(5)}
    assert len(sampled) == 5
    assert (
        BRAIN.respond(req(solve_messages(t), 0.7, seed=3)).text
        == BRAIN.respond(req(solve_messages(t), 0.7, seed=3)).text
    )


@pytest.mark.parametrize("task", [MATH[0], MATH[60], CODE[30]], ids=lambda t: t["task_id"])
def test_sampling_accuracy_recovers_the_stated_model(task):
    n = 600
    hits = sum(
        BRAIN.is_correct(task, BRAIN.respond(req(solve_messages(task), 0.7, seed=s)).text) for s in range(n)
    )
    p = min(0.99, max(0.02, 0.93 - 0.8 * task["difficulty"] - 0.03))
    assert abs(hits / n - p) < 4 * (p * (1 - p) / n) ** 0.5 + 0.01


def test_accuracy_falls_with_difficulty_and_degrade():
    def acc(tasks, degrade=0.0):
        return statistics.mean(
            BRAIN.is_correct(t, BRAIN.respond(req(solve_messages(t), 0.7, seed=s, degrade=degrade)).text)
            for t in tasks
            for s in range(20)
        )

    by_d = sorted(MATH, key=lambda t: t["difficulty"])
    easy, hard = by_d[:30], by_d[-30:]
    assert acc(easy) > acc(hard) + 0.3
    assert acc(easy, degrade=0.3) < acc(easy) - 0.2


def test_wrong_answers_come_from_the_distractors():
    t = MATH[90]
    answers = [final_answer_line(BRAIN.respond(req(solve_messages(t), 0.7, seed=s)).text) for s in range(300)]
    wrong = [a for a in answers if float(a) != float(t["reference"])]
    assert wrong and {float(a) for a in wrong} <= {float(d) for d in t["distractors"]}
    top = max(set(wrong), key=wrong.count)
    assert float(top) == float(t["distractors"][0])  # skewed: the first distractor is the common mistake


def test_replies_are_hundreds_of_tokens_of_reasoning():
    lens = [estimate_tokens(BRAIN.respond(req(solve_messages(t), 0.7, seed=1)).text) for t in MATH]
    assert 150 < statistics.mean(lens) < 900 and max(lens) > 2 * min(lens)


def test_verifier_scores_correlate_with_correctness():
    right, wrong = [], []
    for t in MATH[:60]:
        for s in range(3):
            right.append(
                parse_score(BRAIN.respond(req(verify_messages(t, f"Answer: {t['reference']}"), 0.7, s)).text)
            )
            wrong.append(
                parse_score(
                    BRAIN.respond(req(verify_messages(t, f"Answer: {t['distractors'][0]}"), 0.7, s)).text
                )
            )
    assert all(0 <= x <= 1 for x in right + wrong)
    assert statistics.mean(right) > statistics.mean(wrong) + 0.12
    assert min(right) < max(wrong)  # noisy: the ranges overlap


def test_tree_steps_end_with_an_answer_and_flawed_paths_mostly_fail():
    t = MATH[30]
    first = BRAIN.respond(req(step_messages(t, [], 1, 3), 0.7, seed=1)).text
    assert "Check value:" in first and final_answer_line(first) is None
    last = BRAIN.respond(
        req(step_messages(t, ["a Check value: 0000", "b Check value: 0000"], 3, 3), 0.7, seed=2)
    ).text
    assert final_answer_line(last) is not None
    flawed = sum(
        BRAIN.is_correct(
            t, BRAIN.respond(req(step_messages(t, ["x Check value: ffff"] * 2, 3, 3), 0.7, s)).text
        )
        for s in range(200)
    )
    assert flawed / 200 < 0.25


def test_tool_protocol_call_then_answer():
    t = TOOL[0]
    first = BRAIN.respond(req(solve_messages(t), 0.0, tools=t["tools"]))
    assert (
        first.tool_calls and first.tool_calls[0]["name"] == "lookup" and first.finish_reason == "tool_calls"
    )
    msgs = [
        *solve_messages(t),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": json.dumps(first.tool_calls[0]["arguments"])},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"value": 1}'},
    ]
    final = BRAIN.respond(req(msgs, 0.0, tools=t["tools"]))
    assert not final.tool_calls and final_answer_line(final.text) is not None


def test_judge_prefers_the_correct_response():
    picks = []
    for t in MATH[:40]:
        r = BRAIN.respond(
            req(judge_messages(t, f"Answer: {t['distractors'][0]}", f"Answer: {t['reference']}"))
        )
        picks.append(parse_winner(r.text))
    assert picks.count("B") >= 28


def test_degrade_config_lowers_an_arms_accuracy_over_http(make_sim):
    tasks = MATH[:60]

    def accuracy(sim) -> float:
        p = ProviderClient(sim.profile(supports_n=False), api_key=SIM_KEY)
        return statistics.mean(bool(run_job(Job("r", t, "greedy", 1), p).outcome.correct) for t in tasks)

    base = accuracy(make_sim())
    degraded = accuracy(make_sim(degrade={"greedy@1": 0.4}))
    assert degraded < base - 0.2
