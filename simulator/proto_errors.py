"""Error bodies in the two wire formats: OpenAI's `{"error": {...}}` and Anthropic's `{"type": "error", ...}`."""

from __future__ import annotations

from aiohttp import web


def error_response(
    status: int, message: str, etype: str, code: str | None, anthropic: bool, **headers: str
) -> web.Response:
    """The JSON error a provider of the route's protocol answers (Anthropic's shape has no code)."""
    if anthropic:
        body = {"type": "error", "error": {"type": etype, "message": message}}
    else:
        body = {"error": {"message": message, "type": etype, "param": None, "code": code}}
    return web.json_response(body, status=status, headers=headers or None)


def context_error(limit: int, p_tok: int, max_tokens: int | None, anthropic: bool) -> web.Response:
    """The 400 real servers send when prompt + max_tokens exceed the context (OpenAI's and Anthropic's wording)."""
    if anthropic:
        msg = f"prompt is too long: {p_tok + (max_tokens or 0)} tokens > {limit} maximum"
    else:
        msg = (
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{p_tok + (max_tokens or 0)} tokens ({p_tok} in the messages, {max_tokens or 0} in the completion). "
            "Please reduce the length of the messages or completion."
        )
    return error_response(400, msg, "invalid_request_error", "context_length_exceeded", anthropic)


def unsupported_param(name: str, anthropic: bool) -> web.Response:
    """OpenAI's 400 for a request field the model does not take (`param` names it); Anthropic's wording."""
    if anthropic:
        return error_response(
            400, f"{name}: Extra inputs are not permitted", "invalid_request_error", None, True
        )
    body = {
        "error": {
            "message": f"Unsupported parameter: '{name}' is not supported with this model.",
            "type": "invalid_request_error",
            "param": name,
            "code": "unsupported_parameter",
        }
    }
    return web.json_response(body, status=400)
