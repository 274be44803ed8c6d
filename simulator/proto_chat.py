"""OpenAI chat completions on the wire: the `chat.completion` body and its `chat.completion.chunk` stream."""

from __future__ import annotations

import json
import time
from typing import Any

from elo_per_token.contracts.jobs import derive_seed
from elo_per_token.simulator.generic import BrainReply
from elo_per_token.simulator.sse import Event, pieces

OWNER = "ept-simulator"


def chat_body(
    rid: str,
    model: str,
    replies: list[BrainReply],
    p_tok: int,
    c_toks: list[int],
    with_usage: bool,
    seed: int,
    cached: int = 0,
) -> dict[str, Any]:
    """A chat.completion with one choice per reply; tool call ids derive from (seed, choice, call)."""
    choices = []
    for i, r in enumerate(replies):
        msg: dict[str, Any] = {"role": "assistant", "content": r.text}
        if r.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": f"call_{derive_seed(seed, i, j):08x}",
                    "type": "function",
                    "function": {"name": tc["name"], "arguments": json.dumps(tc.get("arguments", {}))},
                }
                for j, tc in enumerate(r.tool_calls)
            ]
        finish = "tool_calls" if r.tool_calls else r.finish_reason
        choices.append({"index": i, "message": msg, "finish_reason": finish, "logprobs": None})
    body: dict[str, Any] = {
        "id": f"chatcmpl-sim-{rid}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": OWNER,
        "choices": choices,
    }
    if with_usage:
        body["usage"] = {
            "prompt_tokens": p_tok,
            "completion_tokens": sum(c_toks),
            "total_tokens": p_tok + sum(c_toks),
            "prompt_tokens_details": {"cached_tokens": min(cached, p_tok), "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": sum(r.reasoning_tokens for r in replies),
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
    return body


def sse_chat(body: dict[str, Any], include_usage: bool) -> list[Event]:
    """chat.completion.chunk events: role, content deltas and finish_reason per choice; usage only in a last
    chunk with no choices, and only with stream_options.include_usage (as OpenAI does)."""
    base = {k: body[k] for k in ("id", "created", "model", "system_fingerprint")} | {
        "object": "chat.completion.chunk"
    }
    ev: list[Event] = []
    for ch in body.get("choices", []):  # a hostile "no_choices" reply streams none
        i, msg = ch["index"], ch["message"]
        ev.append(
            (
                None,
                {
                    **base,
                    "choices": [
                        {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                    ],
                },
            )
        )
        for piece in pieces(msg.get("content")):
            ev.append(
                (
                    None,
                    {**base, "choices": [{"index": i, "delta": {"content": piece}, "finish_reason": None}]},
                )
            )
        if msg.get("tool_calls"):
            calls = [{"index": j, **tc} for j, tc in enumerate(msg["tool_calls"])]
            ev.append(
                (
                    None,
                    {
                        **base,
                        "choices": [{"index": i, "delta": {"tool_calls": calls}, "finish_reason": None}],
                    },
                )
            )
        ev.append(
            (None, {**base, "choices": [{"index": i, "delta": {}, "finish_reason": ch["finish_reason"]}]})
        )
    if include_usage and body.get("usage") is not None:
        ev.append((None, {**base, "choices": [], "usage": body["usage"]}))
    ev.append((None, "[DONE]"))
    return ev
