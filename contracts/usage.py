"""Provider `usage` is checked before it is stored: the ledger is write-once, so a negative, NaN, fractional or
absurd count stored once would poison a run's token figures forever (or make `ept analyze` reject it).

A call whose usage fails the check is recorded with `usage: null`, `usage_missing: true` and
`usage_invalid: "<reason>"`: counted like a call without usage (its arm's token figures become lower bounds),
never summed.
"""

from __future__ import annotations

import json
from typing import Any

# Per call and per field. The largest context windows are ~2M tokens and n=128 choices at 64k tokens is ~8M:
# anything above this is a provider bug, not a bill.
MAX_CALL_TOKENS = 10_000_000
_REQUIRED = ("prompt_tokens", "completion_tokens")
_MAX_EXTRA_BYTES = 4096  # other usage fields (e.g. *_tokens_details) are kept if small and strict JSON


def _bad_count(v: Any) -> str | None:
    if isinstance(v, bool) or not isinstance(v, int):
        return f"not an integer ({str(v)[:40]!r})"
    if v < 0:
        return f"negative ({v})"
    if v > MAX_CALL_TOKENS:
        return f"absurd ({v} > {MAX_CALL_TOKENS})"
    return None


# What to tell a user whose calls came back without usage (every call, so no token is measured): said by the sweep's summary and by
# the analysis, which cannot place an arm without measured tokens.
USAGE_MISSING_HINT = (
    "the provider returned no `usage` on any call, so tokens cannot be measured. Ask for it: set "
    "`stream = false` in the profile (most servers send usage only on plain responses), or turn on the "
    "provider's usage option for streams (OpenAI-compatible: stream_options.include_usage, which ept sends when "
    "`stream = true`; llama.cpp and vLLM need a recent version). Note that LiteLLM fills in its own estimate for "
    "streamed usage (13 vs 37 prompt tokens measured against llama.cpp): prefer stream = false behind LiteLLM"
)


def check_usage(u: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None]:
    """(usage to store, None) when `u` is valid or absent; (None, reason) when it must not be stored.

    Args:
        u: A reply's usage (None: the reply had none).
    """
    if u is None:
        return None, None
    if not isinstance(u, dict):
        return None, f"usage is not an object ({type(u).__name__})"
    for name in _REQUIRED:
        if name not in u:
            return None, f"{name} missing"
        bad = _bad_count(u[name])
        if bad:
            return None, f"{name} {bad}"
    if u.get("total_tokens") is not None and _bad_count(u["total_tokens"]):
        return None, f"total_tokens {_bad_count(u['total_tokens'])}"
    out: dict[str, Any] = {}
    for k, v in u.items():
        try:
            # allow_nan=False: a NaN or Infinity anywhere would write a line that is not JSON.
            if len(json.dumps(v, allow_nan=False)) <= _MAX_EXTRA_BYTES:
                out[str(k)] = v
        except (TypeError, ValueError):
            continue
    return out, None
