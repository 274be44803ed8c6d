"""The simulated prompt cache: how many prompt tokens a request reads from the cache, and how many it adds.

Two models (config `prompt_cache`): `true` or "seen" remembers the message prefixes this simulator has seen (a hash
per prefix); "warm" assumes a long sweep already warmed the cache for everything before the newest message.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from elo_per_token.simulator.generic import prompt_tokens

CACHE_MIN_TOKENS = 16
# Prefix hashes kept before the cache is emptied: bounds the simulator's memory on a long run.
CACHE_CAP = 200_000


def cached_prefix(seen: set[bytes], messages: list[dict[str, Any]], tools: Any) -> tuple[int, int]:
    """(tokens of the longest message prefix an earlier request already sent, tokens of the prefix this request
    adds to the cache); prefixes shorter than CACHE_MIN_TOKENS are never cached. Adds this request's prefix
    hashes to `seen`."""
    h = hashlib.sha256(json.dumps(tools or [], sort_keys=True).encode())
    cached = prefix = 0
    if len(seen) > CACHE_CAP:
        seen.clear()
    for i, m in enumerate(messages):
        h.update(json.dumps(m, sort_keys=True, default=str).encode())
        key = h.digest()
        toks = prompt_tokens(messages[: i + 1], tools)
        if toks < CACHE_MIN_TOKENS:
            continue
        if key in seen:
            cached = toks
        else:
            seen.add(key)
        prefix = toks
    return cached, prefix


def warm_prefix(messages: list[dict[str, Any]], tools: Any) -> tuple[int, int]:
    """(cached, prefix) for a cache a long sweep has already warmed: everything before the newest message was
    sent before (the shared system prompt, earlier turns of an episode); this request adds the rest. Depends on
    the request only, so the same run reports the same usage at any concurrency."""
    whole = prompt_tokens(messages, tools)
    before = prompt_tokens(messages[:-1], tools) if len(messages) > 1 else 0
    return (before if before >= CACHE_MIN_TOKENS else 0), (whole if whole >= CACHE_MIN_TOKENS else 0)
