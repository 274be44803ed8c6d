"""The OpenAI chat-completions protocol: the request body, the plain reply and the SSE stream."""

from __future__ import annotations

from typing import Any

from elo_per_token.egress.errors import Incomplete, Malformed
from elo_per_token.egress.profiles import Profile
from elo_per_token.egress.proto_common import (
    Choice,
    Reply,
    index_field,
    label,
    list_field,
    normalise_usage,
    obj_field,
    parse_json_text,
    sse_events,
    text_field,
    text_or_none,
)


def _openai_call(tc: Any) -> dict[str, Any]:
    tc = obj_field(tc, "a tool call")
    fn = obj_field(tc.get("function"), "a tool call's function")
    name = text_field(fn.get("name"), "a tool call's name")
    if not name:
        raise Malformed("a tool call has no function name")
    return {
        "id": text_field(tc.get("id"), "a tool call's id") or "",
        "name": name,
        "arguments": text_field(fn.get("arguments"), "a tool call's arguments") or "{}",
    }


def _openai_choices(data: dict[str, Any]) -> list[Choice]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise Malformed("no choices in the response")
    out: dict[int, Choice] = {}
    for c in choices:
        msg = obj_field(c, "a choice").get("message")
        if not isinstance(msg, dict):
            raise Malformed("a choice has no message")
        out[index_field(c.get("index"), "a choice's index")] = Choice(
            text=text_field(msg.get("content"), "content"),
            finish_reason=label(c.get("finish_reason"), "finish_reason"),
            tool_calls=[_openai_call(tc) for tc in list_field(msg.get("tool_calls"), "tool_calls")],
            reasoning=text_or_none(msg.get("reasoning_content") or msg.get("reasoning")),
        )
    return [out[i] for i in sorted(out)]


def _chat_delta(
    ch: Any,
    texts: dict[int, list[str]],
    finish: dict[int, str | None],
    calls: dict[int, dict[int, dict[str, Any]]],
    thinks: dict[int, list[str]],
) -> None:
    """One streamed choice delta folded into the per-choice texts, finish reasons, tool calls and reasoning."""
    ch = obj_field(ch, "a streamed choice")
    i = index_field(ch.get("index"), "a streamed choice's index")
    delta = obj_field(ch.get("delta"), "a delta")
    texts.setdefault(i, [])
    content = text_field(delta.get("content"), "a delta's content")
    if content:
        texts[i].append(content)
    # Reasoning deltas (DeepSeek, vLLM: reasoning_content; OpenRouter: reasoning): text only, anything else dropped.
    thought = text_or_none(delta.get("reasoning_content")) or text_or_none(delta.get("reasoning"))
    if thought:
        thinks.setdefault(i, []).append(thought)
    for tc in list_field(delta.get("tool_calls"), "a delta's tool_calls"):
        tc = obj_field(tc, "a streamed tool call")
        slot = calls.setdefault(i, {}).setdefault(
            index_field(tc.get("index"), "a tool call's index"), {"id": "", "name": "", "arguments": ""}
        )
        fn = obj_field(tc.get("function"), "a tool call's function")
        slot["id"] = text_field(tc.get("id"), "a tool call's id") or slot["id"]
        slot["name"] = text_field(fn.get("name"), "a tool call's name") or slot["name"]
        slot["arguments"] += text_field(fn.get("arguments"), "a tool call's arguments") or ""
    reason = label(ch.get("finish_reason"), "finish_reason")
    if reason:
        finish[i] = reason


def parse_chat_stream(text: str) -> tuple[list[Choice], dict[str, Any] | None, str | None]:
    """chat.completion.chunk events -> choices, usage (from the chunk that carries it, as sent) and model.
    Every field is type-checked as it is read: a wrong type is a malformed (retried) response."""
    texts: dict[int, list[str]] = {}
    finish: dict[int, str | None] = {}
    calls: dict[int, dict[int, dict[str, Any]]] = {}
    thinks: dict[int, list[str]] = {}
    usage, model = None, None
    try:
        for _, ev in sse_events(text):
            if not isinstance(ev, dict):
                raise Malformed("an SSE event is not a JSON object")
            if isinstance(ev.get("usage"), dict):
                usage = ev["usage"]
            model = label(ev.get("model"), "model") or model
            for ch in list_field(ev.get("choices"), "choices"):
                _chat_delta(ch, texts, finish, calls, thinks)
        if not texts:
            raise Malformed("the stream carried no choices")
        if unfinished := sorted(i for i in texts if not finish.get(i)):
            raise Incomplete(
                f"the stream ended ([DONE]) with no finish_reason for choice(s) {unfinished[:8]}: the server "
                "cut the generation short (an interrupted reply, not an answer)"
            )
    except Malformed as e:
        e.usage = normalise_usage(usage, False)  # billed all the same: recorded with the discarded call
        raise
    choices = [
        Choice(
            text="".join(texts[i]) or None,
            finish_reason=finish.get(i),
            tool_calls=[
                {**c, "arguments": c["arguments"] or "{}"} for _, c in sorted(calls.get(i, {}).items())
            ],
            reasoning="".join(thinks.get(i, [])) or None,
        )
        for i in sorted(texts)
    ]
    if any(not c["name"] for ch in choices for c in ch.tool_calls):
        raise Malformed("a streamed tool call has no function name")
    return choices, normalise_usage(usage, False), model


def chat_reply(data: dict[str, Any]) -> tuple[list[Choice], str | None]:
    """The choices and the model name of a plain (not streamed) 2xx body, every field type-checked."""
    try:
        return _openai_choices(data), label(data.get("model"), "model")
    except Malformed as e:
        e.usage = normalise_usage(data.get("usage"), False)  # the response was billed all the same
        raise


def chat_body(
    profile: Profile,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    temperature: float,
    n: int,
    seed: int | None,
    max_tokens: int | None,
    gen: dict[str, Any],
) -> dict[str, Any]:
    """The chat-completions request body: the generation settings under this protocol's field names."""
    body: dict[str, Any] = {"model": profile.model, "messages": messages, "temperature": temperature}
    if n > 1:
        body["n"] = n
    if seed is not None:
        body["seed"] = seed
    if tools:
        body["tools"] = tools
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    for k in ("top_p", "stop", "reasoning_effort"):
        if gen.get(k) is not None:
            body[k] = gen[k]
    if gen.get("thinking_budget"):  # OpenAI-compatible gateways (LiteLLM) pass this to Anthropic models
        body["thinking"] = {"type": "enabled", "budget_tokens": gen["thinking_budget"]}
    body.update(gen.get("extra_body") or {})
    if profile.stream:  # usage arrives in a last chunk only when asked for
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def send_chat(sdk: Any, body: dict[str, Any], headers: dict[str, str], stream: bool) -> Reply:
    """One attempt: POST the body through the SDK's raw route and parse the reply (JSON or SSE)."""
    # The SDK's documented raw route (`client.post(path, body=…, cast_to=…)`): same auth, timeouts
    # and error classes as `chat.completions.create`, without re-walking our plain-dict params through
    # its TypedDict transform and pydantic models — 40% of the client CPU per call, measured.
    text = sdk.post("/chat/completions", body=body, options={"headers": headers}, cast_to=str)
    if stream:
        choices, usage, model = parse_chat_stream(text)
        return choices, model, usage
    data = parse_json_text(text)
    return (*chat_reply(data), normalise_usage(data.get("usage"), False))
