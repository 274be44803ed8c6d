"""Issue 23, the provider half: any bytes a provider sends end in bounded time and memory, as a reply or as a
classed ProviderError, for both protocols, streamed and not — over real HTTP against testkit/hostile_provider.py.

Numbered cases (each fails on c20688e): 4 total deadline (drip, header drip, endless stream, stall), 5 byte cap,
6 NaN/Infinity labels, 7 a key echoed in a 200, 8 `"content": 42`, 12 a stream cut by the server is transient,
13 a proxy's 400 "Invalid model name" is not a credential problem; plus ProviderError pickling and a cut
Anthropic tool-call stream.
"""

from __future__ import annotations

import pickle
import resource
import time

import pytest
from hostile_provider import start_hostile

from elo_per_token.egress.client import ProviderClient
from elo_per_token.egress.errors import Malformed, ProviderError
from elo_per_token.egress.profiles import Profile
from elo_per_token.egress.proto_messages import parse_messages_stream

KEY = "sk-canary-0123456789abcdefWXYZ"
MSGS = [{"role": "user", "content": "What is 2 + 3? End with 'Answer: N'."}]
TIMEOUT = 0.6  # the total deadline per request in these tests
RETRIES = 1
# Each attempt ends by its deadline; plus the client's backoff (base 0.01 s) and a margin for a loaded machine.
BOUND_S = (RETRIES + 1) * TIMEOUT + 1.5
COMBOS = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]


@pytest.fixture(scope="module")
def hostile():
    h = start_hostile(key=KEY, huge_mb=48)
    yield h
    h.stop()


def _client(h, protocol: str, stream: bool, **over) -> ProviderClient:
    prof = Profile(name=f"hostile-{protocol}", protocol=protocol, base_url=h.url if protocol == "openai" else h.root,
                   api_key_env="EPT_HOSTILE_KEY", model="hostile-1", timeout=TIMEOUT, max_retries=RETRIES,
                   stream=stream, max_response_mb=1.0, **over)  # fmt: skip
    return ProviderClient(prof, api_key=KEY, backoff_base=0.01, backoff_cap=0.05)


def _call(h, mode: str, protocol: str, stream: bool):
    h.force = mode
    c = _client(h, protocol, stream)
    assert c.sdk is not None  # built (and the SDK imported) before the clock starts
    t0 = time.monotonic()
    try:
        return c.chat(MSGS), time.monotonic() - t0
    except ProviderError as e:
        return e, time.monotonic() - t0


@pytest.mark.slow  # 16 cases of about two deadlines each
@pytest.mark.parametrize("protocol,stream", COMBOS)
@pytest.mark.parametrize("mode", ["drip", "header_drip", "endless", "stall"])
def test_total_deadline_per_request(hostile, mode, protocol, stream):
    """Case 4: a byte every 50 ms, headers dripped, an endless stream, a silent server: each attempt ends at the
    profile's timeout (total, not per read) and the call is a transient after its retries."""
    out, took = _call(hostile, mode, protocol, stream)
    assert isinstance(out, ProviderError), out
    assert out.error_class == "transient" and out.attempts == RETRIES + 1, out
    assert "timed out" in out.message or "too large" in out.message, out.message
    assert took < BOUND_S, (mode, took)


@pytest.mark.parametrize("protocol,stream", COMBOS)
def test_byte_cap_per_response(hostile, protocol, stream):
    """Case 5: a 48 MB body against a 1 MB cap: refused after about the cap, counted as it streams in (the
    process's peak RSS grows by far less than the body)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out, took = _call(hostile, "huge", protocol, stream)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert isinstance(out, ProviderError) and out.error_class == "transient", out
    assert "too large" in out.message and "max_response_mb" in out.message, out.message
    assert grown_mb < 40, grown_mb  # the old client read all 48 MB (and copied it) before parsing
    assert took < BOUND_S


@pytest.mark.parametrize("protocol,stream", COMBOS)
@pytest.mark.parametrize("mode", ["nan_finish", "inf_model", "content_int", "bignum_json", "deep"])
def test_untyped_fields_are_malformed(hostile, mode, protocol, stream):
    """Cases 6 and 8: NaN/Infinity labels, `"content": 42`, a 5,000-digit number, 100k-deep nesting: a malformed
    (transient, retried) response — never stored, never a TypeError in a strategy."""
    out, took = _call(hostile, mode, protocol, stream)
    assert isinstance(out, ProviderError), (mode, out.choices if hasattr(out, "choices") else out)
    assert out.error_class == "transient" and "malformed" in out.message, out.message
    assert out.attempts == RETRIES + 1
    assert took < BOUND_S


@pytest.mark.parametrize("protocol,stream", COMBOS)
def test_key_echoed_in_a_200_is_masked(hostile, protocol, stream):
    """Case 7: a provider that echoes the key in `model` gets it masked before anything can store it."""
    out, _ = _call(hostile, "echo_key", protocol, stream)
    assert not isinstance(out, ProviderError), out
    assert out.model and out.model.startswith("m-Bearer ") and KEY not in out.model, out.model
    assert KEY not in repr(out)


@pytest.mark.parametrize("protocol,stream", COMBOS)
def test_stream_closed_early_is_transient_not_unreachable(hostile, protocol, stream):
    """Case 12: a reply the server cuts short (llama.cpp aborting a stream) is a transient, retried; the circuit
    over failed connects never opens, because every connect succeeded."""
    hostile.force = "early_close"
    c = _client(hostile, protocol, stream)
    for _ in range(10):  # more than UNREACHABLE_CIRCUIT
        with pytest.raises(ProviderError) as ei:
            c.chat(MSGS)
        assert ei.value.error_class == "transient", ei.value
        assert "closed the connection" in ei.value.message, ei.value.message
    assert not c.circuit_open()
    hostile.force = "ok"
    assert "Answer: 5" in (c.chat(MSGS).choices[0].text or "")


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_proxy_invalid_model_name_is_endpoint_not_credential(hostile, protocol):
    """Case 13: LiteLLM's 400 "Invalid model name" on a profile's first request names the model, not the key."""
    out, _ = _call(hostile, "bad_model", protocol, False)
    assert isinstance(out, ProviderError)
    assert out.error_class == "endpoint", out
    assert "model name 'hostile-1'" in out.message and "check the key" not in out.message.lower()


@pytest.mark.parametrize("protocol,stream", COMBOS)
def test_ok_replies_still_pass(hostile, protocol, stream):
    """The control: the same server's plain reply is read as before (text, finish reason, usage)."""
    out, _ = _call(hostile, "ok", protocol, stream)
    assert not isinstance(out, ProviderError), out
    assert "Answer: 5" in (out.choices[0].text or "") and out.choices[0].finish_reason == "stop"
    assert out.usage and out.usage["prompt_tokens"] == 11 and out.usage["completion_tokens"] == 7


def test_provider_error_pickles():
    """Issue 24 item 5: a ProviderError crosses process boundaries (Celery results, multiprocessing) intact."""
    e = ProviderError("rate_limit", "429 from x", status=429, retry_after=1.5, attempts=3, code="rl")
    e.usage, e.usage_invalid = {"prompt_tokens": 1, "completion_tokens": 2}, None
    e.discarded = [{"usage": None, "usage_invalid": "x", "message": "m", "attempt": 1}]
    back = pickle.loads(pickle.dumps(e))
    assert (back.error_class, back.message, back.status, back.retry_after, back.attempts, back.code) == (
        "rate_limit", "429 from x", 429, 1.5, 3, "rl")  # fmt: skip
    assert back.usage == e.usage and back.discarded == e.discarded and str(back) == str(e)


def test_cut_tool_call_stream_is_malformed():
    """Issue 24 item 5: an Anthropic stream cut inside a tool call's JSON is a malformed (transient) response,
    not a JSONDecodeError that escapes as `permanent`."""
    events = [
        '{"type":"message_start","message":{"model":"m","usage":{"input_tokens":3,"output_tokens":0}}}',
        '{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{}}}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"a\\": [1, 2"}}',
    ]
    with pytest.raises(Malformed, match="tool call"):
        parse_messages_stream("".join(f"data: {e}\n\n" for e in events))


def test_ledger_never_writes_non_finite_json(tmp_path):
    """Case 6, last line of defence: a NaN or Infinity that reaches the writer (a grader's `"got": inf` for a
    5,000-digit answer) is written as a string, never as a `NaN` token that makes the write-once object
    unreadable, and never as an exception that fails the sweep; job bytes and failure objects alike."""
    import json

    from elo_per_token.contracts.jobs import Job
    from elo_per_token.contracts.records import CallRecord, JobResult, Outcome
    from elo_per_token.ledger import open_ledger

    def strict(raw: bytes) -> list:
        def refuse(tok: str) -> None:
            raise AssertionError(f"non-finite token {tok} written")

        return [json.loads(x, parse_constant=refuse) for x in raw.decode().splitlines()]

    job = Job(run_id="r1", task={"task_id": "t1", "family": "fam"}, strategy="greedy", budget_n=1)
    call = CallRecord(call_index=0, role="sample", model="m", usage={"prompt_tokens": 1, "completion_tokens": 1},
                      latency_s=0.1, attempts=1, finish_reason="stop")  # fmt: skip
    grader = {"grader": "numeric", "got": float("inf"), "want": 4.0, "nested": [float("nan")]}
    result = JobResult(
        job, [call], Outcome(answer="9" * 400, score=0.0, correct=False, grader=grader), 1.0, 2.0
    )
    lines = strict(result.to_jsonl())
    assert lines[-1]["grader"]["got"] == "inf" and lines[-1]["grader"]["nested"] == ["nan"]
    led = open_ledger(tmp_path / "ledger")
    assert led.put_job("r1", job.key, result.to_jsonl())
    strict(led.get_job("r1", job.key))
    led.put_failure("r1", job.key, {"class": "task", "latency": float("inf"), "lines": result.to_lines()})
    failure = led.list_failures("r1")[job.key]
    assert failure["latency"] == "inf"


@pytest.mark.parametrize("protocol,stream", [("openai", False), ("anthropic", False), ("anthropic", True)])
def test_malformed_replies_keep_the_usage_they_were_billed(hostile, protocol, stream):
    """A malformed 2xx was billed: the usage it stated rides on the error and on each discarded attempt (the
    worker records them as calls), for plain bodies and for a stream whose usage came before the bad field."""
    out, _ = _call(hostile, "nan_finish", protocol, stream)
    assert isinstance(out, ProviderError) and "malformed" in out.message
    want = {"prompt_tokens": 11, "completion_tokens": 7}
    assert out.usage is not None and {k: out.usage[k] for k in want} == want, out.usage
    assert len(out.discarded) == RETRIES and all(d["usage"] for d in out.discarded), out.discarded


def test_proxies_from_the_environment_are_used_and_bounded(hostile, monkeypatch):
    """The bounded transport keeps the environment's proxy (HTTP_PROXY) working — the hostile server plays the
    proxy for a host that does not exist — and a reply dripped through the proxy is cut at the deadline too."""
    for k in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HTTP_PROXY", hostile.url.removesuffix("/v1"))
    prof = Profile(name="via-proxy", protocol="openai", base_url="http://ept-no-such-host.invalid/v1",
                   api_key_env="EPT_HOSTILE_KEY", model="hostile-1", timeout=TIMEOUT, max_retries=RETRIES)  # fmt: skip
    hostile.force = "ok"
    c = ProviderClient(prof, api_key=KEY, backoff_base=0.01, backoff_cap=0.05)
    assert "Answer: 5" in (c.chat(MSGS).choices[0].text or "")
    hostile.force = "drip"
    t0 = time.monotonic()
    with pytest.raises(ProviderError) as ei:
        c.chat(MSGS)
    assert ei.value.error_class == "transient" and time.monotonic() - t0 < BOUND_S
