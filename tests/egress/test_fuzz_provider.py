"""Fuzz: provider bytes -> parsed response -> ledger record, with bounds on time and memory (issue 23).

Hypothesis (fixed seed, a bounded number of examples: it runs in .ci/run with the rest of the suite) feeds
hostile JSON into every parser of egress.proto_chat and egress.proto_messages — plain bodies of both protocols,
SSE streams of both — as whole values, as a field swapped into a valid reply, and as raw bytes. Each example must end in bounded time and
memory either as a malformed response (`Malformed`, retried and billed by the client) or as choices whose every
stored field is typed, and whose record is strict JSON. Any other exception (TypeError, KeyError, RecursionError,
ValueError…) is a bug of the kind issue 23 lists: it escaped as a `permanent` failure or a strategy crash.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from elo_per_token.egress.errors import Malformed
from elo_per_token.egress.proto_chat import chat_reply, parse_chat_stream
from elo_per_token.egress.proto_common import parse_json_text
from elo_per_token.egress.proto_messages import messages_reply, parse_messages_stream

TIME_S = 2.0  # per example, a hang guard (typical: well under 10 ms)
MEM_MB = 64  # per example, peak Python allocations
SETTINGS = settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

# Hostile leaves: NaN and infinities, huge and negative ints, control characters and bidi overrides, big strings.
LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["\x1b]52;c;aGk=\x07", "\u202e", "\n" * 500, "Answer: " + "9" * 500, "sk-canary-0123456789abcd"]),
)  # fmt: skip
JSONISH = st.recursive(LEAF, lambda kids: st.one_of(st.lists(kids, max_size=5),
                                                   st.dictionaries(st.text(max_size=10), kids, max_size=5)),
                       max_leaves=30)  # fmt: skip
# Raw text spliced in where a JSON value goes: what json.dumps cannot produce but a server can send.
RAW = st.sampled_from(["NaN", "Infinity", "-Infinity", "9" * 5000, "[" * 50_000 + "]" * 50_000, "1e999", '"\\ud800"',
                       "{}", "[]", "null", "42", '"x"'])  # fmt: skip


def _bounded(fn: Any, *args: Any) -> Any:
    """fn(*args) -> its value or the Malformed it raised; asserts the time and memory bounds."""

    def run() -> Any:
        try:
            return fn(*args)
        except Malformed as e:
            return e

    return bounded(run, TIME_S, MEM_MB)


def _check_choices(out: Any) -> None:
    """Choices that got through: every stored field typed, and the record they make strict JSON."""
    if isinstance(out, Malformed):
        return
    choices, model = out[0], out[1] if len(out) == 2 else out[2]
    assert isinstance(model, (str, type(None)))
    for c in choices:
        assert isinstance(c.text, (str, type(None)))
        assert isinstance(c.finish_reason, (str, type(None)))
        assert c.finish_reason is None or len(c.finish_reason) <= 200
        for tc in c.tool_calls:
            assert all(isinstance(tc[k], str) for k in ("id", "name", "arguments"))
        json.dumps({"text": c.text, "finish_reason": c.finish_reason, "tool_calls": c.tool_calls, "model": model},
                   allow_nan=False)  # fmt: skip


def _reply(body: dict[str, Any], anthropic: bool) -> Any:
    """The plain-body parser of one protocol."""
    return messages_reply(body) if anthropic else chat_reply(body)


def _plain(data: dict[str, Any], anthropic: bool) -> Any:
    body = parse_json_text(json.dumps(data))
    return _reply(body, anthropic)


VALID_OPENAI = {"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi",
                "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": "{}"}}]}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1}}  # fmt: skip
VALID_ANTHROPIC = {"model": "m", "content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t",
                   "name": "f", "input": {"a": 1}}], "stop_reason": "end_turn",
                   "usage": {"input_tokens": 1, "output_tokens": 1}}  # fmt: skip
PATHS_OPENAI = [("model",), ("choices",), ("choices", 0), ("choices", 0, "index"), ("choices", 0, "message"),
                ("choices", 0, "message", "content"), ("choices", 0, "message", "tool_calls"),
                ("choices", 0, "message", "tool_calls", 0), ("choices", 0, "message", "tool_calls", 0, "function"),
                ("choices", 0, "message", "tool_calls", 0, "function", "name"),
                ("choices", 0, "message", "tool_calls", 0, "function", "arguments"),
                ("choices", 0, "finish_reason"), ("usage",)]  # fmt: skip
PATHS_ANTHROPIC = [("model",), ("content",), ("content", 0), ("content", 0, "text"), ("content", 1),
                   ("content", 1, "input"), ("content", 1, "name"), ("stop_reason",), ("usage",)]  # fmt: skip


def _swap(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    doc = json.loads(json.dumps(doc))
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return doc


@seed(23)
@SETTINGS
@given(st.booleans(), st.data())
def test_one_field_swapped_for_a_hostile_value(anthropic, data):
    valid, paths = (VALID_ANTHROPIC, PATHS_ANTHROPIC) if anthropic else (VALID_OPENAI, PATHS_OPENAI)
    path = data.draw(st.sampled_from(paths), label="path")
    doc = _swap(valid, path, data.draw(JSONISH, label="value"))
    _check_choices(_bounded(_plain, doc, anthropic))


@seed(23)
@SETTINGS
@given(st.booleans(), st.sampled_from(PATHS_OPENAI + PATHS_ANTHROPIC), RAW)
def test_one_field_swapped_for_raw_non_json(anthropic, path, raw):
    """NaN, Infinity, a 5,000-digit int, 50k-deep nesting, a lone surrogate, spliced in as raw text."""
    valid = VALID_ANTHROPIC if anthropic else VALID_OPENAI
    try:
        marker = _swap(valid, path, "@@RAW@@")
    except (KeyError, IndexError, TypeError):
        return  # this path does not exist in this protocol's reply
    text = json.dumps(marker).replace('"@@RAW@@"', raw)
    out = _bounded(lambda t: _reply(parse_json_text(t), anthropic), text)
    _check_choices(out)


@seed(23)
@SETTINGS
@given(st.binary(max_size=400))
def test_raw_bytes_as_a_body_or_a_stream(raw):
    text = raw.decode("utf-8", errors="surrogateescape")
    for fn in (
        lambda t: _reply(parse_json_text(t), False),
        lambda t: _reply(parse_json_text(t), True),
        parse_chat_stream,
        parse_messages_stream,
    ):
        _check_choices(_bounded(fn, text))


def _sse(events: list[Any], names: list[str] | None = None) -> str:
    out = []
    for i, ev in enumerate(events):
        name = f"event: {names[i]}\n" if names else ""
        out.append(f"{name}data: {ev if isinstance(ev, str) else json.dumps(ev)}\n\n")
    return "".join(out)


CHUNK = st.fixed_dictionaries({}, optional={
    "model": JSONISH, "usage": JSONISH,
    "choices": st.one_of(JSONISH, st.lists(st.fixed_dictionaries({}, optional={
        "index": JSONISH, "finish_reason": JSONISH,
        "delta": st.one_of(JSONISH, st.fixed_dictionaries({}, optional={"content": JSONISH, "tool_calls": JSONISH}))}),
        max_size=3)),
})  # fmt: skip
MESSAGE_EVENT = st.one_of(
    st.fixed_dictionaries({"type": st.just("message_start"), "message": JSONISH}),
    st.fixed_dictionaries({"type": st.just("content_block_start"), "index": JSONISH, "content_block": JSONISH}),
    st.fixed_dictionaries({"type": st.just("content_block_delta"), "index": JSONISH, "delta": st.one_of(
        JSONISH, st.fixed_dictionaries({"type": st.sampled_from(["text_delta", "input_json_delta"]),
                                        "text": JSONISH, "partial_json": JSONISH}))}),
    st.fixed_dictionaries({"type": st.just("message_delta"), "delta": JSONISH, "usage": JSONISH}),
    st.fixed_dictionaries({"type": st.just("content_block_start"), "index": st.just(0),
                           "content_block": st.just({"type": "tool_use", "id": "t", "name": "f", "input": {}})}),
    JSONISH,
)  # fmt: skip


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
@seed(23)
@SETTINGS
@given(st.lists(st.one_of(CHUNK, JSONISH, RAW), max_size=6))
def test_hostile_chat_streams(events):
    _check_choices(_bounded(parse_chat_stream, _sse(events)))


@pytest.mark.slow
@seed(23)
@SETTINGS
@given(st.lists(st.one_of(MESSAGE_EVENT, RAW), max_size=6))
def test_hostile_message_streams(events):
    _check_choices(_bounded(parse_messages_stream, _sse(events)))
