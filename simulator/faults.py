"""The faults the simulator injects, as tables: which fault a request draws, and what each one does.

A fault comes from the config's `script` (consumed one per completion request) or else from the rates,
drawn deterministically from (seed, request number). Where each fault acts:
- before the brain runs, an error instead of an answer: FAULT_ERRORS (429, 500, 403, quota, 400, proxy_400);
- before the brain runs, a changed response: fault_response (hang, malformed_json, context_length without
  a configured window);
- in the answer: context_length with a window, fewer_choices (completion.py), missing_usage (no usage) and
  the hostile-usage faults of HOSTILE_USAGE / no_choices (hostile_usage).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from typing import Any

from aiohttp import web

from elo_per_token.contracts.jobs import derive_seed
from elo_per_token.simulator.config import SimConfig
from elo_per_token.simulator.proto_errors import context_error, error_response
from elo_per_token.simulator.sse import Event
from elo_per_token.simulator.state import SimState


def fault_rates(cfg: SimConfig) -> tuple[tuple[str, float], ...]:
    """The faults that have a rate, in the order the draw tries them (the order fixes which fault a draw
    gives, so it is part of the simulator's determinism)."""
    return (
        ("429", cfg.rate_429),
        ("500", cfg.rate_500),
        ("hang", cfg.rate_hang),
        ("malformed_json", cfg.rate_malformed_json),
        ("missing_usage", cfg.rate_missing_usage),
        ("fewer_choices", cfg.rate_fewer_choices),
    )


def pick_fault(script: list[str], cfg: SimConfig, k: int) -> str:
    """The fault for completion request number k: the script first (consumed), then the rates
    (deterministic in seed, k)."""
    if script:
        return script.pop(0)
    u = random.Random(derive_seed(cfg.seed, "fault", k)).random()
    for name, rate in fault_rates(cfg):
        if u < rate:
            return name
        u -= rate
    return "ok"


# Faults answered with an error before the brain runs: fault -> (status, message, error type for OpenAI,
# for Anthropic, code).
FAULT_ERRORS: dict[str, tuple[int, str, str, str, str | None]] = {
    "429": (429, "Rate limit reached (simulated).", "requests", "rate_limit_error", "rate_limit_exceeded"),
    "500": (500, "The server had an error while processing your request (simulated).", "server_error",
            "api_error", None),
    "403": (403, "Your key is not allowed to use this model (simulated).", "permission_error", "permission_error",
            "forbidden"),
    "quota": (429, "You exceeded your current quota (simulated).", "insufficient_quota", "insufficient_quota",
              "insufficient_quota"),
    "400": (400, "Invalid request (simulated).", "invalid_request_error", "invalid_request_error", None),
    # LiteLLM's answer to a key it cannot check (its key store is down or absent)
    "proxy_400": (400, "Authentication Error, No connected db.", "auth_error", "auth_error", "400"),
}  # fmt: skip

# What a malformed_json fault sends: a 200 whose JSON body stops mid-object.
MALFORMED_BODY = '{"id": "sim-broken", "choices": [{"index": 0, "message": {"ro'


async def fault_response(state: SimState, fault: str, anthropic: bool) -> web.Response | None:
    """The response a drawn fault gives instead of an answer (None: answer, possibly after a hang)."""
    cfg = state.config
    if fault in FAULT_ERRORS:
        status, message, openai_type, anthropic_type, code = FAULT_ERRORS[fault]
        headers = {}
        if fault == "429":
            ra = cfg.retry_after
            headers = {"Retry-After": str(math.ceil(ra)), "retry-after-ms": str(int(ra * 1000))}
        return error_response(
            status, message, anthropic_type if anthropic else openai_type, code, anthropic, **headers
        )
    if fault == "context_length" and not cfg.context_length:
        return context_error(2048, 2100, None, anthropic)
    if fault == "hang":
        if state.stopping is None:  # set by on_startup; an explicit check because `python -O` strips asserts
            raise RuntimeError("simulator: a request arrived before the app's startup hook ran")
        # sleep past the client's timeout, but wake up when the server stops
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.stopping.wait(), cfg.hang_s)
    if fault == "malformed_json":
        return web.Response(status=200, text=MALFORMED_BODY, content_type="application/json")
    return None


# Hostile-provider faults: the usage field they set in a normal reply (json.dumps writes NaN as the bare
# token NaN, which strict JSON parsers refuse).
HOSTILE_USAGE: dict[str, Any] = {
    "usage_negative": -18,
    "usage_nan": float("nan"),
    "usage_float": 12.5,
    "usage_huge": 10**15,
}


def hostile_usage(body: dict[str, Any], fault: str, anthropic: bool) -> dict[str, Any]:
    """A hostile provider: usage broken as the fault says, or (no_choices) the answer's choices removed."""
    if fault == "no_choices":
        body.pop("content" if anthropic else "choices", None)
    elif fault in HOSTILE_USAGE and "usage" in body:
        body["usage"]["input_tokens" if anthropic else "prompt_tokens"] = HOSTILE_USAGE[fault]
    return body


def _cut_event(data: Any) -> Any:
    """One event of a cut stream: its finish_reason / stop_reason removed (the server never reached one)."""
    if not isinstance(data, dict):
        return data
    if isinstance(data.get("choices"), list):
        data = {**data, "choices": [{**c, "finish_reason": None} for c in data["choices"]]}
    if isinstance(data.get("delta"), dict) and "stop_reason" in data["delta"]:
        data = {**data, "delta": {**data["delta"], "stop_reason": None}}
    return data


def cut_stream(events: list[Event], fault: str) -> list[Event]:
    """The stream_cut fault: the first half of the content events, then whatever carries usage and the
    clean end (`[DONE]`, message_stop), with no finish_reason or stop_reason anywhere — an interrupted
    generation that a server closed as if it were complete. Other faults: the events unchanged."""
    if fault != "stream_cut":
        return events
    content = [i for i, (_, d) in enumerate(events) if isinstance(d, dict) and _is_content(d)]
    dropped = set(content[len(content) // 2 :])
    return [(n, _cut_event(d)) for i, (n, d) in enumerate(events) if i not in dropped]


def _is_content(d: dict[str, Any]) -> bool:
    """Whether an event carries generated text (a chat delta's content, an Anthropic text delta)."""
    if d.get("type") == "content_block_delta":
        return True
    return any(isinstance(c, dict) and (c.get("delta") or {}).get("content") for c in d.get("choices") or [])
