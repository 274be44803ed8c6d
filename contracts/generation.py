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
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from elo_per_token.contracts.errors import InputError

if TYPE_CHECKING:  # the bounds in the annotations, resolved by common.checked when settings are checked
    from annotated_types import Ge, Gt, Interval, Le, MinLen

Effort = Literal["none", "minimal", "low", "medium", "high"]
EFFORTS: tuple[str, ...] = get_args(Effort)


@dataclass(frozen=True)
class Generation:
    """The generation settings, declared once: each field's type and bounds are its check (common.checked),
    `metadata["must"]` the rule in the words an error shows. A table sets any of them and none is required: a
    setting left out is absent, never a default (`check` models only the keys given). The order is the label's."""

    max_tokens: Annotated[int, Ge(1)] = field(metadata={"must": "an integer >= 1"})
    temperature: Annotated[float, Interval(ge=0, le=2)] = field(metadata={"must": "a number in 0..2"})
    top_p: Annotated[float, Gt(0), Le(1)] = field(metadata={"must": "a number in (0, 1]"})
    stop: Annotated[str, MinLen(1)] | Annotated[list[Annotated[str, MinLen(1)]], MinLen(1)] = field(
        metadata={"must": "a string or a non-empty list of non-empty strings"}
    )
    seed: Annotated[int, Ge(0)] = field(metadata={"must": "an integer >= 0"})
    reasoning_effort: Effort = field(metadata={"must": f"one of {', '.join(EFFORTS)}"})
    thinking_budget: Annotated[int, Ge(1)] = field(metadata={"must": "an integer >= 1"})
    extra_body: dict[str, Any] = field(metadata={"must": "a table (merged into the request body)"})


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Generation))
# Arm-level keys that may list several values: each value is its own arm (an arm dimension, like budgets).
DIMENSIONS = ("reasoning_effort", "thinking_budget")


def check(raw: dict[str, Any], err: Callable[[str, str], InputError]) -> dict[str, Any]:
    """Validated copy of generation settings (the keys given, in their order), checked by `Generation`.

    Args:
        raw: the generation table as read (setting -> value).
        err: err(message, key) builds the InputError naming file/line/field.
    """
    from elo_per_token.common.checked import ModelError, checked_fields  # pydantic: when settings are read

    try:
        values = checked_fields(Generation, raw, frozenset(FIELDS) - set(raw))
    except ModelError as e:
        if e.kind == "extra_forbidden":
            raise err(f"unknown generation setting (known: {', '.join(FIELDS)})", e.field) from None
        raise err(e.message, e.field) from None
    # A single stop string is a list of one; the model already made temperature and top_p floats.
    return {k: [values[k]] if k == "stop" and isinstance(values[k], str) else values[k] for k in raw}


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
