"""Property: any request body on any completion route gets a well-formed answer or a 4xx, in bounded time and memory.

The simulator's wire-format modules (proto_chat, proto_messages, proto_responses, with completion.py reading the
body) face whatever a client sends. Hypothesis (fixed seed, a bounded number of examples) posts random and hostile
bodies — random JSON values, near-valid requests with hostile fields (NaN, huge ints, deep nesting, wrong types),
raw bytes — to a real simulator on a loopback port. Each answer must be either a 4xx with the route's error shape,
or a 200 whose body is JSON (or an SSE stream of JSON events) in the route's shape. A 5xx, a hang or a blow-up in
memory is a bug: a hostile body crashed the server's parsing.
"""

from __future__ import annotations

import json
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, seed, settings
from hypothesis import strategies as st

from elo_per_token.simulator.control import RunningSimulator, start_in_thread

TIME_S = 5.0  # per request, wall clock (typical: a few ms)
MEM_MB = 64  # per request, peak Python allocations of the client and the in-process server together
SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
ROUTES = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}

LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["\x1b]52;c;aGk=\x07", "\u202e", "\n" * 500, "user", "assistant", "system", "text", "tool_use",
                     "tool_result", "message", "enabled", "x" * 5000]),
)  # fmt: skip
JSONISH = st.recursive(LEAF, lambda kids: st.one_of(st.lists(kids, max_size=5),
                                                   st.dictionaries(st.text(max_size=10), kids, max_size=5)),
                       max_leaves=30)  # fmt: skip
# Content blocks of every protocol, with hostile values in their fields.
BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "input_text", "image", "thinking"])},
    optional={"text": JSONISH, "id": JSONISH, "name": JSONISH, "input": JSONISH, "content": JSONISH,
              "tool_use_id": JSONISH, "cache_control": JSONISH},
)  # fmt: skip
CONTENT = st.one_of(st.text(max_size=200), st.lists(st.one_of(BLOCK, JSONISH), max_size=4), JSONISH)
MESSAGE = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool", "developer"]), JSONISH)},
    optional={"content": CONTENT, "tool_calls": JSONISH, "tool_call_id": JSONISH, "type": JSONISH},
)
TOOL = st.one_of(
    st.fixed_dictionaries({"type": st.just("function"),
                           "function": st.fixed_dictionaries({"name": JSONISH}, optional={"parameters": JSONISH})}),
    st.fixed_dictionaries({"name": JSONISH}, optional={"input_schema": JSONISH, "description": JSONISH}),
    JSONISH,
)  # fmt: skip
# Every field some route reads, each either plausible or hostile.
FIELDS: dict[str, Any] = {
    "messages": st.one_of(st.lists(MESSAGE, min_size=1, max_size=4), JSONISH),
    "n": st.one_of(st.integers(min_value=-3, max_value=200), JSONISH),
    "seed": st.one_of(st.integers(min_value=-(2**70), max_value=2**70), JSONISH),
    "temperature": JSONISH,
    "top_p": JSONISH,
    "max_tokens": st.one_of(st.integers(min_value=-5, max_value=10**7), JSONISH),
    "max_completion_tokens": JSONISH,
    "max_output_tokens": st.one_of(st.integers(min_value=-5, max_value=10**7), JSONISH),
    "stop": st.one_of(st.lists(st.text(max_size=5), max_size=3), JSONISH),
    "stop_sequences": JSONISH,
    "tools": st.one_of(st.lists(TOOL, max_size=3), JSONISH),
    "stream": st.one_of(st.booleans(), JSONISH),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": JSONISH}), JSONISH),
    "reasoning_effort": JSONISH,
    "reasoning": st.one_of(st.fixed_dictionaries({"effort": JSONISH}), JSONISH),
    "thinking": st.one_of(
        st.fixed_dictionaries({"type": st.just("enabled"), "budget_tokens": JSONISH}), JSONISH
    ),
    "system": st.one_of(st.lists(BLOCK, max_size=3), JSONISH),
    "input": st.one_of(st.text(max_size=100), st.lists(st.one_of(MESSAGE, JSONISH), max_size=4), JSONISH),
    "instructions": JSONISH,
}
# A valid request for every route (chat and messages read `messages`, responses reads `input`) with up to
# three of its fields replaced by plausible or hostile values: most examples reach the answer path.
VALID = {"model": "ept-sim-1", "max_tokens": 64, "messages": [{"role": "user", "content": "What is 2+2?"}],
         "input": "What is 2+2?"}  # fmt: skip
NEAR_VALID = st.lists(st.sampled_from(sorted(FIELDS)), max_size=3, unique=True).flatmap(
    lambda keys: st.tuples(st.booleans(), st.fixed_dictionaries({k: FIELDS[k] for k in keys})).map(
        lambda se: {**VALID, "stream": se[0], **se[1]}
    )
)
FREE = st.fixed_dictionaries({"model": st.one_of(st.just("ept-sim-1"), JSONISH)}, optional=FIELDS)
BODY = st.one_of(
    NEAR_VALID.map(lambda b: json.dumps(b).encode()),
    NEAR_VALID.map(lambda b: json.dumps(b).encode()),
    FREE.map(lambda b: json.dumps(b).encode()),
    JSONISH.map(lambda b: json.dumps(b).encode()),
    st.binary(max_size=200),
    st.sampled_from(
        [b"", b"[" * 5000 + b"]" * 5000, b'{"model": "m", "messages": ' + b"[" * 5000, b"\xff\xfe"]
    ),
)


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    # A window, the prompt cache and a small thinking cap: the code paths a hostile body can reach.
    with start_in_thread({"seed": 3, "prompt_cache": True, "context_length": 200_000}) as running:
        yield running


def _post(url: str, data: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
    req = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(req, timeout=TIME_S) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def _bounded_post(url: str, data: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
    """The answer to one POST; asserts the time and memory bounds (the server runs in this process)."""
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        return _post(url, data, headers)
    finally:
        took = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        assert took < TIME_S, took
        assert peak < MEM_MB, peak


def _loads(raw: bytes | str) -> Any:
    """JSON as the simulator writes it (json.dumps: NaN only from a hostile-usage fault, none configured here)."""
    return json.loads(raw, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def _sse_events(text: str) -> list[Any]:
    """The data of every SSE event; each one JSON except chat's closing [DONE]."""
    out = []
    for block in text.split("\n\n"):
        if not block:
            continue
        data = [ln[len("data: ") :] for ln in block.split("\n") if ln.startswith("data: ")]
        assert len(data) == 1, block[:200]
        out.append(data[0] if data[0] == "[DONE]" else _loads(data[0]))
    return out


def _check_error(route: str, body: Any) -> None:
    if route == "messages":
        assert body["type"] == "error" and isinstance(body["error"]["message"], str)
    else:
        assert isinstance(body["error"]["message"], str) and isinstance(body["error"]["type"], str)


def _check_answer(route: str, ctype: str, raw: bytes) -> None:
    """A 200 in the route's shape: the JSON body, or the SSE stream ending in the route's closing event."""
    if ctype.startswith("text/event-stream"):
        events = _sse_events(raw.decode())
        assert events, "empty stream"
        last = events[-1]
        if route == "chat":
            assert last == "[DONE]"
            assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
        elif route == "messages":
            assert last == {"type": "message_stop"}
        else:
            assert last["type"] in ("response.completed", "response.incomplete")
        return
    assert ctype.startswith("application/json"), ctype
    body = _loads(raw)
    if route == "chat":
        assert body["object"] == "chat.completion" and body["choices"]
        assert all(isinstance(c["message"]["content"], str | None) for c in body["choices"])
        assert isinstance(body["usage"]["prompt_tokens"], int)
    elif route == "messages":
        assert body["type"] == "message" and isinstance(body["content"], list)
        assert isinstance(body["usage"]["input_tokens"], int)
    else:
        assert body["object"] == "response" and isinstance(body["output"][0]["content"][0]["text"], str)


def _body(**fields: Any) -> bytes:
    return json.dumps({**VALID, **fields}).encode()


# Bodies that once crashed the server (aiohttp's plain-text 500, or the brain's 500): fixed examples.
@pytest.mark.slow
@example(route="chat", data=b"[" * 5000 + b"]" * 5000, anthropic_header=False)
@example(route="chat", data=_body(max_tokens=1.0), anthropic_header=False)
@example(route="chat", data=_body(max_tokens={}), anthropic_header=False)
@example(route="messages", data=_body(system=1), anthropic_header=True)
@example(route="messages", data=_body(messages=[{"role": "user", "content": [5, {"type": "text", "text": 7}]}]),
         anthropic_header=True)  # fmt: skip
@example(route="messages", data=_body(tools=[{"name": "calc"}, 5]), anthropic_header=True)
@example(
    route="chat", data=_body(tools=[{"type": "function", "function": {"name": 5}}]), anthropic_header=False
)
@example(route="chat", data=_body(tools=5), anthropic_header=False)
@example(route="responses", data=_body(input=[{"type": "message", "role": "user", "content": 5}]),
         anthropic_header=False)  # fmt: skip
@seed(20261201)
@SETTINGS
@given(route=st.sampled_from(sorted(ROUTES)), data=BODY, anthropic_header=st.booleans())
def test_any_body_gets_a_well_formed_answer_or_a_4xx(
    sim: RunningSimulator, route: str, data: bytes, anthropic_header: bool
) -> None:
    headers = {"anthropic-version": "2023-06-01"} if anthropic_header else {}
    status, ctype, raw = _bounded_post(sim.root + ROUTES[route], data, headers)
    event(f"{route} {status} {ctype.split(';')[0]}")
    assert status == 200 or 400 <= status < 500, (status, raw[:300])
    if status != 200:
        _check_error(route, _loads(raw))
        return
    _check_answer(route, ctype, raw)


def test_the_property_sees_both_outcomes(sim: RunningSimulator) -> None:
    """The checks above can fail: a valid body is answered 200 and a body without messages 400, on every route."""
    for route, path in ROUTES.items():
        ok: dict[str, Any] = {"model": "ept-sim-1", "max_tokens": 50}
        ok |= {"input": "hi"} if route == "responses" else {"messages": [{"role": "user", "content": "hi"}]}
        status, ctype, raw = _post(sim.root + path, json.dumps(ok).encode(), {})
        assert status == 200, raw[:300]
        _check_answer(route, ctype, raw)
        status, _, raw = _post(sim.root + path, json.dumps({"model": "ept-sim-1"}).encode(), {})
        assert status == 400
        _check_error(route, _loads(raw))
