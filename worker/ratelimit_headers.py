"""Reading OpenAI-style `x-ratelimit-*` headers, and the constants both headroom keepers (worker.ratelimit's
in-process Headroom and worker.headroom_redis's shared one) use: one truth for both, and no import cycle."""

from __future__ import annotations

import re
from typing import Any

STALE_S = 1.0  # a statement (or probe) this old no longer holds senders back waiting for replies
RECENT_S = 0.25  # a request admitted this recently may not have reached the provider when it answered
TOKEN_SLACK = 1.25  # an estimate is short of the real count at times (tokenizers differ)
MAX_RESET_S = 60.0  # a reset-* further off is not waited for beyond this (the bucket probes then)

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_reset(v: Any) -> float | None:
    """An `x-ratelimit-reset-*` value in seconds: OpenAI's "1s", "6m0s", "20ms", or plain seconds."""
    if not isinstance(v, str) or len(v) > 40:
        return None
    v = v.strip()
    try:
        return max(0.0, float(v))
    except ValueError:
        pass
    parts = _DURATION.findall(v)
    if not parts or "".join(n + u for n, u in parts) != v:
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def header_int(v: Any) -> int | None:
    """A non-negative integer header value, or None (absent, malformed or absurdly long)."""
    try:
        n = int(str(v).strip()) if v is not None and len(str(v)) < 20 else None
    except ValueError:
        return None
    return n if n is not None and n >= 0 else None
