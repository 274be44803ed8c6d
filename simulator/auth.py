"""The simulator's API-key check, refused the way the configured provider refuses a wrong key."""

from __future__ import annotations

from aiohttp import web

from elo_per_token.contracts.secrets import mask
from elo_per_token.simulator.proto_errors import error_response
from elo_per_token.simulator.state import SimState


def presented_key(request: web.Request) -> str | None:
    """The key a client sent: `Authorization: Bearer …` (OpenAI) or `x-api-key` (Anthropic)."""
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def auth_denial(state: SimState, request: web.Request, anthropic: bool) -> web.Response | None:
    """None when no key is configured or the right one was sent; else the 401 (or LiteLLM's 400)."""
    want = state.config.api_key
    if not want:
        return None
    got = presented_key(request)
    if got == want:
        return None
    if state.config.auth_style == "litellm":
        return error_response(400, "Authentication Error, No connected db.", "auth_error", "400", anthropic)
    msg = (
        f"Incorrect API key provided: {mask(got)}."
        if got
        else "Missing API key (Authorization: Bearer … or x-api-key)."
    )
    return error_response(
        401,
        msg,
        "authentication_error" if anthropic else "invalid_request_error",
        "invalid_api_key",
        anthropic,
    )
