"""Generation settings: what a request asks the model for beyond the messages (limits, sampling, thinking).

Set at three levels, the narrower winning: profile (profiles.toml) < plan (`[generation]`) < arm (keys
on the `[[arms]]` table). Only arm-level settings name the arm (`majority@4[effort=low]`): plan- and
profile-level settings are the same for every arm, so they are recorded per call, not in the label.

    max_tokens        int >= 1        completion limit (Anthropic: max_tokens; thinking counts inside it)
    temperature       float >= 0      temperature of the calls that SAMPLE (strategy default 0.7);
                                      greedy and verifier calls stay at 0
    top_p             float in (0, 1]
    stop              list of strings stop sequences (Anthropic: stop_sequences)
    seed              int >= 0        base of the per-call seeds instead of the plan's `seed`
    reasoning_effort  minimal | low | medium | high | none   (OpenAI-style `reasoning_effort`)
    thinking_budget   int >= 1        Anthropic `thinking.budget_tokens` (also sent as `thinking` to
                                      OpenAI-compatible gateways such as LiteLLM)
    extra_body        table           merged into the request body last (e.g. chat_template_kwargs)

The protocol adapters (egress.proto_chat, egress.proto_messages) turn these into each protocol's fields; this module only
validates, merges and labels them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from elo_per_token.contracts.errors import InputError

EFFORTS = ("none", "minimal", "low", "medium", "high")
FIELDS = (
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "reasoning_effort",
    "thinking_budget",
    "extra_body",
)
# Arm-level keys that may list several values: each value is its own arm (an arm dimension, like budgets).
DIMENSIONS = ("reasoning_effort", "thinking_budget")


def check(raw: dict[str, Any], err: Callable[[str, str], InputError]) -> dict[str, Any]:
    """Validated copy of generation settings.

    Args:
        raw: the generation table as read (setting -> value).
        err: err(message, key) builds the InputError naming file/line/field.
    """
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if k not in FIELDS:
            raise err(f"unknown generation setting (known: {', '.join(FIELDS)})", k)
        out[k] = _check_one(k, v, err)
    return out


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _check_one(k: str, v: Any, err: Callable[[str, str], InputError]) -> Any:
    if k in ("max_tokens", "thinking_budget"):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise err(f"must be an integer >= 1, got {v!r}", k)
        return v
    if k == "seed":
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise err(f"must be an integer >= 0, got {v!r}", k)
        return v
    if k == "temperature":
        if not _is_num(v) or not 0 <= v <= 2:
            raise err(f"must be a number in 0..2, got {v!r}", k)
        return float(v)
    if k == "top_p":
        if not _is_num(v) or not 0 < v <= 1:
            raise err(f"must be a number in (0, 1], got {v!r}", k)
        return float(v)
    if k == "stop":
        stops = [v] if isinstance(v, str) else v
        if not isinstance(stops, list) or not stops or not all(isinstance(s, str) and s for s in stops):
            raise err("must be a string or a non-empty list of non-empty strings", k)
        return list(stops)
    if k == "reasoning_effort":
        if v not in EFFORTS:
            raise err(f"must be one of {', '.join(EFFORTS)}, got {v!r}", k)
        return v
    if k == "extra_body":
        if not isinstance(v, dict):
            raise err("must be a table (merged into the request body)", k)
        return v
    raise AssertionError(k)


def merge(*levels: dict[str, Any] | None) -> dict[str, Any]:
    """Later levels win key by key (extra_body tables merge, inner keys of later levels winning).

    Args:
        *levels: generation tables from the most general to the most specific; None is skipped.
    """
    out: dict[str, Any] = {}
    for lv in levels:
        for k, v in (lv or {}).items():
            out[k] = {**out.get(k, {}), **v} if k == "extra_body" and isinstance(out.get(k), dict) else v
    return out


def _tokens_label(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else (f"{n // 1000}k" if n % 1000 == 0 else str(n))


def _flat(prefix: str, d: dict[str, Any]) -> list[str]:
    out = []
    for k in sorted(d):
        v = d[k]
        key = f"{prefix}.{k}" if prefix else str(k)
        out += (
            _flat(key, v)
            if isinstance(v, dict)
            else [f"{key}={json.dumps(v) if not isinstance(v, str) else v}"]
        )
    return out


def label(gen: dict[str, Any]) -> str:
    """Short, stable label of arm-level settings: effort=low, thinking=8k, max_tokens=512, … ('' when none).

    Args:
        gen: checked generation settings (see check).
    """
    parts = []
    for k in FIELDS:
        if k not in gen:
            continue
        v = gen[k]
        if k == "reasoning_effort":
            parts.append(f"effort={v}")
        elif k == "thinking_budget":
            parts.append(f"thinking={_tokens_label(v)}")
        elif k == "stop":
            parts.append("stop=" + hashlib.sha256(json.dumps(v).encode()).hexdigest()[:6])
        elif k == "extra_body":
            parts += _flat("", v)
        else:
            parts.append(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}")
    return ",".join(parts)
