"""The simulator's Responses API and SSE streams (chat, responses, messages), read by the official SDKs, and
the worker recording usage from streamed calls exactly as from plain ones (real HTTP throughout)."""

from __future__ import annotations

import anthropic
import openai
import pytest
from fixtures_sim import SIM_KEY

from elo_per_token.contracts.jobs import Job
from elo_per_token.egress.client import ProviderClient
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.job import run_job

MSGS = [{"role": "user", "content": "What is 6 times 7?"}]
MATH = load_builtin_suite("math")


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_streamed_calls_record_the_same_usage_and_text_as_plain_calls(sim, protocol):
    plain = ProviderClient(sim.profile(protocol), api_key=SIM_KEY)
    streamed = ProviderClient(sim.profile(protocol, stream=True), api_key=SIM_KEY)
    for gen in (
        {},
        {"max_tokens": 40},
        {"thinking_budget": 2048} if protocol == "anthropic" else {"reasoning_effort": "low"},
    ):
        a = plain.chat(MSGS, seed=5, gen=gen)
        b = streamed.chat(MSGS, seed=5, gen=gen)
        assert b.usage == a.usage and b.usage["completion_tokens"] > 0
        assert [(c.text, c.finish_reason) for c in b.choices] == [
            (c.text, c.finish_reason) for c in a.choices
        ]
    route = "chat" if protocol == "openai" else "messages"
    assert sim.control.stats()["by_route"] == {route: 6}


def test_streamed_n_choices_and_whole_jobs_match_plain_ones(sim):
    streamed = ProviderClient(sim.profile(stream=True), api_key=SIM_KEY)
    r = streamed.chat(MSGS, seed=2, n=3, temperature=0.7)
    assert r.n_returned == 3 and len({c.text for c in r.choices}) > 1
    plain = ProviderClient(sim.profile(), api_key=SIM_KEY)
    for strategy, budget in (("majority", 3), ("best_of_n", 2)):
        job = Job("r", MATH[4], strategy, budget, seed=3, gen={"reasoning_effort": "medium"})
        a, b = run_job(job, plain), run_job(job, streamed)
        assert [c.usage for c in b.calls] == [c.usage for c in a.calls]
        assert b.tokens == a.tokens > 0 and b.outcome.score == a.outcome.score


def test_openai_sdk_reads_chat_and_responses_streams(sim):
    oc = openai.OpenAI(base_url=sim.url, api_key=SIM_KEY)
    chunks = list(oc.chat.completions.create(model="ept-sim-1", messages=MSGS, stream=True,
                                             stream_options={"include_usage": True}, seed=1))  # fmt: skip
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    plain = oc.chat.completions.create(model="ept-sim-1", messages=MSGS, seed=1)
    assert (
        text == plain.choices[0].message.content and chunks[-1].usage.total_tokens == plain.usage.total_tokens
    )
    # Without include_usage no chunk carries usage (OpenAI's behaviour).
    bare = list(oc.chat.completions.create(model="ept-sim-1", messages=MSGS, stream=True, seed=1))
    assert all(c.usage is None for c in bare)

    r = oc.responses.create(model="ept-sim-1", input="What is 6 times 7?", reasoning={"effort": "high"})
    assert r.status == "completed" and r.usage.output_tokens_details.reasoning_tokens > 0 and r.output_text
    cut = oc.responses.create(model="ept-sim-1", input="What is 6 times 7?", max_output_tokens=16)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    events = list(oc.responses.create(model="ept-sim-1", input="What is 6 times 7?", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.usage.total_tokens > 0
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text
    assert sim.control.stats()["by_route"]["responses"] == 3


def test_anthropic_sdk_reads_the_messages_stream(sim):
    ac = anthropic.Anthropic(base_url=sim.root, api_key=SIM_KEY)
    with ac.messages.stream(model="ept-sim-1", max_tokens=200, messages=MSGS) as s:
        final = s.get_final_message()
    plain = ac.messages.create(model="ept-sim-1", max_tokens=200, messages=MSGS)
    assert final.usage.input_tokens == plain.usage.input_tokens and final.usage.output_tokens > 0
    assert final.stop_reason in ("end_turn", "max_tokens")
