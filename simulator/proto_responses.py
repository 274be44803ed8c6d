"""The OpenAI Responses API on the wire: `input`/`instructions` as chat messages, the `response` body, its events."""

from __future__ import annotations

import time
from typing import Any

from elo_per_token.simulator.generic import BrainReply
from elo_per_token.simulator.sse import Event, pieces


def responses_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Responses `instructions` + `input` -> chat messages (text parts only)."""
    msgs: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        msgs.append({"role": "system", "content": body["instructions"]})
    inp = body.get("input")
    if isinstance(inp, str):
        return [*msgs, {"role": "user", "content": inp}]
    for item in inp if isinstance(inp, list) else []:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            continue
        c = item.get("content")
        text = (
            c
            if isinstance(c, str)
            else "\n".join(str(p.get("text", "")) for p in c if isinstance(p, dict) and "text" in p)
            if isinstance(c, list)
            else ""
        )
        role = item.get("role") if item.get("role") in ("user", "assistant", "system") else "user"
        msgs.append({"role": "system" if role == "developer" else role, "content": text})
    return msgs


def responses_body(
    rid: str, model: str, r: BrainReply, p_tok: int, c_tok: int, with_usage: bool, cached: int
) -> dict[str, Any]:
    """A `response` with one output_text message; status "incomplete" when max_output_tokens cut it."""
    cut = r.finish_reason == "length"
    body: dict[str, Any] = {
        "id": f"resp_sim_{rid}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "model": model,
        "output": [
            {
                "type": "message",
                "id": f"msg_sim_{rid}",
                "status": "incomplete" if cut else "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": r.text or "", "annotations": []}],
            }
        ],
        "usage": None,
    }
    if with_usage:
        body["usage"] = {
            "input_tokens": p_tok,
            "input_tokens_details": {"cached_tokens": min(cached, p_tok)},
            "output_tokens": c_tok,
            "output_tokens_details": {"reasoning_tokens": r.reasoning_tokens},
            "total_tokens": p_tok + c_tok,
        }
    return body


def sse_responses(body: dict[str, Any]) -> list[Event]:
    """Responses API events, usage in response.completed (response.incomplete when cut by max_output_tokens)."""
    item = body["output"][0]
    text = item["content"][0]["text"]
    seq = iter(range(10**6))
    pending = {**body, "status": "in_progress", "output": [], "usage": None}
    ev: list[Event] = [
        ("response.created", {"type": "response.created", "sequence_number": next(seq), "response": pending}),
        ("response.in_progress", {"type": "response.in_progress", "sequence_number": next(seq), "response": pending}),
        ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": next(seq),
                                        "output_index": 0, "item": {**item, "status": "in_progress", "content": []}}),
        ("response.content_part.added", {"type": "response.content_part.added", "sequence_number": next(seq),
                                         "item_id": item["id"], "output_index": 0, "content_index": 0,
                                         "part": {"type": "output_text", "text": "", "annotations": []}}),
    ]  # fmt: skip
    for piece in pieces(text):
        ev.append(("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": next(seq),
                                                  "item_id": item["id"], "output_index": 0, "content_index": 0,
                                                  "delta": piece, "logprobs": []}))  # fmt: skip
    ev += [
        ("response.output_text.done", {"type": "response.output_text.done", "sequence_number": next(seq),
                                       "item_id": item["id"], "output_index": 0, "content_index": 0, "text": text,
                                       "logprobs": []}),
        ("response.content_part.done", {"type": "response.content_part.done", "sequence_number": next(seq),
                                        "item_id": item["id"], "output_index": 0, "content_index": 0,
                                        "part": item["content"][0]}),
        ("response.output_item.done", {"type": "response.output_item.done", "sequence_number": next(seq),
                                       "output_index": 0, "item": item}),
    ]  # fmt: skip
    final = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
    ev.append((final, {"type": final, "sequence_number": next(seq), "response": body}))
    return ev
