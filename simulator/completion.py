"""One completion on any route (chat, messages, responses): check the request, count it, apply the fault it
draws, ask the brain for its choices, answer in the route's wire format (JSON or SSE)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any

from aiohttp import web

from elo_per_token.contracts.jobs import derive_seed
from elo_per_token.simulator.auth import auth_denial
from elo_per_token.simulator.config import SimConfig
from elo_per_token.simulator.faults import cut_stream, fault_response, hostile_usage, pick_fault
from elo_per_token.simulator.generic import BrainReply, BrainRequest, completion_tokens, prompt_tokens
from elo_per_token.simulator.latency import latency_s
from elo_per_token.simulator.prompt_cache import cached_prefix, warm_prefix
from elo_per_token.simulator.proto_chat import chat_body, sse_chat
from elo_per_token.simulator.proto_errors import context_error, error_response, unsupported_param
from elo_per_token.simulator.proto_messages import anthropic_body, anthropic_to_openai, sse_messages
from elo_per_token.simulator.proto_responses import responses_body, responses_messages, sse_responses
from elo_per_token.simulator.sse import sse_response
from elo_per_token.simulator.state import STATE, SimState

log = logging.getLogger("ept.simulator")

META_PREFIX = "x-ept-"


def _meta(request: web.Request) -> dict[str, str]:
    """X-EPT-Job: a/b -> {"Job": "a/b"}; names are title-cased so clients may send any case."""
    return {
        k[len(META_PREFIX) :].title(): v
        for k, v in request.headers.items()
        if k.lower().startswith(META_PREFIX)
    }


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


async def complete(request: web.Request, anthropic: bool, responses: bool = False) -> web.Response:
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
    denied = auth_denial(state, request, anthropic)
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
    fault = pick_fault(state.script, cfg, k)
    state.stats["by_fault"][fault] += 1
    lat = latency_s(cfg, random.Random(derive_seed(cfg.seed, "latency", k)))
    if lat:
        await asyncio.sleep(lat)
    faulted = await fault_response(state, fault, anthropic)
    if faulted is not None:
        return faulted
    return _answer(request, state, body, meta, k, fault, anthropic, responses)


def _bad_token_limit(body: dict[str, Any]) -> str | None:
    """The token-limit field that is not a non-negative integer (a float, string, list, bool…), if any: the
    token counts add it to the prompt's, so a wrong type is the client's 400, not the server's crash."""
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            return name
    return None


async def _read_body(
    request: web.Request, cfg: SimConfig, anthropic: bool, responses: bool
) -> tuple[dict[str, Any], web.Response | None]:
    """The request body as chat messages, or the 400/404 a provider would answer to it."""
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError("body must be a JSON object")
    except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than the parser's stack
        return {}, error_response(400, f"Invalid JSON body: {e}", "invalid_request_error", None, anthropic)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return body, error_response(400, "'model' is required", "invalid_request_error", None, anthropic)
    if responses:
        # The Responses API: `input` (a string or message items) and `instructions` instead of `messages`;
        # answered in text (tools are not simulated on this route).
        body = {**body, "messages": responses_messages(body), "max_tokens": body.get("max_output_tokens")}
        body.pop("tools", None)
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) and m.get("role") for m in msgs):
        return body, error_response(
            400,
            "'messages' must be a non-empty list of objects with a role",
            "invalid_request_error",
            None,
            anthropic,
        )
    bad_limit = _bad_token_limit(body)
    if bad_limit:
        return body, error_response(
            400, f"'{bad_limit}' must be a non-negative integer", "invalid_request_error", None, anthropic
        )
    if anthropic and not isinstance(body.get("max_tokens"), int):
        return body, error_response(
            400, "max_tokens: Field required", "invalid_request_error", None, anthropic
        )
    refused = next((p for p in cfg.reject_params if p in body), None)
    if refused is not None:
        return body, unsupported_param(refused, anthropic)
    if cfg.strict_models and model not in cfg.models:
        return body, error_response(
            404,
            f"The model `{model}` does not exist (simulator serves: {', '.join(cfg.models)}).",
            "not_found_error" if anthropic else "invalid_request_error",
            "model_not_found",
            anthropic,
        )
    return body, None


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
    return {
        "seed": seed,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "reasoning_effort": effort,
        "thinking_budget": thinking,
        "stop": stop,
    }


def _valid_tools(tools: Any) -> bool:
    """Whether tool specs are a list of objects whose function, if any, is an object with a string (or no)
    name: the brain may call any tool, and a call's name is counted as text."""
    if tools is None:
        return True
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return False
    fns = [t["function"] for t in tools if "function" in t]
    return all(isinstance(f, dict) and isinstance(f.get("name"), str | None) for f in fns)


def _answer(
    request: web.Request,
    state: SimState,
    body: dict[str, Any],
    meta: dict[str, str],
    k: int,
    fault: str,
    anthropic: bool,
    responses: bool,
) -> web.Response:
    """Ask the brain for the request's choices and answer in the route's format."""
    cfg = state.config
    model = body["model"]
    read = _read_request(body, anthropic)
    if isinstance(read, web.Response):  # a bad `n` or `tools`: the 400 a provider answers
        return read
    messages, tools, system, n = read
    gen = _generation(request, state, body, k)
    seed, max_tokens = gen.pop("seed"), gen.pop("max_tokens")
    p_tok = prompt_tokens(
        [m for m in messages if m.get("role") != "system"] if anthropic else messages, tools, system
    )
    if cfg.context_length and (fault == "context_length" or p_tok + (max_tokens or 0) > cfg.context_length):
        return context_error(cfg.context_length, p_tok, max_tokens, anthropic)
    if cfg.context_length:
        # No max_tokens: the reply can only use what the context leaves (llama.cpp's n_ctx).
        max_tokens = max_tokens or max(1, cfg.context_length - p_tok)
    n_out = 1 if (fault == "fewer_choices" or cfg.ignore_n) and n > 1 else n
    degrade = cfg.degrade.get(meta.get("Arm", ""), 0.0)
    try:
        replies = _replies(state, (messages, tools, model, meta), degrade, max_tokens, gen, seed, n_out)
    except Exception as e:
        log.exception("brain failed")
        return error_response(
            500, f"simulator brain error: {type(e).__name__}", "server_error", None, anthropic
        )
    c_toks = [completion_tokens(r) for r in replies]
    state.tokens["prompt_tokens"] += p_tok
    state.tokens["completion_tokens"] += sum(c_toks)
    return _render(state, body, messages, tools, replies, p_tok, c_toks, seed, k, fault, anthropic, responses)


def _read_request(
    body: dict[str, Any], anthropic: bool
) -> tuple[list[dict[str, Any]], Any, str, int] | web.Response:
    """(messages, tools, system, n) of the request in OpenAI's shape (Anthropic's: converted, one choice), or
    the 400 answer for an `n` outside 1..128 or malformed `tools`."""
    if anthropic:
        messages, tools, system = anthropic_to_openai(body)
        n = 1
    else:
        messages, tools, system = body["messages"], body.get("tools"), ""
        n = 1 if body.get("n") is None else body["n"]
        if not isinstance(n, int) or not 1 <= n <= 128:
            return error_response(
                400, "'n' must be an integer in 1..128", "invalid_request_error", None, anthropic
            )
    if not _valid_tools(tools):
        message = "'tools' must be a list of objects with a string function name"
        return error_response(400, message, "invalid_request_error", None, anthropic)
    return messages, tools, system, n


def _replies(
    state: SimState,
    conversation: tuple[list[dict[str, Any]], Any, str, dict[str, str]],
    degrade: float,
    max_tokens: int | None,
    gen: dict[str, Any],
    seed: int,
    n_out: int,
) -> list[BrainReply]:
    """The brain's `n_out` replies to (messages, tools, model, meta), choice i seeded derive_seed(seed, i)."""
    messages, tools, model, meta = conversation
    return [
        state.brain.respond(
            BrainRequest(
                messages=messages,
                seed=derive_seed(seed, i),
                tools=tools,
                model=model,
                meta=meta,
                degrade=degrade,
                max_tokens=max_tokens,
                **gen,
            )
        )
        for i in range(n_out)
    ]


def _render(
    state: SimState,
    body: dict[str, Any],
    messages: list[dict[str, Any]],
    tools: Any,
    replies: list[BrainReply],
    p_tok: int,
    c_toks: list[int],
    seed: int,
    k: int,
    fault: str,
    anthropic: bool,
    responses: bool,
) -> web.Response:
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
        cached, prefix = warm_prefix(messages, tools)
    else:
        cached, prefix = cached_prefix(state.prefixes, messages, tools)
    if anthropic:
        out = anthropic_body(
            rid, model, replies[0], p_tok, c_toks[0], with_usage, cached, prefix if cacheable else 0
        )
        out = hostile_usage(out, fault, True)
        return sse_response(cut_stream(sse_messages(out), fault)) if stream else web.json_response(out)
    if responses:
        out = responses_body(rid, model, replies[0], p_tok, c_toks[0], with_usage, cached)
        return sse_response(sse_responses(out)) if stream else web.json_response(out)
    out = hostile_usage(chat_body(rid, model, replies, p_tok, c_toks, with_usage, seed, cached), fault, False)
    return sse_response(cut_stream(sse_chat(out, include_usage), fault)) if stream else web.json_response(out)
