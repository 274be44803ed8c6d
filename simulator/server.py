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

This module assembles the app from its parts: completion.py (one completion request, any route),
proto_chat.py / proto_messages.py / proto_responses.py (each protocol's bodies and SSE, sse.py the shared
helpers), faults.py, latency.py, prompt_cache.py, auth.py, state.py; control.py runs it in-process.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from elo_per_token.simulator.auth import auth_denial
from elo_per_token.simulator.completion import complete
from elo_per_token.simulator.config import SimConfig, apply_updates, make_config
from elo_per_token.simulator.generic import Brain, GenericBrain
from elo_per_token.simulator.proto_chat import OWNER
from elo_per_token.simulator.proto_errors import error_response
from elo_per_token.simulator.state import STATE, SimState

PREFIXES = ("/v1", "/api/v1")


def load_brain() -> Brain:
    """TaskBrain when simulator/brain.py exists (it knows the built-in suites), else GenericBrain."""
    try:
        from elo_per_token.simulator.brain import TaskBrain
    except ModuleNotFoundError as e:
        if e.name != "elo_per_token.simulator.brain":
            raise
        return GenericBrain()
    return TaskBrain()


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if not state.config.serve_models:
        return await not_found(request)
    state.stats["by_route"]["models"] += 1
    denied = auth_denial(state, request, anthropic="anthropic-version" in request.headers)
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


async def chat_completions(request: web.Request) -> web.Response:
    return await complete(request, anthropic=False)


async def messages(request: web.Request) -> web.Response:
    return await complete(request, anthropic=True)


async def responses(request: web.Request) -> web.Response:
    return await complete(request, anthropic=False, responses=True)


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
    return error_response(
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
