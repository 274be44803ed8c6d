"""ProviderClient over real HTTP (openai / anthropic SDKs) against the simulator: results, classes, retries, secrets."""

from __future__ import annotations

import json
import logging
import statistics
import time
import urllib.request
from datetime import UTC

import pytest
from fixtures_sim import SIM_KEY

from elo_per_token.egress.client import ProviderClient
from elo_per_token.egress.errors import ProviderError

MSGS = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 6 times 7?"}]


def raw_post(url: str, body: dict, key: str = SIM_KEY, headers: dict | None = None) -> dict:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def client(sim, protocol: str = "openai", key: str | None = SIM_KEY, **profile_kw) -> ProviderClient:
    return ProviderClient(
        sim.profile(protocol, **profile_kw), api_key=key, backoff_base=0.05, backoff_cap=0.2
    )


# ------------------------------------------------------------------ successful calls


def test_openai_usage_and_text_are_exactly_what_the_server_sent(sim_keyed):
    r = client(sim_keyed).chat(MSGS, temperature=0.7, n=3, seed=11)
    raw = raw_post(
        sim_keyed.url + "/chat/completions",
        {"model": "ept-sim-1", "messages": MSGS, "temperature": 0.7, "n": 3, "seed": 11},
    )
    assert r.usage == raw["usage"]
    assert [c.text for c in r.choices] == [c["message"]["content"] for c in raw["choices"]]
    assert [c.finish_reason for c in r.choices] == [c["finish_reason"] for c in raw["choices"]]
    assert (r.n_requested, r.n_returned, r.attempts, r.model) == (3, 3, 1, "ept-sim-1")
    assert r.latency_s > 0


def test_same_seed_same_reply_and_choice_seeds_derive_from_request_seed(generic_sim):
    c = client(generic_sim)
    a = c.chat(MSGS, temperature=0.7, seed=5)
    b = c.chat(MSGS, temperature=0.7, seed=5)
    many = c.chat(MSGS, temperature=0.7, n=4, seed=5)
    other = c.chat(MSGS, temperature=0.7, seed=6)
    assert a.choices[0].text == b.choices[0].text == many.choices[0].text
    assert len({ch.text for ch in many.choices}) > 1  # choices differ from each other
    assert other.choices[0].text != a.choices[0].text


def test_anthropic_protocol_maps_usage_names_only(sim_keyed):
    r = client(sim_keyed, "anthropic").chat(MSGS, seed=3, max_tokens=300)
    raw = raw_post(
        sim_keyed.root + "/v1/messages",
        {
            "model": "ept-sim-1",
            "system": "You are terse.",
            "max_tokens": 300,
            "messages": [{"role": "user", "content": "What is 6 times 7?"}],
        },
        headers={"X-EPT-Seed": "3", "anthropic-version": "2023-06-01"},
    )
    assert r.usage == {
        "prompt_tokens": raw["usage"]["input_tokens"],
        "completion_tokens": raw["usage"]["output_tokens"],
        # Anthropic's cache fields are kept as returned, under their own names
        "cache_read_input_tokens": raw["usage"]["cache_read_input_tokens"],
        "cache_creation_input_tokens": raw["usage"]["cache_creation_input_tokens"],
    }
    assert "total_tokens" not in r.usage  # not computed by us
    assert r.choices[0].text == raw["content"][0]["text"]
    assert r.n_returned == 1


def test_anthropic_refuses_n_without_sending(sim):
    with pytest.raises(ProviderError) as ei:
        client(sim, "anthropic").chat(MSGS, n=4)
    assert ei.value.error_class == "permanent" and "separate calls" in ei.value.message
    assert sim.control.stats()["requests"] == 0


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_tool_call_round_trip(generic_sim, protocol):
    sim = generic_sim
    tools = [
        {
            "type": "function",
            "function": {
                "name": "calc",
                "description": "evaluate",
                "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}},
            },
        }
    ]
    c = client(sim, protocol)
    msgs = [{"role": "user", "content": "use the tool"}]
    r = c.chat(msgs, tools=tools, seed=1)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.tool_calls[0]["name"] == "calc"
    args = json.loads(ch.tool_calls[0]["arguments"])
    assert isinstance(args["x"], int)
    msgs += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": ch.tool_calls[0]["id"],
                    "type": "function",
                    "function": {"name": "calc", "arguments": ch.tool_calls[0]["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": ch.tool_calls[0]["id"], "content": "42"},
    ]
    r2 = c.chat(msgs, tools=tools, seed=2)
    assert r2.choices[0].text and not r2.choices[0].tool_calls
    # the second request is longer (tool call + result + tool definitions): more prompt tokens
    assert r2.usage["prompt_tokens"] > r.usage["prompt_tokens"]


def test_missing_usage_and_fewer_choices_are_reported_not_invented(sim):
    sim.control.set(script=["missing_usage", "fewer_choices"])
    c = client(sim)
    r1 = c.chat(MSGS, n=2, seed=1)
    assert r1.usage is None and r1.n_returned == 2
    r2 = c.chat(MSGS, n=4, seed=1)
    assert (r2.n_requested, r2.n_returned, len(r2.choices)) == (4, 1, 1)
    assert r2.usage is not None


def test_meta_headers_reach_the_simulator_per_job_and_arm(sim):
    c = client(sim)
    for i in range(3):
        c.chat(MSGS, seed=i, meta={"Job": "math/t1/greedy_n1/r0", "Arm": "greedy@1", "Role": "sample"})
    c.chat(MSGS, seed=9, meta={"Job": "math/t2/majority_n4/r0", "Arm": "majority@4", "Role": "sample"})
    st = sim.control.stats()
    assert st["by_job"] == {"math/t1/greedy_n1/r0": 3, "math/t2/majority_n4/r0": 1}
    assert st["by_arm"] == {"greedy@1": 3, "majority@4": 1}
    assert st["by_role"] == {"sample": 4}


class CountingLimiter:
    """A real (in-memory) limiter implementing the acquire/record protocol."""

    def __init__(self) -> None:
        self.acquired: list[int] = []
        self.recorded: list[tuple[int, int]] = []
        self.paused: list[float] = []

    def acquire(self, est_tokens: int, stop=None) -> None:
        self.acquired.append(est_tokens)

    def record(self, tokens: int, reserved: int = 0) -> None:
        self.recorded.append((tokens, reserved))

    def pause(self, seconds: float, *, rate_limited: bool = True) -> None:
        self.paused.append(seconds)

    def observe(self, headers) -> None:
        pass


def test_rate_limiter_is_asked_per_attempt_and_told_actual_usage(sim):
    sim.control.set(script=["500", "ok"])
    lim = CountingLimiter()
    c = ProviderClient(sim.profile(), api_key=SIM_KEY, rate_limiter=lim, backoff_base=0.01)
    r = c.chat(MSGS, seed=1, max_tokens=50)
    assert r.attempts == 2 and len(lim.acquired) == 2 and all(e > 50 for e in lim.acquired)
    # The failed attempt's reservation is given back; the answered one is corrected to the server's usage.
    est = lim.acquired[0]
    assert lim.recorded == [(0, est), (r.usage["prompt_tokens"] + r.usage["completion_tokens"], est)]


# ------------------------------------------------------------------ error classes


def test_401_is_credential_not_retried_and_names_the_env_var(sim_keyed, monkeypatch):
    monkeypatch.setenv("EPT_SIM_API_KEY", "sk-canary-wrong-key-000099998888")
    c = ProviderClient(sim_keyed.profile(), backoff_base=0.01)
    with pytest.raises(ProviderError) as ei:
        c.chat(MSGS)
    e = ei.value
    assert (e.error_class, e.status, e.attempts) == ("credential", 401, 1)
    assert "$EPT_SIM_API_KEY" in e.message and "is set (sk-…8888)" in e.message
    assert sim_keyed.control.stats()["by_status"] == {"401": 1}


def test_unset_key_is_credential_before_any_request(sim, monkeypatch):
    monkeypatch.delenv("EPT_SIM_API_KEY", raising=False)
    with pytest.raises(ProviderError) as ei:
        ProviderClient(sim.profile()).chat(MSGS)
    assert ei.value.error_class == "credential" and "NOT set" in ei.value.message
    assert sim.control.stats()["requests"] == 0


def test_403_is_credential(sim):
    sim.control.set(script=["403"])
    with pytest.raises(ProviderError) as ei:
        client(sim).chat(MSGS)
    assert (ei.value.error_class, ei.value.status, ei.value.attempts) == ("credential", 403, 1)


def test_404_path_is_endpoint_with_v1_hint_not_retried(sim):
    c = client(sim, base_url=sim.root + "/api")  # the classic missing /v1
    with pytest.raises(ProviderError) as ei:
        c.chat(MSGS)
    e = ei.value
    assert (e.error_class, e.status, e.attempts) == ("endpoint", 404, 1)
    assert "/api/v1" in e.message
    assert sim.control.stats()["by_status"] == {"404": 1}


def test_404_unknown_model_is_endpoint_and_names_model(sim):
    sim.control.set(strict_models=True)
    with pytest.raises(ProviderError) as ei:
        client(sim, model="gpt-nonexistent").chat(MSGS)
    assert ei.value.error_class == "endpoint" and "gpt-nonexistent" in ei.value.message
    assert (
        ei.value.code == "model_not_found"
    )  # the server's code, typed: callers branch on it, not on the text
    assert sim.control.stats()["by_status"] == {"404": 1}


def test_error_class_vocabulary_is_checked_even_under_python_O():
    """ProviderError accepts only the provider's classes; the check is explicit, so `python -O` keeps it."""
    from elo_per_token.contracts.errors import ERROR_CLASSES, PROVIDER_ERROR_CLASSES, RETRYABLE

    assert set(PROVIDER_ERROR_CLASSES) == set(ERROR_CLASSES) - {"task"} and RETRYABLE.issubset(
        PROVIDER_ERROR_CLASSES
    )
    for cls in PROVIDER_ERROR_CLASSES:
        assert ProviderError(cls, "m").error_class == cls
    for bad in ("task", "Transient", ""):
        with pytest.raises(ValueError, match="unknown provider error class"):
            ProviderError(bad, "m")  # type: ignore[arg-type]


def test_anthropic_base_url_with_v1_is_endpoint_with_hint(sim):
    with pytest.raises(ProviderError) as ei:
        client(sim, "anthropic", base_url=sim.url).chat(MSGS)
    assert ei.value.error_class == "endpoint" and "stop before /v1" in ei.value.message


def test_other_4xx_is_permanent_and_not_retried(sim):
    c = client(sim)
    c.chat(MSGS)  # the profile works: a later 400 is about the request
    sim.control.set(script=["400"])
    with pytest.raises(ProviderError) as ei:
        c.chat(MSGS)
    assert (ei.value.error_class, ei.value.status, ei.value.attempts) == ("permanent", 400, 1)
    assert sim.control.stats()["completion_requests"] == 2


def test_4xx_before_any_success_is_credential_or_access(sim):
    # LiteLLM answers a key it cannot check with 400 "No connected db": no request body is at fault yet.
    sim.control.set(script=["proxy_400"])
    with pytest.raises(ProviderError) as ei:
        client(sim).chat(MSGS)
    assert (ei.value.error_class, ei.value.status, ei.value.attempts) == ("credential", 400, 1)
    assert "No connected db" in ei.value.message and "$EPT_SIM_API_KEY" in ei.value.message


def test_context_length_400_is_context_overflow(sim):
    sim.control.set(context_length=50)
    with pytest.raises(ProviderError) as ei:
        client(sim).chat(MSGS, max_tokens=100)
    assert (ei.value.error_class, ei.value.status, ei.value.attempts) == ("context_overflow", 400, 1)
    assert "maximum context length is 50" in ei.value.message


def test_429_exhausts_retries_and_counts_attempts(sim):
    sim.control.set(rate_429=1.0, retry_after=0.1)
    t0 = time.perf_counter()
    with pytest.raises(ProviderError) as ei:
        client(sim, max_retries=3).chat(MSGS)
    elapsed = time.perf_counter() - t0
    e = ei.value
    assert (e.error_class, e.status, e.attempts) == ("rate_limit", 429, 4)
    assert sim.control.stats()["by_status"] == {"429": 4}
    assert elapsed >= 3 * 0.1  # three waits of Retry-After
    assert e.retry_after == pytest.approx(0.1)


def test_retry_after_whole_seconds_is_honoured(sim):
    # retry_after 1 s: the simulator sends "Retry-After: 1" and "retry-after-ms: 1000"
    c = client(sim)
    c.chat(MSGS)  # warm up (SDK import, connection) outside the timed part
    sim.control.set(script=["429", "ok"], retry_after=1.0)
    sim.control.reset()
    t0 = time.perf_counter()
    r = c.chat(MSGS, seed=1)
    elapsed = time.perf_counter() - t0
    assert r.attempts == 2 and sim.control.stats()["by_status"] == {"429": 1, "200": 1}
    assert 1.0 <= elapsed < 10.0


def test_retry_after_is_capped(sim):
    c = ProviderClient(sim.profile(), api_key=SIM_KEY, retry_after_cap=0.3)
    c.chat(MSGS)  # warm up
    sim.control.set(script=["429", "ok"], retry_after=120.0)
    t0 = time.perf_counter()
    r = c.chat(MSGS, seed=1)
    assert r.attempts == 2 and 0.3 <= time.perf_counter() - t0 < 20.0  # far below the 120 s asked for


def test_5xx_is_transient_and_retried_until_success(sim):
    sim.control.set(script=["500", "500", "ok"])
    r = client(sim, max_retries=3).chat(MSGS, seed=1)
    assert r.attempts == 3
    assert sim.control.stats()["by_status"] == {"500": 2, "200": 1}


def test_malformed_json_is_transient(sim):
    sim.control.set(rate_malformed_json=1.0)
    with pytest.raises(ProviderError) as ei:
        client(sim, max_retries=2).chat(MSGS)
    assert (ei.value.error_class, ei.value.attempts) == ("transient", 3)
    assert "JSON" in ei.value.message
    assert sim.control.stats()["by_fault"] == {"malformed_json": 3}


def test_hang_past_timeout_is_transient_timeout(sim):
    c = client(sim, timeout=0.3, max_retries=1)
    c.chat(MSGS)  # warm up
    sim.control.set(rate_hang=1.0, hang_s=60)
    sim.control.reset()
    t0 = time.perf_counter()
    with pytest.raises(ProviderError) as ei:
        c.chat(MSGS)
    assert (ei.value.error_class, ei.value.attempts) == ("transient", 2)
    assert "timed out" in ei.value.message
    assert time.perf_counter() - t0 < 30  # the client gave up; it did not wait for hang_s (60 s)
    assert sim.control.stats()["by_fault"] == {"hang": 2}


def test_connection_refused_is_unreachable_and_opens_a_circuit(sim):
    from elo_per_token.egress.retry import UNREACHABLE_CIRCUIT

    port = sim.port
    sim.stop()
    c = ProviderClient(
        sim.profile(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1), api_key=SIM_KEY, backoff_base=0.01
    )
    with pytest.raises(ProviderError) as ei:
        c.chat(MSGS)
    assert (ei.value.error_class, ei.value.attempts) == ("unreachable", 2)
    assert "cannot connect" in ei.value.message and "refused" in ei.value.message.lower()
    while not c.circuit_open():  # every further connect fails too
        with pytest.raises(ProviderError):
            c.chat(MSGS)
    assert c.circuit.unreachable == UNREACHABLE_CIRCUIT
    t0 = time.perf_counter()
    for _ in range(5):  # open: refused at once, without connecting or backing off
        with pytest.raises(ProviderError) as ei:
            c.chat(MSGS)
        assert ei.value.error_class == "unreachable" and "circuit open" in ei.value.message
    assert time.perf_counter() - t0 < 0.5


def test_backoff_is_full_jitter_exponential_and_capped():
    c = ProviderClient(
        __import__("elo_per_token.egress.profiles", fromlist=["Profile"]).Profile(
            name="x", protocol="openai", base_url="http://127.0.0.1:9/v1", api_key_env="X", model="m"
        ),
        api_key=SIM_KEY,
        backoff_base=0.5,
        backoff_cap=3.0,
    )
    for attempt, ceiling in ((1, 0.5), (2, 1.0), (3, 2.0), (5, 3.0)):
        xs = [c.retry_policy.pause(attempt) for _ in range(4000)]
        assert min(xs) >= 0 and max(xs) <= ceiling
        assert statistics.mean(xs) == pytest.approx(ceiling / 2, rel=0.06)  # uniform(0, ceiling)


def test_list_models(sim):
    assert client(sim).list_models() == ["ept-sim-1", "ept-sim-large"]
    assert client(sim, "anthropic").list_models() == ["ept-sim-1", "ept-sim-large"]


# ------------------------------------------------------------------ secrets


def test_canary_key_never_appears_in_errors_logs_or_reprs(sim_keyed, caplog, monkeypatch):
    canary_wrong = "sk-canary-WRONG-5555666677778888"
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    # a correct call (with retries) and failing calls of every class, with DEBUG logging on for all libraries
    sim_keyed.control.set(script=["429", "500", "ok"], retry_after=0.05)
    ok = client(sim_keyed, key=SIM_KEY)
    texts += [repr(ok), str(ok.chat(MSGS, seed=1))]
    for key, cfg, kw in (
        (canary_wrong, {}, {}),
        (SIM_KEY, {"script": ["403"]}, {}),
        (SIM_KEY, {"script": ["400"]}, {}),
        (SIM_KEY, {"rate_malformed_json": 1.0}, {"max_retries": 0}),
        (SIM_KEY, {"rate_malformed_json": 0.0}, {"base_url": sim_keyed.root + "/api"}),
    ):
        sim_keyed.control.set(**cfg)
        monkeypatch.setenv("EPT_SIM_API_KEY", key)
        with pytest.raises(ProviderError) as ei:
            client(sim_keyed, key=key, **kw).chat(MSGS)
        texts += [str(ei.value), repr(ei.value), ei.value.message, repr(ei.value.args)]
    texts.append(caplog.text)
    blob = "\n".join(texts)
    assert "Incorrect API key" in blob  # the 401 really happened
    assert "chat/completions" in caplog.text  # the SDKs' debug logging was captured
    for secret in (SIM_KEY, canary_wrong, "canary"):
        assert secret not in blob


def test_exhausted_quota_429_is_not_retried(sim):
    sim.control.set(script=["quota"])
    with pytest.raises(ProviderError) as ei:
        client(sim).chat(MSGS)
    assert (ei.value.error_class, ei.value.status, ei.value.attempts) == ("credential", 429, 1)
    assert "quota" in ei.value.message and "$EPT_SIM_API_KEY" in ei.value.message


def test_retry_after_header_forms():
    from datetime import datetime, timedelta
    from email.utils import format_datetime

    from elo_per_token.egress.errors import parse_retry_after

    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "1"}) == 0.25
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= parse_retry_after({"retry-after": when}) <= 31
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None


def test_one_client_shared_by_many_threads(make_sim):
    from concurrent.futures import ThreadPoolExecutor

    s = make_sim(latency_ms=100)
    c = client(s)
    with ThreadPoolExecutor(16) as ex:
        results = list(ex.map(lambda i: c.chat(MSGS, seed=i, meta={"Job": f"j{i % 4}"}), range(32)))
    assert all(r.usage and r.attempts == 1 for r in results)
    assert s.control.stats()["by_job"] == {f"j{k}": 8 for k in range(4)}
    # replies depend on the seed only, not on which thread or when
    again = c.chat(MSGS, seed=5)
    assert again.choices[0].text == results[5].choices[0].text


def test_transient_retries_sleep_the_jittered_backoff(sim):
    import random

    # patience=0: 5xx after a success are retried on their own backoff, not waited out as an outage.
    c = ProviderClient(
        sim.profile(max_retries=3, patience=0), api_key=SIM_KEY, backoff_base=0.2, backoff_cap=10
    )
    c.chat(MSGS)  # warm up: SDK import and connection outside the timed part
    sim.control.set(rate_500=1.0)
    sim.control.reset()
    random.seed(12345)
    expected = [random.uniform(0, 0.2 * 2**i) for i in range(3)]  # what full jitter draws for attempts 1..3
    random.seed(12345)
    t0 = time.perf_counter()
    with pytest.raises(ProviderError) as ei:
        c.chat(MSGS)
    elapsed = time.perf_counter() - t0
    assert ei.value.attempts == 4 and sim.control.stats()["by_status"] == {"500": 4}
    assert sum(expected) <= elapsed < sum(expected) + 10.0  # generous: shared CI machines
