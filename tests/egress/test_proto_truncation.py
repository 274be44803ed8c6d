"""Each protocol adapter's parsers on cut and hostile replies: a reply truncated at any byte (a dropped
connection, a proxy's buffer limit) or spliced with hostile bytes ends, in bounded time and memory, either as a
valid reply (every stored field typed) or — through classify — as a `transient` ProviderError that says the
response was malformed and carries no key. Nothing else may escape: another exception would be recorded as a
`permanent` failure or crash the strategy."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai  # noqa: F401  (classify imports it: loaded here, outside the timed and traced part)
from bounds import bounded
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from elo_per_token.egress.errors import Malformed, ProviderError, classify
from elo_per_token.egress.profiles import Profile
from elo_per_token.egress.proto_chat import chat_reply, parse_chat_stream
from elo_per_token.egress.proto_common import Choice, parse_json_text
from elo_per_token.egress.proto_messages import messages_reply, parse_messages_stream

KEY = "sk-canary-0123456789abcdefWXYZ"
TIME_S = 2.0  # per example, a hang guard
MEM_MB = 64  # per example, peak Python allocations
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROFILE = Profile(name="p", protocol="openai", base_url="http://127.0.0.1:9/v1", api_key_env="X", model="m")


def _sse(events: list[dict[str, Any]]) -> str:
    return "".join(f"event: {ev.get('type', 'chunk')}\ndata: {json.dumps(ev)}\n\n" for ev in events)


CHAT_STREAM = (
    _sse(
        [
            {"model": "m", "choices": [{"index": 0, "delta": {"content": "The answer "}}]},
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f"}}]},
                    }
                ]
            },
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]},
                    }
                ]
            },
            {"choices": [{"index": 0, "delta": {"content": "is 42."}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}},
        ]
    )
    + "data: [DONE]\n\n"
)
MESSAGES_STREAM = _sse(
    [
        {
            "type": "message_start",
            "message": {"model": "m", "usage": {"input_tokens": 3, "output_tokens": 1}},
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "The answer is 42."},
        },
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t", "name": "f"},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"a": '},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "1}"},
        },
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]
)
CHAT_BODY = json.dumps(
    {
        "model": "m",
        "choices": [{"index": 0, "message": {"content": "42", "tool_calls": []}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
)
MESSAGES_BODY = json.dumps(
    {
        "model": "m",
        "content": [
            {"type": "text", "text": "42"},
            {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}},
        ],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
)


def _stream(parse: Callable[[str], Any]) -> Callable[[str], tuple[list[Choice], str | None]]:
    def run(text: str) -> tuple[list[Choice], str | None]:
        choices, _usage, model = parse(text)
        return choices, model

    return run


def _body(reply: Callable[[dict[str, Any]], Any]) -> Callable[[str], tuple[list[Choice], str | None]]:
    return lambda text: reply(parse_json_text(text))


# (parser, a valid reply for it): both protocols, streamed and plain.
ADAPTERS = {
    "chat stream": (_stream(parse_chat_stream), CHAT_STREAM),
    "chat body": (_body(chat_reply), CHAT_BODY),
    "messages stream": (_stream(parse_messages_stream), MESSAGES_STREAM),
    "messages body": (_body(messages_reply), MESSAGES_BODY),
}


def _outcome(parse: Callable[[str], tuple[list[Choice], str | None]], text: str) -> Any:
    """The parsed reply, or the ProviderError classify makes of a Malformed one; bounded time and memory."""

    def run() -> Any:
        try:
            return parse(text)
        except Malformed as e:
            return classify(e, PROFILE, KEY)

    return bounded(run, TIME_S, MEM_MB)


def _check(out: Any) -> None:
    if isinstance(out, ProviderError):
        # A stream cut before its finish reason is an incomplete reply; anything else unusable is malformed.
        assert out.error_class == "transient"
        assert "malformed response" in out.message or "incomplete reply" in out.message
        assert KEY not in str(out)
        return
    choices, model = out
    assert choices and isinstance(model, (str, type(None)))
    for c in choices:
        assert isinstance(c.text, (str, type(None))) and isinstance(c.finish_reason, (str, type(None)))
        for tc in c.tool_calls:
            assert all(isinstance(tc[k], str) for k in ("id", "name", "arguments"))
        json.dumps(
            {"text": c.text, "finish_reason": c.finish_reason, "tool_calls": c.tool_calls}, allow_nan=False
        )


def test_the_valid_replies_parse() -> None:
    """The fixtures themselves are valid: a truncation test over a broken fixture would prove nothing."""
    for name, (parse, text) in ADAPTERS.items():
        choices, model = parse(text)
        assert model == "m" and choices[0].text and "42" in choices[0].text, name


@seed(29)
@SETTINGS
@given(st.sampled_from(sorted(ADAPTERS)), st.floats(min_value=0.0, max_value=1.0))
def test_a_reply_cut_at_any_byte(adapter: str, where: float) -> None:
    parse, text = ADAPTERS[adapter]
    _check(_outcome(parse, text[: int(len(text) * where)]))


@seed(29)
@SETTINGS
@given(
    st.sampled_from(sorted(ADAPTERS)),
    st.floats(min_value=0.0, max_value=1.0),
    st.one_of(
        st.text(max_size=200),
        st.sampled_from(
            ["\x00", "\r\n\r\n", "data: [DONE]\n\n", "data: {\n\n", "[" * 20_000, "9" * 5000, KEY]
        ),
    ),
)
def test_hostile_bytes_spliced_into_a_reply(adapter: str, where: float, junk: str) -> None:
    parse, text = ADAPTERS[adapter]
    cut = int(len(text) * where)
    _check(_outcome(parse, text[:cut] + junk + text[cut:]))


def test_a_stream_cut_inside_a_tool_call_is_malformed_not_a_half_call() -> None:
    """The Messages stream cut after the tool input's first half: its JSON is incomplete, so the reply is
    malformed (retried), and it carries the usage it stated (it was billed)."""
    cut = MESSAGES_STREAM.index('"partial_json": "1}"')
    head = MESSAGES_STREAM[:cut].rsplit("\n\n", 1)[0] + "\n\n"  # the events before the second half, whole
    out = _outcome(_stream(parse_messages_stream), head)
    assert isinstance(out, ProviderError) and out.error_class == "transient"
    try:
        parse_messages_stream(head)
    except Malformed as e:
        assert e.usage == {"prompt_tokens": 3, "completion_tokens": 1}
    else:
        raise AssertionError("a cut tool call parsed as a reply")
