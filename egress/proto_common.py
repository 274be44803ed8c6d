"""What both protocol adapters read with: the reply's Choice, and field-checked JSON and SSE parsing.

Every field is type-checked as it is read: a wrong type is a Malformed (retried, billed) response, never a
value that would reach the ledger.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from elo_per_token.egress.errors import Malformed


@dataclass
class Choice:
    text: str | None
    finish_reason: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # [{"id", "name", "arguments" (JSON str)}]
    reasoning: str | None = None  # reasoning text when the provider returns it (transcripts only; untrusted)


def parse_json(raw: Any) -> dict[str, Any]:
    return parse_json_text(raw.http_response.text)


def loads(text: str, what: str) -> Any:
    """json.loads with every way hostile JSON fails mapped to a malformed response: bad syntax, a number past
    Python's 4,300-digit int limit (ValueError), nesting past the recursion limit (RecursionError)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise Malformed(f"{what} is not valid JSON ({e.msg})") from None
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise Malformed(f"{what} is not usable JSON ({type(e).__name__}: {str(e)[:120]})") from None


def parse_json_text(text: str) -> dict[str, Any]:
    data = loads(text, "the body")
    if not isinstance(data, dict):
        raise Malformed("body is not a JSON object")
    return data


def normalise_usage(u: Any, anthropic: bool) -> dict[str, Any] | None:
    if not isinstance(u, dict):
        return None
    if not anthropic:
        return dict(u)
    names = {"input_tokens": "prompt_tokens", "output_tokens": "completion_tokens"}
    usage: dict[str, Any] = u
    return {names.get(k, k): v for k, v in usage.items() if v is not None}


MAX_LABEL = 200  # characters kept of a provider's `model` or `finish_reason` (labels, not content)


def text_field(v: Any, what: str) -> str | None:
    """A content field: a string or absent; anything else (42, NaN, a list) is a malformed response."""
    if v is None or isinstance(v, str):
        return v
    raise Malformed(f"{what} is {type(v).__name__}, not a string")


def label(v: Any, what: str) -> str | None:
    """`model` / `finish_reason`: a string (cut to MAX_LABEL) or absent. NaN, Infinity and numbers are
    malformed: stored, they would make the write-once ledger unreadable."""
    t = text_field(v, what)
    return t[:MAX_LABEL] if t else None


def index_field(v: Any, what: str) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 16:
        raise Malformed(f"{what} is {str(v)[:40]!r}, not a small non-negative integer")
    return v


def obj_field(v: Any, what: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise Malformed(f"{what} is {type(v).__name__}, not an object")
    return v


def list_field(v: Any, what: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise Malformed(f"{what} is {type(v).__name__}, not a list")
    return v


def text_or_none(x: Any) -> str | None:
    """A reasoning field as text: servers send a string (DeepSeek, vLLM, OpenRouter); anything else is dropped."""
    return x if isinstance(x, str) and x else None


def sse_events(text: str) -> list[tuple[str | None, Any]]:
    """(event name, parsed data) for each event of an SSE body; `[DONE]` ends it."""
    out: list[tuple[str | None, Any]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if not data:
            continue
        payload = "\n".join(data)
        if payload == "[DONE]":
            break
        out.append((name, loads(payload, "an SSE event")))
    return out


# What one attempt of a chat call returns, whatever the protocol: the choices, the model name and the usage as sent.
Reply = tuple[list[Choice], str | None, dict[str, Any] | None]
