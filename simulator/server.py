"""The simulator: an OpenAI-compatible (and Anthropic messages) HTTP server on aiohttp.

Routes (each also under /api/v1, the layout of many gateways):
    GET  /v1/models                 lists the simulated models (owned_by: "ept-simulator")
    POST /v1/chat/completions       OpenAI chat completions (n, seed, tools, max_tokens)
    POST /v1/messages               Anthropic messages (usage.input_tokens / output_tokens)
    POST /v1/responses              OpenAI Responses API (input/instructions, max_output_tokens, reasoning.effort)
    every completion route streams (SSE) with "stream": true: usage in the final event (chat: only with
                                    stream_options.include_usage, in a last chunk without choices)
    GET  /_sim/stats, POST /_sim/reset, GET|POST /_sim/config   control (no auth: bind to loopback)

Answers come from a Brain (simulator/generic.py): TaskBrain from simulator/brain.py when that module
exists, else GenericBrain. Faults and latency follow the SimConfig (simulator/config.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from elo_per_token.contracts.jobs import derive_seed
from elo_per_token.contracts.secrets import mask
from elo_per_token.simulator.config import SimConfig, apply_updates, make_config
from elo_per_token.simulator.generic import (
    Brain,
    BrainReply,
    BrainRequest,
    GenericBrain,
    completion_tokens,
    prompt_tokens,
)

log = logging.getLogger("ept.simulator")

PREFIXES = ("/v1", "/api/v1")
OWNER = "ept-simulator"
META_PREFIX = "x-ept-"


def load_brain() -> Brain:
    """TaskBrain when simulator/brain.py exists (it knows the built-in suites), else GenericBrain."""
    try:
        from elo_per_token.simulator.brain import TaskBrain
    except ModuleNotFoundError as e:
        if e.name != "elo_per_token.simulator.brain":
            raise
        return GenericBrain()
    return TaskBrain()


@dataclass
class SimState:
    config: SimConfig
    brain: Brain
    counter: int = 0  # completion requests since start/reset: drives deterministic faults
    script: list[str] = field(default_factory=list)
    stats: dict[str, Counter[str]] = field(default_factory=dict)
    tokens: Counter[str] = field(default_factory=Counter)
    prefixes: set[bytes] = field(
        default_factory=set
    )  # hashes of prompt prefixes seen (the simulated prompt cache)
    stopping: asyncio.Event | None = None

    def __post_init__(self) -> None:
        self.script = list(self.config.script)
        self.reset_stats()

    def reset_stats(self) -> None:
        self.counter = 0
        self.stats = {
            k: Counter()
            for k in ("by_route", "by_status", "by_fault", "by_job", "by_arm", "by_role", "by_gen")
        }
        self.tokens = Counter()

    def stats_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: dict(v) for k, v in self.stats.items()}
        d["requests"] = sum(self.stats["by_route"].values())
        d["completion_requests"] = self.counter
        d["tokens"] = dict(self.tokens)
        return d


STATE = web.AppKey("state", SimState)


# ---------------------------------------------------------------- helpers


def _meta(request: web.Request) -> dict[str, str]:
    """X-EPT-Job: a/b -> {"Job": "a/b"}; names are title-cased so clients may send any case."""
    return {
        k[len(META_PREFIX) :].title(): v
        for k, v in request.headers.items()
        if k.lower().startswith(META_PREFIX)
    }


def _presented_key(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def _error(
    status: int, message: str, etype: str, code: str | None, anthropic: bool, **headers: str
) -> web.Response:
    if anthropic:
        body = {"type": "error", "error": {"type": etype, "message": message}}
    else:
        body = {"error": {"message": message, "type": etype, "param": None, "code": code}}
    return web.json_response(body, status=status, headers=headers or None)


def _latency_s(cfg: SimConfig, rng: random.Random) -> float:
    mean, jit = cfg.latency_ms, cfg.latency_jitter_ms
    if mean <= 0 and jit <= 0:
        return 0.0
    if cfg.latency_dist == "exponential":
        ms = rng.expovariate(1 / mean) if mean > 0 else 0.0
    elif cfg.latency_dist == "normal":
        ms = rng.gauss(mean, jit)
    else:
        ms = rng.uniform(mean - jit, mean + jit)
    return max(ms, 0.0) / 1000


def pick_fault(state: SimState, k: int) -> str:
    """The fault for completion request number k: the script first, then the rates (deterministic in seed, k)."""
    if state.script:
        return state.script.pop(0)
    cfg = state.config
    u = random.Random(derive_seed(cfg.seed, "fault", k)).random()
    for name, rate in (
        ("429", cfg.rate_429),
        ("500", cfg.rate_500),
        ("hang", cfg.rate_hang),
        ("malformed_json", cfg.rate_malformed_json),
        ("missing_usage", cfg.rate_missing_usage),
        ("fewer_choices", cfg.rate_fewer_choices),
    ):
        if u < rate:
            return name
        u -= rate
    return "ok"


def _anthropic_to_openai(
    body: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, str]:
    """Anthropic messages/tools -> OpenAI-style messages/tools for the brain; also the system text."""
    system = body.get("system") or ""
    if isinstance(system, list):
        system = "\n".join(b.get("text", "") for b in system if isinstance(b, dict))
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, str):
            msgs.append({"role": m.get("role"), "content": content})
            continue
        texts, calls = [], []
        for b in content or []:
            t = b.get("type")
            if t == "text":
                texts.append(b.get("text", ""))
            elif t == "tool_use":
                calls.append(
                    {
                        "id": b.get("id"),
                        "type": "function",
                        "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input", {}))},
                    }
                )
            elif t == "tool_result":
                c = b.get("content")
                c = (
                    c
                    if isinstance(c, str)
                    else "\n".join(x.get("text", "") for x in c or [] if isinstance(x, dict))
                )
                msgs.append({"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": c})
        if texts or calls:
            msg: dict[str, Any] = {"role": m.get("role"), "content": "\n".join(texts) if texts else None}
            if calls:
                msg["tool_calls"] = calls
            msgs.append(msg)
    tools = [
        {
            "type": "function",
            "function": {
                "name": t.get("name"),
                "description": t.get("description", ""),
                "parameters": t.get("input_schema", {}),
            },
        }
        for t in body.get("tools") or []
    ] or None
    return msgs, tools, system


def _reasoning_params(body: dict[str, Any]) -> tuple[str | None, int | None, list[str] | None]:
    """(reasoning_effort, thinking budget_tokens, stop sequences) from either protocol's body."""
    effort = body.get("reasoning_effort")
    if not isinstance(effort, str):
        r = body.get("reasoning")  # the Responses API's {"effort": ...}
        effort = r.get("effort") if isinstance(r, dict) and isinstance(r.get("effort"), str) else None
    th = body.get("thinking")
    budget = th.get("budget_tokens") if isinstance(th, dict) and th.get("type") == "enabled" else None
    stop = body.get("stop", body.get("stop_sequences"))
    stop = [stop] if isinstance(stop, str) else stop
    stop = [x for x in stop if isinstance(x, str) and x] if isinstance(stop, list) else None
    return effort, budget if isinstance(budget, int) and not isinstance(budget, bool) else None, stop or None


def _context_error(limit: int, p_tok: int, max_tokens: int | None, anthropic: bool) -> web.Response:
    """The 400 real servers send when prompt + max_tokens exceed the context (OpenAI's and Anthropic's wording)."""
    if anthropic:
        msg = f"prompt is too long: {p_tok + (max_tokens or 0)} tokens > {limit} maximum"
    else:
        msg = (
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{p_tok + (max_tokens or 0)} tokens ({p_tok} in the messages, {max_tokens or 0} in the completion). "
            "Please reduce the length of the messages or completion."
        )
    return _error(400, msg, "invalid_request_error", "context_length_exceeded", anthropic)


# ---------------------------------------------------------------- handlers


def _auth(state: SimState, request: web.Request, anthropic: bool) -> web.Response | None:
    want = state.config.api_key
    if not want:
        return None
    got = _presented_key(request)
    if got == want:
        return None
    if state.config.auth_style == "litellm":
        return _error(400, "Authentication Error, No connected db.", "auth_error", "400", anthropic)
    msg = (
        f"Incorrect API key provided: {mask(got)}."
        if got
        else "Missing API key (Authorization: Bearer … or x-api-key)."
    )
    return _error(
        401,
        msg,
        "authentication_error" if anthropic else "invalid_request_error",
        "invalid_api_key",
        anthropic,
    )


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if not state.config.serve_models:
        return await not_found(request)
    state.stats["by_route"]["models"] += 1
    denied = _auth(state, request, anthropic="anthropic-version" in request.headers)
    if denied:
        state.stats["by_status"][str(denied.status)] += 1
        return denied
    state.stats["by_status"]["200"] += 1
    # Fields of both the OpenAI and the Anthropic model list, so either SDK can read it.
    data = [
        {
            "id": m,
            "object": "model",
            "type": "model",
            "created": 1700000000,
            "created_at": "2023-11-14T22:13:20Z",
            "owned_by": OWNER,
            "display_name": f"{m} (ept simulator, not a real model)",
        }
        for m in state.config.models
    ]
    return web.json_response(
        {
            "object": "list",
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"],
            "last_id": data[-1]["id"],
        }
    )


# Faults answered with an error before the brain runs: fault -> (status, message, error type for OpenAI,
# for Anthropic, code). The others change the answer itself (hang, malformed_json, context_length,
# fewer_choices, missing_usage, hostile usage) and are handled where they act.
_FAULT_ERRORS: dict[str, tuple[int, str, str, str, str | None]] = {
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


async def _complete(request: web.Request, anthropic: bool, responses: bool = False) -> web.Response:
    """One completion on any route (chat, messages, responses): check the request, count it, apply the
    fault it draws, ask the brain, answer in the route's wire format (JSON or SSE)."""
    state = request.app[STATE]
    route = "messages" if anthropic else ("responses" if responses else "chat")
    state.stats["by_route"][route] += 1
    resp = await _completion_response(request, state, anthropic, responses)
    state.stats["by_status"][str(resp.status)] += 1
    return resp


async def _completion_response(
    request: web.Request, state: SimState, anthropic: bool, responses: bool
) -> web.Response:
    cfg = state.config
    denied = _auth(state, request, anthropic)
    if denied:
        return denied
    body, bad = await _read_body(request, cfg, anthropic, responses)
    if bad is not None:
        return bad
    meta = _meta(request)
    for key, stat in (("Job", "by_job"), ("Arm", "by_arm"), ("Role", "by_role")):
        if key in meta:
            state.stats[stat][meta[key]] += 1
    k = state.counter
    state.counter += 1
    fault = pick_fault(state, k)
    state.stats["by_fault"][fault] += 1
    lat = _latency_s(cfg, random.Random(derive_seed(cfg.seed, "latency", k)))
    if lat:
        await asyncio.sleep(lat)
    faulted = await _fault_response(state, fault, anthropic)
    if faulted is not None:
        return faulted
    return _answer(request, state, body, meta, k, fault, anthropic, responses)


async def _read_body(
    request: web.Request, cfg: SimConfig, anthropic: bool, responses: bool
) -> tuple[dict[str, Any], web.Response | None]:
    """The request body as chat messages, or the 400/404 a provider would answer to it."""
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError("body must be a JSON object")
    except (ValueError, json.JSONDecodeError) as e:
        return {}, _error(400, f"Invalid JSON body: {e}", "invalid_request_error", None, anthropic)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return body, _error(400, "'model' is required", "invalid_request_error", None, anthropic)
    if responses:
        # The Responses API: `input` (a string or message items) and `instructions` instead of `messages`;
        # answered in text (tools are not simulated on this route).
        body = {**body, "messages": _responses_messages(body), "max_tokens": body.get("max_output_tokens")}
        body.pop("tools", None)
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) and m.get("role") for m in msgs):
        return body, _error(400, "'messages' must be a non-empty list of objects with a role",
                            "invalid_request_error", None, anthropic)  # fmt: skip
    if anthropic and not isinstance(body.get("max_tokens"), int):
        return body, _error(400, "max_tokens: Field required", "invalid_request_error", None, anthropic)
    if cfg.strict_models and model not in cfg.models:
        return body, _error(404, f"The model `{model}` does not exist (simulator serves: {', '.join(cfg.models)}).",
                            "not_found_error" if anthropic else "invalid_request_error", "model_not_found",
                            anthropic)  # fmt: skip
    return body, None


async def _fault_response(state: SimState, fault: str, anthropic: bool) -> web.Response | None:
    """The response a drawn fault gives instead of an answer (None: answer, possibly after a hang)."""
    cfg = state.config
    if fault in _FAULT_ERRORS:
        status, message, openai_type, anthropic_type, code = _FAULT_ERRORS[fault]
        headers = {}
        if fault == "429":
            ra = cfg.retry_after
            headers = {"Retry-After": str(math.ceil(ra)), "retry-after-ms": str(int(ra * 1000))}
        return _error(
            status, message, anthropic_type if anthropic else openai_type, code, anthropic, **headers
        )
    if fault == "context_length" and not cfg.context_length:
        return _context_error(2048, 2100, None, anthropic)
    if fault == "hang":
        if state.stopping is None:  # set by on_startup; an explicit check because `python -O` strips asserts
            raise RuntimeError("simulator: a request arrived before the app's startup hook ran")
        # sleep past the client's timeout, but wake up when the server stops
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.stopping.wait(), cfg.hang_s)
    if fault == "malformed_json":
        return web.Response(status=200, text='{"id": "sim-broken", "choices": [{"index": 0, "message": {"ro',
                            content_type="application/json")  # fmt: skip
    return None


def _generation(request: web.Request, state: SimState, body: dict[str, Any], k: int) -> dict[str, Any]:
    """The request's sampling settings (seed from the body, the X-EPT-Seed header, or drawn), counted."""
    cfg = state.config
    seed = body.get("seed")
    if not isinstance(seed, int):
        hdr = request.headers.get("X-EPT-Seed")
        seed = int(hdr) if hdr and hdr.lstrip("-").isdigit() else derive_seed(cfg.seed, "unseeded", k)
    temperature = body.get("temperature")
    temperature = float(temperature) if isinstance(temperature, int | float) else 1.0
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    effort, thinking, stop = _reasoning_params(body)
    for name, val in (
        ("max_tokens", max_tokens),
        ("reasoning_effort", effort),
        ("thinking_budget", thinking),
        ("top_p", body.get("top_p")),
        ("stop", json.dumps(stop) if stop else None),
    ):
        if val is not None:
            state.stats["by_gen"][f"{name}={val}"] += 1
    return {"seed": seed, "temperature": temperature, "max_tokens": max_tokens, "reasoning_effort": effort,
            "thinking_budget": thinking, "stop": stop}  # fmt: skip


def _answer(
    request: web.Request, state: SimState, body: dict[str, Any], meta: dict[str, str], k: int, fault: str,
    anthropic: bool, responses: bool,
) -> web.Response:  # fmt: skip
    """Ask the brain for the request's choices and answer in the route's format."""
    cfg = state.config
    model = body["model"]
    if anthropic:
        messages, tools, system = _anthropic_to_openai(body)
        n = 1
    else:
        messages, tools, system = body["messages"], body.get("tools"), ""
        n = 1 if body.get("n") is None else body["n"]
        if not isinstance(n, int) or not 1 <= n <= 128:
            return _error(400, "'n' must be an integer in 1..128", "invalid_request_error", None, anthropic)
    gen = _generation(request, state, body, k)
    seed, max_tokens = gen.pop("seed"), gen.pop("max_tokens")
    p_tok = prompt_tokens(
        [m for m in messages if m.get("role") != "system"] if anthropic else messages, tools, system
    )
    if cfg.context_length and (fault == "context_length" or p_tok + (max_tokens or 0) > cfg.context_length):
        return _context_error(cfg.context_length, p_tok, max_tokens, anthropic)
    if (
        cfg.context_length
    ):  # no max_tokens: the reply can only use what the context leaves (llama.cpp's n_ctx)
        max_tokens = max_tokens or max(1, cfg.context_length - p_tok)
    n_out = 1 if (fault == "fewer_choices" or cfg.ignore_n) and n > 1 else n
    degrade = cfg.degrade.get(meta.get("Arm", ""), 0.0)
    try:
        replies = [state.brain.respond(BrainRequest(messages=messages, seed=derive_seed(seed, i), tools=tools,
                                                    model=model, meta=meta, degrade=degrade, max_tokens=max_tokens,
                                                    **gen))
                   for i in range(n_out)]  # fmt: skip
    except Exception as e:
        log.exception("brain failed")
        return _error(500, f"simulator brain error: {type(e).__name__}", "server_error", None, anthropic)
    c_toks = [completion_tokens(r) for r in replies]
    state.tokens["prompt_tokens"] += p_tok
    state.tokens["completion_tokens"] += sum(c_toks)
    return _render(state, body, messages, tools, replies, p_tok, c_toks, seed, k, fault, anthropic, responses)


def _render(
    state: SimState, body: dict[str, Any], messages: list[dict[str, Any]], tools: Any, replies: list[BrainReply],
    p_tok: int, c_toks: list[int], seed: int, k: int, fault: str, anthropic: bool, responses: bool,
) -> web.Response:  # fmt: skip
    """The answer in the route's wire format, with the prompt-cache model's cached tokens."""
    cfg, model = state.config, body["model"]
    stream = body.get("stream") is True
    include_usage = anthropic or responses or bool((body.get("stream_options") or {}).get("include_usage"))
    with_usage = fault != "missing_usage"
    rid = f"{derive_seed(seed, k, model):08x}"
    # Anthropic caches only what the request marks with cache_control; OpenAI caches repeated prefixes itself.
    cacheable = cfg.prompt_cache and (not anthropic or "cache_control" in json.dumps(body))
    if not cacheable:
        cached, prefix = 0, 0
    elif cfg.prompt_cache == "warm":
        cached, prefix = _warm_prefix(messages, tools)
    else:
        cached, prefix = _cached_prefix(state, messages, tools)
    if anthropic:
        out = _anthropic_body(
            rid, model, replies[0], p_tok, c_toks[0], with_usage, cached, prefix if cacheable else 0
        )
        out = _hostile_usage(out, fault, True)
        return _sse(sse_messages(out)) if stream else web.json_response(out)
    if responses:
        out = _responses_body(rid, model, replies[0], p_tok, c_toks[0], with_usage, cached)
        return _sse(sse_responses(out)) if stream else web.json_response(out)
    out = _hostile_usage(
        _openai_body(rid, model, replies, p_tok, c_toks, with_usage, seed, cached), fault, False
    )
    return _sse(sse_chat(out, include_usage)) if stream else web.json_response(out)


# ---------------------------------------------------------------- Responses API and streaming (SSE)


def _responses_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
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
            else "\n".join(str(p.get("text", "")) for p in c or [] if isinstance(p, dict) and "text" in p)
        )
        role = item.get("role") if item.get("role") in ("user", "assistant", "system") else "user"
        msgs.append({"role": "system" if role == "developer" else role, "content": text})
    return msgs


def _responses_body(
    rid: str, model: str, r: BrainReply, p_tok: int, c_tok: int, with_usage: bool, cached: int
) -> dict[str, Any]:
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
                "type": "message", "id": f"msg_sim_{rid}", "status": "incomplete" if cut else "completed",
                "role": "assistant", "content": [{"type": "output_text", "text": r.text or "", "annotations": []}],
            }
        ],
        "usage": None,
    }  # fmt: skip
    if with_usage:
        body["usage"] = {
            "input_tokens": p_tok,
            "input_tokens_details": {"cached_tokens": min(cached, p_tok)},
            "output_tokens": c_tok,
            "output_tokens_details": {"reasoning_tokens": r.reasoning_tokens},
            "total_tokens": p_tok + c_tok,
        }
    return body


def _sse(events: list[tuple[str | None, Any]]) -> web.Response:
    """A complete SSE body (`event:` lines where the protocol names events; `data: [DONE]` for chat)."""
    parts = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        parts.append(head + "data: " + (data if isinstance(data, str) else json.dumps(data)) + "\n\n")
    return web.Response(
        text="".join(parts), content_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


def _pieces(text: str | None, size: int = 24) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] if text else []


def sse_chat(body: dict[str, Any], include_usage: bool) -> list[tuple[str | None, Any]]:
    """chat.completion.chunk events: role, content deltas and finish_reason per choice; usage only in a last
    chunk with no choices, and only with stream_options.include_usage (as OpenAI does)."""
    base = {k: body[k] for k in ("id", "created", "model", "system_fingerprint")} | {
        "object": "chat.completion.chunk"
    }
    ev: list[tuple[str | None, Any]] = []
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
        for piece in _pieces(msg.get("content")):
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


def sse_messages(body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """Anthropic message events: input usage in message_start, output_tokens in message_delta."""
    usage = body.get("usage") or {}
    start = {
        **body,
        "content": [],
        "stop_reason": None,
        "usage": {**usage, "output_tokens": 1} if usage else None,
    }
    ev: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(body.get("content", [])):
        if block["type"] == "text":
            ev.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            for piece in _pieces(block["text"]):
                ev.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                )
        else:
            ev.append(
                ("content_block_start", {"type": "content_block_start", "index": i, "content_block": block})
            )
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta_usage = {"output_tokens": usage.get("output_tokens", 0)} if usage else None
    ev.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
                "usage": delta_usage,
            },
        )
    )
    ev.append(("message_stop", {"type": "message_stop"}))
    return ev


def sse_responses(body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """Responses API events, usage in response.completed (response.incomplete when cut by max_output_tokens)."""
    item = body["output"][0]
    text = item["content"][0]["text"]
    seq = iter(range(10**6))
    pending = {**body, "status": "in_progress", "output": [], "usage": None}
    ev: list[tuple[str | None, Any]] = [
        ("response.created", {"type": "response.created", "sequence_number": next(seq), "response": pending}),
        ("response.in_progress", {"type": "response.in_progress", "sequence_number": next(seq), "response": pending}),
        ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": next(seq),
                                        "output_index": 0, "item": {**item, "status": "in_progress", "content": []}}),
        ("response.content_part.added", {"type": "response.content_part.added", "sequence_number": next(seq),
                                         "item_id": item["id"], "output_index": 0, "content_index": 0,
                                         "part": {"type": "output_text", "text": "", "annotations": []}}),
    ]  # fmt: skip
    for piece in _pieces(text):
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


CACHE_MIN_TOKENS = 16
_CACHE_CAP = 200_000


def _cached_prefix(state: SimState, messages: list[dict[str, Any]], tools: Any) -> tuple[int, int]:
    """(tokens of the longest message prefix an earlier request already sent, tokens of the prefix this request
    adds to the cache); prefixes shorter than CACHE_MIN_TOKENS are never cached."""
    import hashlib

    h = hashlib.sha256(json.dumps(tools or [], sort_keys=True).encode())
    cached = prefix = 0
    if len(state.prefixes) > _CACHE_CAP:
        state.prefixes.clear()
    for i, m in enumerate(messages):
        h.update(json.dumps(m, sort_keys=True, default=str).encode())
        key = h.digest()
        toks = prompt_tokens(messages[: i + 1], tools)
        if toks < CACHE_MIN_TOKENS:
            continue
        if key in state.prefixes:
            cached = toks
        else:
            state.prefixes.add(key)
        prefix = toks
    return cached, prefix


def _warm_prefix(messages: list[dict[str, Any]], tools: Any) -> tuple[int, int]:
    """(cached, prefix) for a cache a long sweep has already warmed: everything before the newest message was
    sent before (the shared system prompt, earlier turns of an episode); this request adds the rest. Depends on
    the request only, so the same run reports the same usage at any concurrency."""
    whole = prompt_tokens(messages, tools)
    before = prompt_tokens(messages[:-1], tools) if len(messages) > 1 else 0
    return (before if before >= CACHE_MIN_TOKENS else 0), (whole if whole >= CACHE_MIN_TOKENS else 0)


_BAD_USAGE = {"usage_negative": -18, "usage_nan": float("nan"), "usage_float": 12.5, "usage_huge": 10**15}


def _hostile_usage(body: dict[str, Any], fault: str, anthropic: bool) -> dict[str, Any]:
    """A hostile provider: usage broken as the fault says (json.dumps writes NaN as the bare token NaN)."""
    if fault == "no_choices":
        body.pop("content" if anthropic else "choices", None)
    elif fault in _BAD_USAGE and "usage" in body:
        body["usage"]["input_tokens" if anthropic else "prompt_tokens"] = _BAD_USAGE[fault]
    return body


def _openai_body(
    rid: str,
    model: str,
    replies: list[BrainReply],
    p_tok: int,
    c_toks: list[int],
    with_usage: bool,
    seed: int,
    cached: int = 0,
) -> dict[str, Any]:
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


_STOP_REASON = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _anthropic_body(
    rid: str,
    model: str,
    r: BrainReply,
    p_tok: int,
    c_tok: int,
    with_usage: bool,
    cached: int = 0,
    prefix: int = 0,
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if (
        r.reasoning_tokens
    ):  # a summarised thinking block, as Claude 4 returns; output_tokens counts the full thinking
        content.append(
            {"type": "thinking", "thinking": "(simulated thinking, summarised)", "signature": "sim"}
        )
    content += [{"type": "text", "text": r.text}] if r.text else []
    content += [
        {"type": "tool_use", "id": f"toolu_{rid}_{j}", "name": tc["name"], "input": tc.get("arguments", {})}
        for j, tc in enumerate(r.tool_calls or [])
    ]
    finish = "tool_calls" if r.tool_calls else r.finish_reason
    body: dict[str, Any] = {
        "id": f"msg_sim_{rid}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP_REASON.get(finish, "end_turn"),
        "stop_sequence": None,
    }
    if with_usage:
        # input_tokens excludes cache reads and writes (Anthropic's accounting): the three add up to the prompt.
        read = min(cached, p_tok)
        created = 0 if read else min(prefix, p_tok)
        body["usage"] = {
            "input_tokens": p_tok - read - created,
            "output_tokens": c_tok,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": created,
        }
    return body


async def chat_completions(request: web.Request) -> web.Response:
    return await _complete(request, anthropic=False)


async def messages(request: web.Request) -> web.Response:
    return await _complete(request, anthropic=True)


async def responses(request: web.Request) -> web.Response:
    return await _complete(request, anthropic=False, responses=True)


async def sim_stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].stats_dict())


async def sim_reset(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.reset_stats()
    return web.json_response({"ok": True})


async def sim_config(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if request.method == "POST":
        try:
            updates = await request.json()
            if not isinstance(updates, dict):
                raise ValueError("config must be a JSON object")
            state.config = apply_updates(state.config, updates)
        except ValueError as e:
            return web.json_response({"error": {"message": str(e)}}, status=400)
        if "script" in updates:
            state.script = list(state.config.script)
    return web.json_response(state.config.to_dict())


async def not_found(request: web.Request) -> web.Response:
    anthropic = "anthropic-version" in request.headers
    state = request.app[STATE]
    state.stats["by_route"]["unknown"] += 1
    state.stats["by_status"]["404"] += 1
    return _error(
        404,
        f"Not found: {request.method} {request.path} (ept simulator routes: /v1/models, "
        "/v1/chat/completions, /v1/messages, /v1/responses, also under /api/v1)",
        "not_found_error" if anthropic else "invalid_request_error",
        "not_found",
        anthropic,
    )


def make_app(config: SimConfig | dict[str, Any] | None = None, brain: Brain | None = None) -> web.Application:
    app = web.Application(client_max_size=32 * 1024 * 1024)
    state = SimState(config=make_config(config), brain=brain or load_brain())
    app[STATE] = state

    async def on_startup(_: web.Application) -> None:
        state.stopping = asyncio.Event()

    async def on_shutdown(_: web.Application) -> None:
        if state.stopping is not None:
            state.stopping.set()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    for p in PREFIXES:
        app.router.add_get(f"{p}/models", models)
        app.router.add_post(f"{p}/chat/completions", chat_completions)
        app.router.add_post(f"{p}/messages", messages)
        app.router.add_post(f"{p}/responses", responses)
    app.router.add_get("/_sim/stats", sim_stats)
    app.router.add_post("/_sim/reset", sim_reset)
    app.router.add_get("/_sim/config", sim_config)
    app.router.add_post("/_sim/config", sim_config)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app


# ---------------------------------------------------------------- control + in-process running


class SimControl:
    """Runtime control over HTTP (works for in-thread, subprocess and remote simulators)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(
            self.root + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            reply: dict[str, Any] = json.loads(r.read())
        return reply

    def set(self, **updates: Any) -> dict[str, Any]:
        """Change config at runtime (same fields as SimConfig); returns the config now in effect."""
        return self._call("POST", "/_sim/config", updates)

    def config(self) -> dict[str, Any]:
        return self._call("GET", "/_sim/config")

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/_sim/stats")

    def reset(self) -> None:
        """Zero the stats and the request counter (the config stays)."""
        self._call("POST", "/_sim/reset", {})


@dataclass
class RunningSimulator:
    url: str  # base_url for OpenAI clients, including /v1
    root: str  # http://host:port (Anthropic clients use this as base_url)
    port: int
    control: SimControl
    _stop: Any = None

    def stop(self) -> None:
        if self._stop:
            self._stop()
            self._stop = None

    def __enter__(self) -> RunningSimulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _start(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048)
    await site.start()
    bound = runner.addresses[0][1]
    return runner, bound


def start_in_thread(
    config: SimConfig | dict[str, Any] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    brain: Brain | None = None,
) -> RunningSimulator:
    """Start a simulator on its own event loop in a daemon thread; port 0 picks a free port."""
    app = make_app(config, brain)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            box["runner"], box["port"] = loop.run_until_complete(_start(app, host, port))
        except BaseException as e:
            box["error"] = e
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(box["runner"].cleanup())
        loop.close()

    t = threading.Thread(target=run, name="ept-simulator", daemon=True)
    t.start()
    ready.wait(30)
    if "error" in box:
        raise box["error"]

    def stop() -> None:
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)

    root = f"http://{host}:{box['port']}"
    return RunningSimulator(
        url=root + "/v1", root=root, port=box["port"], control=SimControl(root), _stop=stop
    )


def serve(config: SimConfig, host: str = "127.0.0.1", port: int = 8765, brain: Brain | None = None) -> None:
    """Run in the foreground until interrupted (`ept simulate`)."""
    web.run_app(
        make_app(config, brain),
        host=host,
        port=port,
        access_log=None,
        print=None,
        backlog=2048,
        shutdown_timeout=1.0,
    )
