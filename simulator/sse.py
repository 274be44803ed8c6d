"""Server-sent events shared by every streaming route: the event list as one response body, text in pieces."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

# An SSE event: (the `event:` name, None where the protocol names none; its data, JSON or a literal string).
Event = tuple[str | None, Any]


def sse_response(events: list[Event]) -> web.Response:
    """A complete SSE body (`event:` lines where the protocol names events; `data: [DONE]` for chat)."""
    parts = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        parts.append(head + "data: " + (data if isinstance(data, str) else json.dumps(data)) + "\n\n")
    return web.Response(
        text="".join(parts), content_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


def pieces(text: str | None, size: int = 24) -> list[str]:
    """The text cut into deltas of `size` characters (none for empty or missing text)."""
    return [text[i : i + size] for i in range(0, len(text), size)] if text else []
