"""The Anthropic messages protocol: OpenAI-style messages translated, the request, the plain reply and
the SSE stream. Usage keys are renamed (input_tokens -> prompt_tokens, output_tokens -> completion_tokens)."""

from __future__ import annotations

import json
from typing import Any

from elo_per_token.egress.errors import Incomplete, Malformed, ProviderError
from elo_per_token.egress.profiles import Profile
from elo_per_token.egress.proto_common import (
    Choice,
    Reply,
    index_field,
    label,
    loads,
    normalise_usage,
    obj_field,
    parse_json,
    sse_events,
    text_field,
    text_or_none,
)

ANTHROPIC_DEFAULT_MAX_TOKENS = 1024
_ANTHROPIC_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}


def _message_event(kind: Any, ev: dict[str, Any], blocks: dict[int, dict[str, Any]]) -> None:
    """content_block_start / content_block_delta folded into `blocks` (text or a tool call's partial JSON)."""
    if kind == "content_block_start":
        b = dict(obj_field(ev.get("content_block"), "a content block"))
        if b.get("type") == "tool_use":
            b["partial"] = ""
        blocks[index_field(ev.get("index"), "a content block's index")] = b
        return
    b = blocks.setdefault(
        index_field(ev.get("index"), "a content block's index"), {"type": "text", "text": ""}
    )
    d = obj_field(ev.get("delta"), "a delta")
    if d.get("type") == "text_delta":
        b["text"] = (text_field(b.get("text"), "a text block") or "") + (
            text_field(d.get("text"), "a text delta") or ""
        )
    elif d.get("type") == "thinking_delta":  # extended thinking, streamed: kept for the transcript
        # Not content: a thinking delta that is not text is dropped, never a malformed (retried) reply.
        b["thinking"] = (text_or_none(b.get("thinking")) or "") + (text_or_none(d.get("thinking")) or "")
    elif d.get("type") == "input_json_delta":
        b["partial"] = (text_field(b.get("partial"), "a tool input") or "") + (
            text_field(d.get("partial_json"), "a tool input delta") or ""
        )


def parse_messages_stream(text: str) -> tuple[list[Choice], dict[str, Any] | None, str | None]:
    """Anthropic message events -> one choice; usage = message_start's usage updated by message_delta's.
    A tool call whose streamed input is not complete JSON (the stream was cut) is a malformed response; a
    malformed stream carries the usage it stated (it was billed all the same)."""
    seen: dict[str, Any] = {"usage": None, "model": None, "stop": None}
    try:
        choice = _message_choice(text, seen)
    except Malformed as e:
        e.usage = normalise_usage(seen["usage"], True)
        raise
    return [choice], normalise_usage(seen["usage"], True), seen["model"]


def _message_choice(text: str, seen: dict[str, Any]) -> Choice:
    """The fold of parse_messages_stream: the choice; usage, model and stop reason as seen so far in `seen`."""
    blocks: dict[int, dict[str, Any]] = {}
    for name, ev in sse_events(text):
        if not isinstance(ev, dict):
            raise Malformed("an SSE event is not a JSON object")
        kind = ev.get("type", name)
        if kind == "message_start":
            msg = obj_field(ev.get("message"), "message_start's message")
            seen["usage"] = dict(msg["usage"]) if isinstance(msg.get("usage"), dict) else None
            seen["model"] = label(msg.get("model"), "model")
        elif kind in ("content_block_start", "content_block_delta"):
            _message_event(kind, ev, blocks)
        elif kind == "message_delta":
            if isinstance(ev.get("usage"), dict):
                seen["usage"] = {
                    **(seen["usage"] or {}),
                    **{k: v for k, v in ev["usage"].items() if v is not None},
                }
            seen["stop"] = (
                obj_field(ev.get("delta"), "message_delta's delta").get("stop_reason") or seen["stop"]
            )
        elif kind == "error":
            raise Malformed(f"the stream ended with an error event: {str(ev.get('error'))[:300]}")
    for b in blocks.values():
        if b.get("type") == "tool_use" and b.get("partial"):
            b["input"] = loads(b["partial"], "a streamed tool call's input")
    if not seen["stop"]:
        raise Incomplete(
            "the stream ended with no stop_reason: the server cut the generation short (an interrupted reply)"
        )
    return _anthropic_choice({"content": [blocks[i] for i in sorted(blocks)], "stop_reason": seen["stop"]})


def _anthropic_choice(data: dict[str, Any]) -> Choice:
    blocks = data.get("content")
    if not isinstance(blocks, list):
        raise Malformed("no content in the response")
    blocks = [obj_field(b, "a content block") for b in blocks]
    texts = [text_field(b.get("text"), "a text block") or "" for b in blocks if b.get("type") == "text"]
    calls = []
    for b in blocks:
        if b.get("type") == "tool_use":
            try:
                args = json.dumps(b.get("input", {}), allow_nan=False)
            except (ValueError, TypeError, RecursionError):
                raise Malformed("a tool call's input is not finite JSON") from None
            calls.append(
                {
                    "id": text_field(b.get("id"), "a tool call's id") or "",
                    "name": text_field(b.get("name"), "a tool call's name") or "",
                    "arguments": args,
                }
            )
    stop = label(data.get("stop_reason"), "stop_reason")  # passed through when not a known reason
    thinking = [
        b["thinking"] for b in blocks if b.get("type") == "thinking" and isinstance(b.get("thinking"), str)
    ]
    return Choice(
        text="".join(texts) if texts else None,
        finish_reason=_ANTHROPIC_FINISH.get(stop, stop) if stop else None,
        tool_calls=calls,
        reasoning="".join(thinking) or None,
    )


def to_anthropic(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[str | None, list[dict[str, Any]], list[dict[str, Any]] | None]:
    """OpenAI-style messages/tools -> Anthropic (system, messages, tools). Minimal: text, tool calls, tool results."""
    system = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system") or None
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m.get("tool_call_id", ""),
                "content": str(m.get("content") or ""),
            }
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)  # consecutive tool results share one user turn
            else:
                out.append({"role": "user", "content": [block]})
            continue
        if role == "assistant" and m.get("tool_calls"):
            blocks: list[dict[str, Any]] = (
                [{"type": "text", "text": m["content"]}] if m.get("content") else []
            )
            for tc in m["tool_calls"]:
                fn = tc.get("function", tc)
                args = fn.get("arguments") or "{}"
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": tc.get("id", ""),
                        "name": fn.get("name", ""),
                        "input": json.loads(args) if isinstance(args, str) else args,
                    }
                )
            out.append({"role": "assistant", "content": blocks})
            continue
        out.append({"role": role, "content": m.get("content") or ""})
    a_tools = None
    if tools:
        a_tools = [
            {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "input_schema": t["function"].get("parameters") or {"type": "object", "properties": {}},
            }
            for t in tools
        ]
    return system, out, a_tools


def messages_reply(data: dict[str, Any]) -> tuple[list[Choice], str | None]:
    """The one choice and the model name of a plain (not streamed) 2xx body, every field type-checked."""
    try:
        return [_anthropic_choice(data)], label(data.get("model"), "model")
    except Malformed as e:
        e.usage = normalise_usage(data.get("usage"), True)  # the response was billed all the same
        raise


def messages_request(
    profile: Profile,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    temperature: float,
    seed: int | None,
    max_tokens: int | None,
    gen: dict[str, Any],
    headers: dict[str, str],
) -> tuple[dict[str, Any], int | None]:
    """The Messages request's SDK arguments (its own field names for the generation settings) and the
    max_tokens it asks for (extended thinking raises it). The seed goes into `headers`."""
    if seed is not None:  # the messages API has no seed; the simulator reads this header
        headers["X-EPT-Seed"] = str(seed)
    system, a_msgs, a_tools = to_anthropic(messages, tools)
    # temperature goes in extra_body: recent anthropic SDKs dropped the typed parameter, the API keeps it.
    if gen.get("reasoning_effort") is not None:
        raise ProviderError(
            "permanent",
            f"profile '{profile.name}' speaks the Anthropic protocol, which has no reasoning_effort: "
            "set thinking_budget (thinking.budget_tokens) instead",
            attempts=0,
        )
    extra: dict[str, Any] = {"temperature": temperature}
    budget = gen.get("thinking_budget")
    if budget:
        # Extended thinking: budget_tokens counts inside max_tokens, and the API accepts no temperature.
        extra = {"thinking": {"type": "enabled", "budget_tokens": budget}}
        max_tokens = max_tokens or budget + ANTHROPIC_DEFAULT_MAX_TOKENS
    if gen.get("top_p") is not None:
        extra["top_p"] = gen["top_p"]
    if gen.get("stop"):
        extra["stop_sequences"] = list(gen["stop"])
    kwargs: dict[str, Any] = {
        "model": profile.model,
        "messages": a_msgs,
        "max_tokens": max_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS,
        "extra_headers": headers,
        "extra_body": {**extra, **(gen.get("extra_body") or {})},
    }
    if system:
        kwargs["system"] = system
    if a_tools:
        kwargs["tools"] = a_tools
    return kwargs, max_tokens


def send_messages(sdk: Any, kwargs: dict[str, Any], headers: dict[str, str], stream: bool) -> Reply:
    """One attempt: the request through the SDK (a raw POST when streaming) and its reply parsed."""
    if stream:
        body = {k: v for k, v in kwargs.items() if k not in ("extra_headers", "extra_body")}
        body.update(kwargs["extra_body"], stream=True)
        text = sdk.post("/v1/messages", body=body, cast_to=str, options={"headers": headers})
        choices, usage, model = parse_messages_stream(text)
        return choices, model, usage
    data = parse_json(sdk.messages.with_raw_response.create(**kwargs))
    return (*messages_reply(data), normalise_usage(data.get("usage"), True))
