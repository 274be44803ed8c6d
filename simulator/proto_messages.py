"""Anthropic messages on the wire: the request converted for the brain, the `message` body and its event stream."""

from __future__ import annotations

import json
from typing import Any

from elo_per_token.simulator.generic import BrainReply
from elo_per_token.simulator.sse import Event, pieces


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list (anything else in a client's body counts as absent)."""
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


def _texts(blocks: Any) -> str:
    """The text of a list of blocks, one line each (blocks without string text give empty lines)."""
    return "\n".join(t if isinstance(t := b.get("text", ""), str) else "" for b in _dicts(blocks))


def anthropic_to_openai(
    body: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, str]:
    """Anthropic messages/tools -> OpenAI-style messages/tools for the brain; also the system text. Parts of a
    hostile body of the wrong type (a number for a list, a string for a block) count as absent."""
    system = body.get("system") or ""
    system = _texts(system) if isinstance(system, list) else system if isinstance(system, str) else ""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in _dicts(body.get("messages")):
        content = m.get("content")
        if isinstance(content, str):
            msgs.append({"role": m.get("role"), "content": content})
            continue
        texts, calls = [], []
        for b in _dicts(content):
            t = b.get("type")
            if t == "text":
                texts.append(text if isinstance(text := b.get("text", ""), str) else "")
            elif t == "tool_use":
                calls.append(
                    {
                        "id": b.get("id"),
                        "type": "function",
                        "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input", {}))},
                    }
                )
            elif t == "tool_result":
                c = b.get("content")
                msgs.append(
                    {
                        "role": "tool",
                        "tool_call_id": b.get("tool_use_id"),
                        "content": c if isinstance(c, str) else _texts(c),
                    }
                )
        if texts or calls:
            msg: dict[str, Any] = {"role": m.get("role"), "content": "\n".join(texts) if texts else None}
            if calls:
                msg["tool_calls"] = calls
            msgs.append(msg)
    tools = [
        {
            "type": "function",
            "function": {
                "name": t.get("name"),
                "description": t.get("description", ""),
                "parameters": t.get("input_schema", {}),
            },
        }
        for t in _dicts(body.get("tools"))
    ] or None
    return msgs, tools, system


_STOP_REASON = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def anthropic_body(
    rid: str,
    model: str,
    r: BrainReply,
    p_tok: int,
    c_tok: int,
    with_usage: bool,
    cached: int = 0,
    prefix: int = 0,
) -> dict[str, Any]:
    """A `message` for one reply: a summarised thinking block when it reasoned, its text and tool_use blocks;
    usage splits the prompt into uncached input, cache reads and cache writes."""
    content: list[dict[str, Any]] = []
    if (
        r.reasoning_tokens
    ):  # a summarised thinking block, as Claude 4 returns; output_tokens counts the full thinking
        content.append(
            {"type": "thinking", "thinking": "(simulated thinking, summarised)", "signature": "sim"}
        )
    content += [{"type": "text", "text": r.text}] if r.text else []
    content += [
        {"type": "tool_use", "id": f"toolu_{rid}_{j}", "name": tc["name"], "input": tc.get("arguments", {})}
        for j, tc in enumerate(r.tool_calls or [])
    ]
    finish = "tool_calls" if r.tool_calls else r.finish_reason
    body: dict[str, Any] = {
        "id": f"msg_sim_{rid}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP_REASON.get(finish, "end_turn"),
        "stop_sequence": None,
    }
    if with_usage:
        # input_tokens excludes cache reads and writes (Anthropic's accounting): the three add up to the prompt.
        read = min(cached, p_tok)
        created = 0 if read else min(prefix, p_tok)
        body["usage"] = {
            "input_tokens": p_tok - read - created,
            "output_tokens": c_tok,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": created,
        }
    return body


def sse_messages(body: dict[str, Any]) -> list[Event]:
    """Anthropic message events: input usage in message_start, output_tokens in message_delta."""
    usage = body.get("usage") or {}
    start = {
        **body,
        "content": [],
        "stop_reason": None,
        "usage": {**usage, "output_tokens": 1} if usage else None,
    }
    ev: list[Event] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(body.get("content", [])):
        if block["type"] == "text":
            ev.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            for piece in pieces(block["text"]):
                ev.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                )
        else:
            ev.append(
                ("content_block_start", {"type": "content_block_start", "index": i, "content_block": block})
            )
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta_usage = {"output_tokens": usage.get("output_tokens", 0)} if usage else None
    ev.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
                "usage": delta_usage,
            },
        )
    )
    ev.append(("message_stop", {"type": "message_stop"}))
    return ev
