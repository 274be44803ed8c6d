"""Reply shapes real servers send that are not what they seem, over real HTTP against the simulator (read by
the openai and anthropic SDKs inside ProviderClient):

- a stream that ends cleanly (`data: [DONE]`) without any finish_reason is an interrupted generation
  (llama-cpp-python closes an aborted stream this way): an incomplete reply, retried as a transient, its
  partial usage kept as a discarded call — never a success whose fragment is graded;
- a 4xx whose body names a request field (`param`, `unsupported_parameter`) is `permanent` and says which
  field and how to drop it — never `credential`, even on the profile's very first request.
"""

from __future__ import annotations

import anthropic
import openai
import pytest
from bounds import bounded
from fixtures_sim import SIM_KEY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.jobs import Job
from elo_per_token.egress.client import ProviderClient
from elo_per_token.egress.errors import ProviderError, classify
from elo_per_token.egress.profiles import Profile
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.job import run_job

MSGS = [{"role": "user", "content": "What is 6 times 7?"}]
EFFORT_MESSAGE = (
    "this server does not accept reasoning_effort: drop the effort arms or pass it via extra_body"
)


def test_the_simulators_cut_stream_ends_cleanly_with_no_finish_reason(sim):
    """The fault itself, as the plain openai SDK reads it: a clean end, usage sent, no finish_reason at all."""
    sim.control.set(script=["stream_cut"])
    oc = openai.OpenAI(base_url=sim.url, api_key=SIM_KEY, max_retries=0)
    chunks = list(oc.chat.completions.create(model="ept-sim-1", messages=MSGS, stream=True, seed=1,
                                             stream_options={"include_usage": True}))  # fmt: skip
    assert all(c.finish_reason is None for ch in chunks for c in ch.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    full = oc.chat.completions.create(model="ept-sim-1", messages=MSGS, seed=1).choices[0].message.content
    cut = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert full.startswith(cut) and len(cut) < len(full)


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_stream_cut_before_its_finish_reason_is_retried_and_its_usage_kept(sim, protocol):
    client = ProviderClient(sim.profile(protocol, stream=True), api_key=SIM_KEY)
    clean = client.chat(MSGS, seed=4)
    sim.control.set(script=["stream_cut"])
    r = client.chat(MSGS, seed=4)
    assert r.attempts == 2  # the cut reply was not taken for an answer
    assert [(c.text, c.finish_reason) for c in r.choices] == [
        (c.text, c.finish_reason) for c in clean.choices
    ]
    assert len(r.discarded) == 1 and "incomplete reply" in r.discarded[0]["message"]
    assert r.discarded[0]["usage"]["prompt_tokens"] == clean.usage["prompt_tokens"]  # billed, so kept


def test_a_stream_cut_on_every_attempt_fails_transient_with_its_usage(sim):
    client = ProviderClient(sim.profile(stream=True, max_retries=2), api_key=SIM_KEY, backoff_base=0.01)
    sim.control.set(script=["stream_cut"] * 3)
    with pytest.raises(ProviderError) as ei:
        client.chat(MSGS, seed=4)
    e = ei.value
    assert e.error_class == "transient" and e.attempts == 3 and "no finish_reason" in e.message
    assert e.usage is not None and e.usage["completion_tokens"] > 0 and len(e.discarded) == 2


def test_a_job_whose_stream_is_cut_is_not_graded_on_the_fragment(sim):
    """The job records the cut call (billed) and grades the retried, complete answer."""
    task = load_builtin_suite("math")[4]
    client = ProviderClient(sim.profile(stream=True), api_key=SIM_KEY)
    job = Job("r", task, "greedy", 1, seed=3)
    clean = run_job(job, client)
    sim.control.set(script=["stream_cut"])
    cut = run_job(job, client)
    assert cut.outcome.score == clean.outcome.score and cut.outcome.answer == clean.outcome.answer
    assert len(cut.calls) == len(clean.calls) + 1 and cut.tokens > clean.tokens


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_an_unsupported_parameter_on_the_first_request_is_permanent_not_credential(make_sim, protocol):
    s = make_sim(api_key=SIM_KEY, reject_params=["reasoning_effort", "thinking"])
    client = ProviderClient(s.profile(protocol), api_key=SIM_KEY)
    gen = {"reasoning_effort": "high"} if protocol == "openai" else {"thinking_budget": 2048}
    with pytest.raises(ProviderError) as ei:
        client.chat(MSGS, seed=1, gen=gen)
    e = ei.value
    assert e.error_class == "permanent" and e.attempts == 1 and e.status == 400
    if protocol == "openai":
        assert e.param == "reasoning_effort" and e.message.startswith(EFFORT_MESSAGE)
    else:
        assert e.param == "thinking" and "this server does not accept thinking" in e.message
    assert "credential" not in e.message and SIM_KEY not in str(e)
    assert client.chat(MSGS, seed=1).usage  # the same key, without the field, is fine


def test_a_plain_400_on_the_first_request_still_names_the_key(make_sim):
    """The credential reading of a first 4xx (LiteLLM's 400 for a key it cannot check) is unchanged."""
    s = make_sim(api_key=SIM_KEY, script=["proxy_400"])
    with pytest.raises(ProviderError) as ei:
        ProviderClient(s.profile(), api_key=SIM_KEY).chat(MSGS)
    assert ei.value.error_class == "credential" and ei.value.param is None


def _bad_request(body: object) -> openai.BadRequestError:
    import httpx

    req = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    return openai.BadRequestError("bad", response=httpx.Response(400, request=req), body=body)


PROFILE = Profile(name="p", protocol="openai", base_url="http://127.0.0.1:9/v1", api_key_env="X", model="m")
_text = st.text(max_size=3000) | st.sampled_from(["reasoning_effort", SIM_KEY, "Unsupported parameter: 'x'"])
_fields = {
    "message": _text,
    "param": _text | st.integers() | st.none(),
    "code": _text | st.none(),
    "type": _text,
}
_bodies = st.one_of(
    st.none(), _text, st.fixed_dictionaries({"error": st.fixed_dictionaries({}, optional=_fields)})
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_bodies)
def test_classify_of_any_400_body_is_bounded_and_a_named_field_is_never_credential(body):
    err = bounded(lambda: classify(_bad_request(body), PROFILE, SIM_KEY), 1.0, 32)
    assert err.error_class in ("permanent", "context_overflow", "endpoint")
    assert SIM_KEY not in str(err) and (err.param is None or SIM_KEY not in err.param)
    if err.param is not None:
        assert err.error_class == "permanent" and len(err.param) <= 100
    named = isinstance(body, dict) and isinstance(body["error"].get("param"), str) and body["error"]["param"]
    if named and err.error_class == "permanent":
        assert err.param is not None  # the retrier will not read it as the key's fault


def test_anthropic_sdk_sees_no_stop_reason_in_a_cut_stream(sim):
    sim.control.set(script=["stream_cut"])
    ac = anthropic.Anthropic(base_url=sim.root, api_key=SIM_KEY, max_retries=0)
    with ac.messages.stream(model="ept-sim-1", max_tokens=200, messages=MSGS) as s:
        final = s.get_final_message()
    assert final.stop_reason is None and final.usage.output_tokens > 0
