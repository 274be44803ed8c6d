"""The provider client: one chat call to an OpenAI-compatible or Anthropic endpoint, with our own retries.

The SDKs run with max_retries=0 so that every attempt is counted here and every failure is classified
once, with an actionable message:

    credential        401/403; any 4xx on GET /models   no retry   names the env variable the profile reads
                      or on a profile's first request            and whether it is set (a proxy such as
                      (before any request succeeded)             LiteLLM answers a bad key with 400)
    endpoint          404                                no retry   base_url (/api vs /api/v1) or model name
    rate_limit        429                                retry      waits Retry-After (capped), else backoff
    unreachable       connection refused, DNS failure    retry      backoff; after UNREACHABLE_CIRCUIT failed
                                                                    connects in a row the circuit opens: no
                                                                    more attempts (one probe per
                                                                    CIRCUIT_PROBE_S) until one connects
    transient         5xx, timeouts, malformed bodies    retry      exponential backoff with full jitter
    context_overflow  400 context length exceeded       no retry   prompt + max_tokens above the model's window:
                                                                    a property of the strategy and the task
    permanent         other 4xx                          no retry

`usage` is returned as the server sent it (never recomputed); for the Anthropic protocol only the key
names change (input_tokens -> prompt_tokens, output_tokens -> completion_tokens). Keys are scrubbed
from every message.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict, TypeVar

from elo_per_token.contracts.backoff import backoff
from elo_per_token.contracts.errors import PROVIDER_ERROR_CLASSES, RETRYABLE, ProviderErrorClass
from elo_per_token.contracts.secrets import mask, scrub
from elo_per_token.contracts.usage import check_usage
from elo_per_token.egress.profiles import Profile

log = logging.getLogger("ept.provider")
T = TypeVar("T")

UNREACHABLE_CIRCUIT = 8  # failed connects in a row (no response of any kind in between) that open the circuit
CIRCUIT_PROBE_S = 5.0  # while open, one attempt per this many seconds may try the endpoint again
_CONTEXT = re.compile(
    r"context length|context_length|context window|prompt is too long|too many tokens", re.I
)
ANTHROPIC_DEFAULT_MAX_TOKENS = 1024
_ANTHROPIC_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}


class Discarded(TypedDict):
    """A billed 2xx response that was discarded (malformed) and retried: recorded as a call of its own."""

    usage: dict[str, Any] | None  # checked by contracts.usage; None when absent or invalid
    usage_invalid: str | None  # why the usage was not kept
    message: str
    attempt: int


class ProviderError(Exception):
    def __init__(
        self,
        error_class: ProviderErrorClass,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        attempts: int = 0,
        code: str | None = None,
    ) -> None:
        # An explicit check, not an assert: `python -O` strips asserts, and an unknown class would then
        # reach the ledger and the reports unnoticed.
        if error_class not in PROVIDER_ERROR_CLASSES:
            raise ValueError(
                f"unknown provider error class {error_class!r}; expected one of {PROVIDER_ERROR_CLASSES}"
            )
        super().__init__(message)
        self.error_class: ProviderErrorClass = error_class
        self.status = status
        # The server's machine-readable error code when it sent one (e.g. "model_not_found",
        # "insufficient_quota"): callers such as `ept doctor` branch on it, never on the message text.
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.attempts = attempts
        # Set by the client when it gives up (JobContext records them): what the failed attempt itself was billed
        # (a malformed 2xx's usage, checked) and the billed responses discarded before it.
        self.usage: dict[str, Any] | None = None
        self.usage_invalid: str | None = None
        self.discarded: list[Discarded] = []

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its fields (Celery's result backend, multiprocessing): Exception's default pickling
        calls __init__(message) alone, which fails without the error class."""
        kwargs = {
            "status": self.status,
            "retry_after": self.retry_after,
            "attempts": self.attempts,
            "code": self.code,
        }
        state = {"usage": self.usage, "usage_invalid": self.usage_invalid, "discarded": self.discarded}
        return (_rebuild_provider_error, (self.error_class, self.message, kwargs, state))

    def __str__(self) -> str:
        status = f" {self.status}" if self.status else ""
        return f"[{self.error_class}{status}] {self.message} (attempts: {self.attempts})"


def _rebuild_provider_error(
    error_class: ProviderErrorClass, message: str, kwargs: dict[str, Any], state: dict[str, Any]
) -> ProviderError:
    err = ProviderError(error_class, message, **kwargs)
    err.__dict__.update(state)
    return err


class RateLimiter(Protocol):
    def acquire(self, est_tokens: int) -> None: ...
    def record(self, tokens: int) -> None: ...


@dataclass
class Choice:
    text: str | None
    finish_reason: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # [{"id", "name", "arguments" (JSON str)}]
    reasoning: str | None = None  # reasoning text when the provider returns it (transcripts only; untrusted)


@dataclass
class ChatResponse:
    choices: list[Choice]
    usage: dict[str, Any] | None  # as returned; None when the server sent none
    model: str | None
    latency_s: float  # wall time of the whole call, retries and waits included
    attempts: int
    n_requested: int
    n_returned: int
    usage_invalid: str | None = (
        None  # why the server's usage was not stored (contracts.usage); usage is then None
    )
    # Billed 2xx responses that were discarded and retried (malformed).
    discarded: list[Discarded] = field(default_factory=list)
    max_tokens: int | None = (
        None  # the limit sent (a known context_length may have lowered the configured one)
    )


class _Malformed(Exception):
    """A 2xx response whose body is not the JSON we need. `usage` is what the body said it cost, if anything."""

    usage: dict[str, Any] | None = None


def _discarded(usage: Any, message: str, attempt: int) -> Discarded:
    u, bad = check_usage(usage)
    return {"usage": u, "usage_invalid": bad, "message": message, "attempt": attempt}


def _choices_or_malformed(data: dict[str, Any], anthropic: bool) -> tuple[list[Choice], str | None]:
    """The choices and the model name of a plain (not streamed) 2xx body, every field type-checked."""
    try:
        choices = [_anthropic_choice(data)] if anthropic else _openai_choices(data)
        return choices, _label(data.get("model"), "model")
    except _Malformed as e:
        e.usage = _normalise_usage(data.get("usage"), anthropic)  # the response was billed all the same
        raise


# ---------------------------------------------------------------- classification


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(float(ra), 0.0)
    except ValueError:
        pass
    try:  # the HTTP-date form
        dt = email.utils.parsedate_to_datetime(ra)
    except (TypeError, ValueError):
        return None
    return max(dt.timestamp() - time.time(), 0.0)


_MAX_SERVER_MESSAGE = 1000  # characters of a server's error message kept (the body itself may be megabytes)


def _server_message(e: Exception) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return _sentence(str(err["message"])[:_MAX_SERVER_MESSAGE])
    return _sentence(str(getattr(e, "message", "") or e)[:_MAX_SERVER_MESSAGE])


def _server_code(e: Exception) -> str | None:
    body = getattr(e, "body", None)
    err = body.get("error", body) if isinstance(body, dict) else None
    return str(err.get("code"))[:100] if isinstance(err, dict) and err.get("code") else None


def _conn_cause(e: Exception) -> str:
    """The innermost cause of a connection error (connection refused, name resolution…), not just the SDK's
    generic 'Connection error.'."""
    seen: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and len(seen) < 8:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    inner = str(seen[-1]) if len(seen) > 1 else ""
    return f"{e} ({inner})" if inner and inner not in str(e) else str(e)


def access_error(err: ProviderError, profile: Profile, key: str | None, where_from: str) -> ProviderError:
    """A 4xx that is not 401/403 where no request body can be at fault (GET /models, or the first request of
    a profile) means the key or the account: proxies such as LiteLLM answer a key they cannot check with
    400 ("No connected db"). Reclassified as `credential`, naming the key variable."""
    env_key = os.environ.get(profile.api_key_env) or None
    state = f"is set ({mask(env_key)})" if env_key else "is NOT set or empty"
    msg = (
        f"credential or access (key from ${profile.api_key_env}, which {state}): {err.message} A {err.status} on "
        f"{where_from} means the key or the account, not the request; a proxy (LiteLLM) answers a key it cannot "
        f"check with 400. Check the key and the proxy's key store; run `ept doctor --profile {profile.name}`"
    )
    return ProviderError(
        "credential", scrub(msg, [key]), status=err.status, attempts=err.attempts, code=err.code
    )


def _chain(e: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and len(seen) < 8:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def _transport_failure(e: Exception, profile: Profile, where: str) -> tuple[ProviderErrorClass, str] | None:
    """What the bounded transport or the socket said, when that decides the class: the byte cap and the total
    deadline are transients; so is a connection the server closed after answering began (llama.cpp aborts a
    stream when another request arrives) — only a failed *connect* is `unreachable`."""
    import httpx2

    from elo_per_token.egress.bounded import DeadlineExceeded, ResponseTooLarge

    chain = _chain(e)
    big = next((c for c in chain if isinstance(c, ResponseTooLarge)), None)
    if big is not None:
        return (
            "transient",
            f"response from {where} too large: {big}; raise `max_response_mb` if this is expected",
        )
    if any(isinstance(c, (DeadlineExceeded, httpx2.TimeoutException)) for c in chain):
        return "transient", (
            f"timed out: no complete response within {profile.timeout:g}s (the profile's `timeout`, total per request: a slow "
            f"or endless reply is cut there) from {where}; raise `timeout` if requests queue (n=16 can take long)"
        )
    if any(isinstance(c, (httpx2.ConnectError, httpx2.ProxyError)) for c in chain):
        return None  # a failed connect: unreachable, as classified below
    cut = next(
        (
            c
            for c in chain
            if isinstance(c, (httpx2.ReadError, httpx2.RemoteProtocolError, httpx2.WriteError))
        ),
        None,
    )
    if cut is not None:
        return (
            "transient",
            f"{where} closed the connection mid-response ({str(cut)[:200] or type(cut).__name__})",
        )
    return None


_MODEL_NAME = re.compile(
    r"invalid model|model[ _]not[ _]found|unknown model|no such model|model\S* .{0,60}"
    r"(?:does not exist|not (?:found|supported|available|allowed))",
    re.I,
)


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _credential_message(e: Exception, status: int, profile: Profile, key: str | None, where: str) -> str:
    """A 401/403: where the key came from (masked) and what to check."""
    env_key = os.environ.get(profile.api_key_env) or None
    env_state = f"is set ({mask(env_key)})" if env_key else "is NOT set or empty"
    if key and key != env_key:
        env_state += f"; this client was given another key explicitly ({mask(key)})"
    if status == 403:
        advice = (
            f"The key is recognised but not allowed to do this: check that model '{profile.model}' is "
            "enabled for this key / project / region"
        )
    else:
        advice = (
            "Check that this key belongs to this base_url (Claude Code reads ANTHROPIC_AUTH_TOKEN, "
            "Codex reads the variable named by env_key)"
        )
    return (
        f"{status} from {where}: {_server_message(e)} The profile reads the key from ${profile.api_key_env}, which "
        f"{env_state}. {advice}; run `ept doctor --profile {profile.name}`"
    )


def _not_found_message(e: Exception, profile: Profile, where: str) -> str:
    """A 404: the model is not served there, or the base_url path is wrong for the protocol."""
    hint = (
        "OpenAI-compatible clients usually need a base_url ending in /v1 (e.g. /api/v1, not /api)"
        if profile.protocol == "openai"
        else "Anthropic-protocol base_urls stop before /v1 (e.g. https://host/api, not /api/v1): the SDK adds /v1/messages"
    )
    if _server_code(e) == "model_not_found":
        return (
            f"404 from {where}: {_sentence(_server_message(e))} The model name '{profile.model}' is not served "
            f"at this base_url: set `model` in the profile to a listed one (`ept doctor --profile {profile.name}`)"
        )
    return (
        f"404 from {where}: {_sentence(_server_message(e))} Either the base_url path is wrong — {hint} — "
        f"or the model name '{profile.model}' is not served there (`ept doctor --profile {profile.name}` lists them)"
    )


def classify(e: Exception, profile: Profile, key: str | None) -> ProviderError:
    """Turn an SDK exception (either SDK) into a ProviderError with a fix-oriented message."""
    import openai

    # An anthropic exception implies its SDK is already loaded; importing it here just to test
    # isinstance would cost seconds on the first error of an openai-only worker.
    anthropic = sys.modules.get("anthropic")
    timeouts = (openai.APITimeoutError, *((anthropic.APITimeoutError,) if anthropic else ()))
    conn_errors = (openai.APIConnectionError, *((anthropic.APIConnectionError,) if anthropic else ()))
    status = getattr(e, "status_code", None)
    where = f"{profile.base_url} (profile '{profile.name}', protocol {profile.protocol})"
    ra = None
    cls: ProviderErrorClass
    transport = None if isinstance(e, _Malformed) else _transport_failure(e, profile, where)
    if isinstance(e, _Malformed):
        cls, msg = "transient", f"malformed response from {where}: {e}"
    elif transport is not None:
        cls, msg = transport
    elif isinstance(e, timeouts):
        cls, msg = (
            "transient",
            f"timed out after {profile.timeout:g}s calling {where}; raise `timeout` in the profile if requests queue (n=16 samples can take long)",
        )
    elif isinstance(e, conn_errors):
        cls, msg = (
            "unreachable",
            f"cannot connect to {where}: {_conn_cause(e)}; check the host/port and that the server is up",
        )
    elif status in (401, 403):
        cls, msg = "credential", _credential_message(e, status, profile, key, where)
    elif status == 404:
        cls, msg = "endpoint", _not_found_message(e, profile, where)
    elif status == 429 and _server_code(e) == "insufficient_quota":
        cls = "credential"  # OpenAI signals an exhausted quota with 429: waiting will not help
        msg = (
            f"429 from {where}: {_sentence(_server_message(e))} The account behind ${profile.api_key_env} has no "
            "quota left: add credit or use another key; retrying will not help"
        )
    elif status == 429:
        ra = _retry_after(getattr(getattr(e, "response", None), "headers", None))
        wait = f" Retry-After: {ra:g}s." if ra is not None else " No Retry-After header."
        cls, msg = "rate_limit", f"429 rate limited by {where}: {_server_message(e)}{wait}"
    elif status is not None and (status >= 500 or status == 408):
        cls, msg = "transient", f"{status} server error from {where}: {_server_message(e)}"
    elif status in (400, 413) and (
        _server_code(e) == "context_length_exceeded" or _CONTEXT.search(_server_message(e))
    ):
        cls, msg = (
            "context_overflow",
            f"{status} from {where}: {_server_message(e)} The prompt plus max_tokens exceed the model's context: "
            "a loss for this strategy on this task (set max_tokens, or use a model with a longer context)",
        )
    elif status in (400, 422) and (
        _server_code(e) == "model_not_found" or _MODEL_NAME.search(_server_message(e))
    ):
        # A proxy (LiteLLM) answers an unknown model with 400 "Invalid model name": the body says it is the
        # model, so this is not the key (access_error only reclassifies `permanent`).
        cls, msg = (
            "endpoint",
            (
                f"{status} from {where}: {_sentence(_server_message(e))} The model name '{profile.model}' is not served "
                f"at this base_url: set `model` in the profile to a listed one (`ept doctor --profile {profile.name}`)"
            ),
        )
    elif status is not None:
        cls, msg = "permanent", f"{status} rejected by {where}: {_server_message(e)}"
    else:
        cls, msg = "permanent", f"{type(e).__name__} calling {where}: {e}"
    code = _server_code(e)
    return ProviderError(
        cls, scrub(msg, [key]), status=status, retry_after=ra, code=scrub(code, [key]) if code else None
    )


# ---------------------------------------------------------------- protocol adapters


def _parse_json(raw: Any) -> dict[str, Any]:
    return _parse_json_text(raw.http_response.text)


def _loads(text: str, what: str) -> Any:
    """json.loads with every way hostile JSON fails mapped to a malformed response: bad syntax, a number past
    Python's 4,300-digit int limit (ValueError), nesting past the recursion limit (RecursionError)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise _Malformed(f"{what} is not valid JSON ({e.msg})") from None
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise _Malformed(f"{what} is not usable JSON ({type(e).__name__}: {str(e)[:120]})") from None


def _parse_json_text(text: str) -> dict[str, Any]:
    data = _loads(text, "the body")
    if not isinstance(data, dict):
        raise _Malformed("body is not a JSON object")
    return data


def _normalise_usage(u: Any, anthropic: bool) -> dict[str, Any] | None:
    if not isinstance(u, dict):
        return None
    if not anthropic:
        return dict(u)
    names = {"input_tokens": "prompt_tokens", "output_tokens": "completion_tokens"}
    usage: dict[str, Any] = u
    return {names.get(k, k): v for k, v in usage.items() if v is not None}


_MAX_LABEL = 200  # characters kept of a provider's `model` or `finish_reason` (labels, not content)


def _text(v: Any, what: str) -> str | None:
    """A content field: a string or absent; anything else (42, NaN, a list) is a malformed response."""
    if v is None or isinstance(v, str):
        return v
    raise _Malformed(f"{what} is {type(v).__name__}, not a string")


def _label(v: Any, what: str) -> str | None:
    """`model` / `finish_reason`: a string (cut to _MAX_LABEL) or absent. NaN, Infinity and numbers are
    malformed: stored, they would make the write-once ledger unreadable."""
    t = _text(v, what)
    return t[:_MAX_LABEL] if t else None


def _index(v: Any, what: str) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 16:
        raise _Malformed(f"{what} is {str(v)[:40]!r}, not a small non-negative integer")
    return v


def _obj(v: Any, what: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _Malformed(f"{what} is {type(v).__name__}, not an object")
    return v


def _list(v: Any, what: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _Malformed(f"{what} is {type(v).__name__}, not a list")
    return v


def _openai_call(tc: Any) -> dict[str, Any]:
    tc = _obj(tc, "a tool call")
    fn = _obj(tc.get("function"), "a tool call's function")
    name = _text(fn.get("name"), "a tool call's name")
    if not name:
        raise _Malformed("a tool call has no function name")
    return {
        "id": _text(tc.get("id"), "a tool call's id") or "",
        "name": name,
        "arguments": _text(fn.get("arguments"), "a tool call's arguments") or "{}",
    }


def _text_or_none(x: Any) -> str | None:
    """A reasoning field as text: servers send a string (DeepSeek, vLLM, OpenRouter); anything else is dropped."""
    return x if isinstance(x, str) and x else None


def _openai_choices(data: dict[str, Any]) -> list[Choice]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _Malformed("no choices in the response")
    out: dict[int, Choice] = {}
    for c in choices:
        msg = _obj(c, "a choice").get("message")
        if not isinstance(msg, dict):
            raise _Malformed("a choice has no message")
        out[_index(c.get("index"), "a choice's index")] = Choice(
            text=_text(msg.get("content"), "content"),
            finish_reason=_label(c.get("finish_reason"), "finish_reason"),
            tool_calls=[_openai_call(tc) for tc in _list(msg.get("tool_calls"), "tool_calls")],
            reasoning=_text_or_none(msg.get("reasoning_content") or msg.get("reasoning")),
        )
    return [out[i] for i in sorted(out)]


def _sse_events(text: str) -> list[tuple[str | None, Any]]:
    """(event name, parsed data) for each event of an SSE body; `[DONE]` ends it."""
    out: list[tuple[str | None, Any]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if not data:
            continue
        payload = "\n".join(data)
        if payload == "[DONE]":
            break
        out.append((name, _loads(payload, "an SSE event")))
    return out


def _chat_delta(
    ch: Any,
    texts: dict[int, list[str]],
    finish: dict[int, str | None],
    calls: dict[int, dict[int, dict[str, Any]]],
) -> None:
    """One streamed choice delta folded into the per-choice texts, finish reasons and tool calls."""
    ch = _obj(ch, "a streamed choice")
    i = _index(ch.get("index"), "a streamed choice's index")
    delta = _obj(ch.get("delta"), "a delta")
    texts.setdefault(i, [])
    content = _text(delta.get("content"), "a delta's content")
    if content:
        texts[i].append(content)
    for tc in _list(delta.get("tool_calls"), "a delta's tool_calls"):
        tc = _obj(tc, "a streamed tool call")
        slot = calls.setdefault(i, {}).setdefault(
            _index(tc.get("index"), "a tool call's index"), {"id": "", "name": "", "arguments": ""}
        )
        fn = _obj(tc.get("function"), "a tool call's function")
        slot["id"] = _text(tc.get("id"), "a tool call's id") or slot["id"]
        slot["name"] = _text(fn.get("name"), "a tool call's name") or slot["name"]
        slot["arguments"] += _text(fn.get("arguments"), "a tool call's arguments") or ""
    reason = _label(ch.get("finish_reason"), "finish_reason")
    if reason:
        finish[i] = reason


def parse_chat_stream(text: str) -> tuple[list[Choice], dict[str, Any] | None, str | None]:
    """chat.completion.chunk events -> choices, usage (from the chunk that carries it, as sent) and model.
    Every field is type-checked as it is read: a wrong type is a malformed (retried) response."""
    texts: dict[int, list[str]] = {}
    finish: dict[int, str | None] = {}
    calls: dict[int, dict[int, dict[str, Any]]] = {}
    usage, model = None, None
    try:
        for _, ev in _sse_events(text):
            if not isinstance(ev, dict):
                raise _Malformed("an SSE event is not a JSON object")
            if isinstance(ev.get("usage"), dict):
                usage = ev["usage"]
            model = _label(ev.get("model"), "model") or model
            for ch in _list(ev.get("choices"), "choices"):
                _chat_delta(ch, texts, finish, calls)
        if not texts:
            raise _Malformed("the stream carried no choices")
    except _Malformed as e:
        e.usage = _normalise_usage(usage, False)  # billed all the same: recorded with the discarded call
        raise
    choices = [
        Choice(
            text="".join(texts[i]) or None,
            finish_reason=finish.get(i),
            tool_calls=[
                {**c, "arguments": c["arguments"] or "{}"} for _, c in sorted(calls.get(i, {}).items())
            ],
        )
        for i in sorted(texts)
    ]
    if any(not c["name"] for ch in choices for c in ch.tool_calls):
        raise _Malformed("a streamed tool call has no function name")
    return choices, _normalise_usage(usage, False), model


def _message_event(kind: Any, ev: dict[str, Any], blocks: dict[int, dict[str, Any]]) -> None:
    """content_block_start / content_block_delta folded into `blocks` (text or a tool call's partial JSON)."""
    if kind == "content_block_start":
        b = dict(_obj(ev.get("content_block"), "a content block"))
        if b.get("type") == "tool_use":
            b["partial"] = ""
        blocks[_index(ev.get("index"), "a content block's index")] = b
        return
    b = blocks.setdefault(_index(ev.get("index"), "a content block's index"), {"type": "text", "text": ""})
    d = _obj(ev.get("delta"), "a delta")
    if d.get("type") == "text_delta":
        b["text"] = (_text(b.get("text"), "a text block") or "") + (
            _text(d.get("text"), "a text delta") or ""
        )
    elif d.get("type") == "input_json_delta":
        b["partial"] = (_text(b.get("partial"), "a tool input") or "") + (
            _text(d.get("partial_json"), "a tool input delta") or ""
        )


def parse_messages_stream(text: str) -> tuple[list[Choice], dict[str, Any] | None, str | None]:
    """Anthropic message events -> one choice; usage = message_start's usage updated by message_delta's.
    A tool call whose streamed input is not complete JSON (the stream was cut) is a malformed response; a
    malformed stream carries the usage it stated (it was billed all the same)."""
    seen: dict[str, Any] = {"usage": None, "model": None, "stop": None}
    try:
        choice = _message_choice(text, seen)
    except _Malformed as e:
        e.usage = _normalise_usage(seen["usage"], True)
        raise
    return [choice], _normalise_usage(seen["usage"], True), seen["model"]


def _message_choice(text: str, seen: dict[str, Any]) -> Choice:
    """The fold of parse_messages_stream: the choice; usage, model and stop reason as seen so far in `seen`."""
    blocks: dict[int, dict[str, Any]] = {}
    for name, ev in _sse_events(text):
        if not isinstance(ev, dict):
            raise _Malformed("an SSE event is not a JSON object")
        kind = ev.get("type", name)
        if kind == "message_start":
            msg = _obj(ev.get("message"), "message_start's message")
            seen["usage"] = dict(msg["usage"]) if isinstance(msg.get("usage"), dict) else None
            seen["model"] = _label(msg.get("model"), "model")
        elif kind in ("content_block_start", "content_block_delta"):
            _message_event(kind, ev, blocks)
        elif kind == "message_delta":
            if isinstance(ev.get("usage"), dict):
                seen["usage"] = {
                    **(seen["usage"] or {}),
                    **{k: v for k, v in ev["usage"].items() if v is not None},
                }
            seen["stop"] = _obj(ev.get("delta"), "message_delta's delta").get("stop_reason") or seen["stop"]
        elif kind == "error":
            raise _Malformed(f"the stream ended with an error event: {str(ev.get('error'))[:300]}")
    for b in blocks.values():
        if b.get("type") == "tool_use" and b.get("partial"):
            b["input"] = _loads(b["partial"], "a streamed tool call's input")
    return _anthropic_choice({"content": [blocks[i] for i in sorted(blocks)], "stop_reason": seen["stop"]})


def _anthropic_choice(data: dict[str, Any]) -> Choice:
    blocks = data.get("content")
    if not isinstance(blocks, list):
        raise _Malformed("no content in the response")
    blocks = [_obj(b, "a content block") for b in blocks]
    texts = [_text(b.get("text"), "a text block") or "" for b in blocks if b.get("type") == "text"]
    calls = []
    for b in blocks:
        if b.get("type") == "tool_use":
            try:
                args = json.dumps(b.get("input", {}), allow_nan=False)
            except (ValueError, TypeError, RecursionError):
                raise _Malformed("a tool call's input is not finite JSON") from None
            calls.append(
                {
                    "id": _text(b.get("id"), "a tool call's id") or "",
                    "name": _text(b.get("name"), "a tool call's name") or "",
                    "arguments": args,
                }
            )
    stop = _label(data.get("stop_reason"), "stop_reason")  # passed through when not a known reason
    thinking = [
        b["thinking"] for b in blocks if b.get("type") == "thinking" and isinstance(b.get("thinking"), str)
    ]
    return Choice(
        text="".join(texts) if texts else None,
        finish_reason=_ANTHROPIC_FINISH.get(stop, stop) if stop else None,
        tool_calls=calls,
        reasoning="".join(thinking) or None,
    )


def to_anthropic(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[str | None, list[dict[str, Any]], list[dict[str, Any]] | None]:
    """OpenAI-style messages/tools -> Anthropic (system, messages, tools). Minimal: text, tool calls, tool results."""
    system = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system") or None
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m.get("tool_call_id", ""),
                "content": str(m.get("content") or ""),
            }
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)  # consecutive tool results share one user turn
            else:
                out.append({"role": "user", "content": [block]})
            continue
        if role == "assistant" and m.get("tool_calls"):
            blocks: list[dict[str, Any]] = (
                [{"type": "text", "text": m["content"]}] if m.get("content") else []
            )
            for tc in m["tool_calls"]:
                fn = tc.get("function", tc)
                args = fn.get("arguments") or "{}"
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": tc.get("id", ""),
                        "name": fn.get("name", ""),
                        "input": json.loads(args) if isinstance(args, str) else args,
                    }
                )
            out.append({"role": "assistant", "content": blocks})
            continue
        out.append({"role": role, "content": m.get("content") or ""})
    a_tools = None
    if tools:
        a_tools = [
            {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "input_schema": t["function"].get("parameters") or {"type": "object", "properties": {}},
            }
            for t in tools
        ]
    return system, out, a_tools


def _scrubbed(choices: list[Choice], model: str | None, key: str | None) -> tuple[list[Choice], str | None]:
    """What a provider echoed of the key, masked before anything stores it: every secret pattern in the labels
    (`model`, `finish_reason`); only the key itself in the text and tool calls, so that a candidate's own
    code (say, a "Bearer …" header in an answer) is graded as written."""
    keys = [key] if key and len(key) >= 8 else []

    def exact(t: str) -> str:
        return t.replace(key, mask(key)) if keys and key and key in t else t

    out = [
        Choice(
            text=exact(c.text) if c.text else c.text,
            finish_reason=scrub(c.finish_reason, keys) if c.finish_reason else c.finish_reason,
            tool_calls=[
                {k: exact(v) if isinstance(v, str) else v for k, v in tc.items()} for tc in c.tool_calls
            ],
        )
        for c in choices
    ]
    return out, scrub(model, keys) if model else model


def _sdk_http(sdk: Any, http: Any) -> dict[str, Any]:
    """{"http_client": the bounded client} for an SDK that sends through httpx2 (tested: openai 3.57, anthropic
    2.14); an older SDK (plain httpx) keeps its own client — without the total deadline and the byte cap,
    which a warning says once."""
    if hasattr(sys.modules.get(f"{sdk.__name__}._base_client"), "httpx2"):
        return {"http_client": http}
    log.warning(
        "%s %s does not send through httpx2: no total deadline or byte cap per request; upgrade it",
        sdk.__name__,
        getattr(sdk, "__version__", "?"),
    )
    http.close()
    return {}


def _estimate_tokens(messages: list[dict[str, Any]], max_tokens: int | None, n: int) -> int:
    chars = sum(len(json.dumps(m.get("content") or "")) for m in messages)
    return chars // 4 + 4 * len(messages) + (max_tokens or 512) * n


# ---------------------------------------------------------------- client


class ProviderClient:
    """Chat calls against one profile. Thread-safe (the SDK clients are); share one per worker thread pool."""

    def __init__(
        self,
        profile: Profile,
        *,
        api_key: str | None = None,
        rate_limiter: RateLimiter | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        retry_after_cap: float = 60.0,
    ) -> None:
        self.profile = profile
        self.protocol = profile.protocol
        self._key = api_key if api_key is not None else profile.api_key()
        self.rate_limiter = rate_limiter
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.retry_after_cap = retry_after_cap
        self._sdk: Any = None
        self._sdk_lock = threading.Lock()
        # Shared by every thread of this client: whether any request got a 2xx yet (a 4xx before that is an
        # access problem, see access_error), and the circuit over failed connects.
        self._reached = False
        self._unreachable = 0
        self._last_probe = 0.0
        self._state_lock = threading.Lock()
        # Set by the local executor on Ctrl-C/SIGTERM: no more retries or backoff waits, so in-flight jobs end
        # after their current request instead of riding out a 429 storm.
        self.stopping = threading.Event()

    def __repr__(self) -> str:
        return f"ProviderClient(profile={self.profile.name!r}, key={mask(self._key)})"

    @property
    def supports_n(self) -> bool:
        """Whether one request may ask for n choices: the profile says so and the protocol has `n` (the
        Anthropic protocol has none, so its samples are always separate calls)."""
        return self.profile.supports_n and self.profile.protocol == "openai"

    @property
    def sdk(self) -> Any:
        with self._sdk_lock:  # one SDK client (one connection pool) per ProviderClient, even across threads
            if self._sdk is None:
                self._sdk = self._make_sdk()
        return self._sdk

    def _make_sdk(self) -> Any:
        p = self.profile
        from elo_per_token.egress.bounded import bounded_http_client

        # Every request through a transport with a total deadline (the profile's timeout) and a byte cap.
        http: Any = bounded_http_client(p.timeout, int(p.max_response_mb * 2**20))
        if p.protocol == "anthropic":
            import anthropic

            return anthropic.Anthropic(
                **_sdk_http(anthropic, http),
                api_key=self._key or "",
                base_url=p.base_url,
                timeout=p.timeout,
                max_retries=0,
                default_headers=p.headers or None,
            )
        import openai

        return openai.OpenAI(
            **_sdk_http(openai, http),
            api_key=self._key or "",
            base_url=p.base_url,
            timeout=p.timeout,
            max_retries=0,
            default_headers=p.headers or None,
        )

    def _require_key(self) -> None:
        if not self._key:
            p = self.profile
            raise ProviderError(
                "credential",
                f"no API key: profile '{p.name}' reads ${p.api_key_env}, which is NOT set "
                f"or empty; export {p.api_key_env}=... (or inject it as a CI secret)",
                attempts=0,
            )

    def _backoff(self, attempt: int) -> float:
        return backoff(attempt, self.backoff_base, self.backoff_cap)

    def circuit_open(self) -> bool:
        return self._unreachable >= UNREACHABLE_CIRCUIT

    def _circuit_check(self, attempts: int) -> None:
        """Refuse to try while the circuit is open, except for one probe per CIRCUIT_PROBE_S."""
        with self._state_lock:
            if not self.circuit_open():
                return
            now = time.monotonic()
            if now - self._last_probe >= CIRCUIT_PROBE_S:
                self._last_probe = now
                return
            n = self._unreachable
        p = self.profile
        raise ProviderError(
            "unreachable",
            f"circuit open: the last {n} attempts to connect to {p.base_url} (profile '{p.name}') all failed "
            "(connection refused or name not resolved); not trying again until a probe connects — check the "
            f"host/port and that the server is up (`ept doctor --profile {p.name}`)",
            attempts=attempts,
        )

    def _note(self, err: ProviderError | None) -> None:
        with self._state_lock:
            if err is None:
                self._reached, self._unreachable = True, 0
            elif err.error_class == "unreachable":
                self._unreachable += 1
            elif err.status is not None:
                self._unreachable = 0  # the server answered: it is reachable

    def _with_retries(
        self,
        fn: Callable[[], T],
        est_tokens: int,
        discarded: list[Discarded] | None = None,
        *,
        access_check: bool = False,
    ) -> tuple[T, int]:
        """Run fn() with classification and retries; returns (result, attempts). Malformed 2xx responses that
        were retried are appended to `discarded`; the last one's usage rides on the raised error (`.usage`).
        With access_check every 4xx is an access problem (GET /models: no request body could be at fault)."""
        self._require_key()
        attempts = 0
        while True:
            attempts += 1
            self._circuit_check(attempts)
            if self.rate_limiter is not None:
                self.rate_limiter.acquire(est_tokens)
            try:
                out = fn()
            except ProviderError:
                raise
            except Exception as e:
                err = classify(e, self.profile, self._key)
                malformed = e if isinstance(e, _Malformed) else None
            else:
                self._note(None)
                return out, attempts
            err.attempts = attempts
            self._note(err)
            if (
                err.error_class == "permanent"
                and err.status is not None
                and 400 <= err.status < 500
                and (access_check or not self._reached)
            ):
                denied = access_error(
                    err,
                    self.profile,
                    self._key,
                    "GET /models" if access_check else "the profile's first request",
                )
                denied.discarded = list(discarded or [])
                raise denied
            if (
                err.error_class not in RETRYABLE
                or attempts > self.profile.max_retries
                or self.stopping.is_set()
            ):
                if malformed is not None:
                    err.usage, err.usage_invalid = check_usage(malformed.usage)
                err.discarded = list(discarded or [])
                raise err
            if malformed is not None and discarded is not None:
                discarded.append(_discarded(malformed.usage, err.message, attempts))
            if err.error_class == "rate_limit" and err.retry_after is not None:
                wait = min(err.retry_after, self.retry_after_cap)
            else:
                wait = self._backoff(attempts)
            log.info(
                "retrying %s after %.2fs (attempt %d): %s", self.profile.name, wait, attempts, err.message
            )
            if self.stopping.wait(wait):  # stopped while waiting: this attempt's error is the call's result
                err.discarded = list(discarded or [])
                raise err

    def _fit_context(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, max_tokens: int | None
    ) -> int | None:
        """With a known context window (profile `context_length`): a prompt that cannot fit is refused before it
        is sent (class context_overflow, nothing billed), and max_tokens is lowered to what the window leaves.
        The prompt size is an estimate (~4 characters per token, +10 %), used only for this guard — token
        accounting always uses the server's usage."""
        limit = self.profile.context_length
        if not limit:
            return max_tokens
        text = json.dumps([m.get("content") for m in messages]) + (json.dumps(tools) if tools else "")
        prompt = int(len(text) / 4 * 1.1) + 4 * len(messages)
        room = limit - prompt
        if room < 16:
            raise ProviderError(
                "context_overflow",
                f"the prompt (about {prompt} tokens) does not fit profile '{self.profile.name}''s context_length "
                f"({limit}): not sent. A loss for this strategy on this task; use a model with a longer context",
                attempts=0,
            )
        return room if max_tokens is None or max_tokens > room else max_tokens

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        temperature: float = 0.0,
        n: int = 1,
        seed: int | None = None,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        meta: dict[str, str] | None = None,
        gen: dict[str, Any] | None = None,
    ) -> ChatResponse:
        """One chat call (n choices when the protocol allows); raises ProviderError after retries.

        `gen` holds generation settings (contracts.generation: max_tokens, top_p, stop, reasoning_effort,
        thinking_budget, extra_body); each protocol gets its own field names. The Anthropic protocol has
        no `n`: callers that need n samples must loop (n > 1 is refused here).
        """
        gen = gen or {}
        if max_tokens is None:
            max_tokens = gen.get("max_tokens")
        if n < 1:
            raise ValueError("n must be >= 1")
        if self.protocol == "anthropic" and n > 1:
            raise ProviderError(
                "permanent",
                f"profile '{self.profile.name}' speaks the Anthropic protocol, which has no "
                "`n`: make n separate calls instead",
                attempts=0,
            )
        max_tokens = self._fit_context(messages, tools, max_tokens)
        headers = {f"X-EPT-{k}": str(v) for k, v in (meta or {}).items()}
        est = _estimate_tokens(messages, max_tokens, n)
        t0 = time.perf_counter()
        if self.protocol == "anthropic":
            call, max_tokens = self._messages_call(
                messages, tools, temperature, seed, max_tokens, gen, headers
            )
        else:
            call = self._chat_call(messages, tools, temperature, n, seed, max_tokens, gen, headers)
        discarded: list[Discarded] = []
        (choices, model, raw_usage), attempts = self._with_retries(call, est, discarded)
        choices, model = _scrubbed(choices, model, self._key)
        # Checked before anything stores or sums it: invalid usage becomes None plus a reason.
        usage, usage_invalid = check_usage(raw_usage)
        if self.rate_limiter is not None:
            used = (
                (usage or {}).get("prompt_tokens", 0) + (usage or {}).get("completion_tokens", 0)
                if usage
                else est
            )
            self.rate_limiter.record(int(used))
        return ChatResponse(
            choices=choices,
            usage=usage,
            model=model,
            latency_s=time.perf_counter() - t0,
            attempts=attempts,
            n_requested=n,
            n_returned=len(choices),
            usage_invalid=usage_invalid,
            discarded=discarded,
            max_tokens=max_tokens,
        )

    def _messages_call(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, temperature: float,
        seed: int | None, max_tokens: int | None, gen: dict[str, Any], headers: dict[str, str],
    ) -> tuple[Callable[[], tuple[list[Choice], str | None, dict[str, Any] | None]], int | None]:  # fmt: skip
        """The Anthropic Messages request (its own field names for the generation settings) as a call to
        retry, and the max_tokens it asks for (extended thinking raises it)."""
        if seed is not None:  # the messages API has no seed; the simulator reads this header
            headers["X-EPT-Seed"] = str(seed)
        system, a_msgs, a_tools = to_anthropic(messages, tools)
        # temperature goes in extra_body: recent anthropic SDKs dropped the typed parameter, the API keeps it.
        if gen.get("reasoning_effort") is not None:
            raise ProviderError(
                "permanent",
                f"profile '{self.profile.name}' speaks the Anthropic protocol, which has no reasoning_effort: "
                "set thinking_budget (thinking.budget_tokens) instead",
                attempts=0,
            )
        extra: dict[str, Any] = {"temperature": temperature}
        budget = gen.get("thinking_budget")
        if budget:
            # Extended thinking: budget_tokens counts inside max_tokens, and the API accepts no temperature.
            extra = {"thinking": {"type": "enabled", "budget_tokens": budget}}
            max_tokens = max_tokens or budget + ANTHROPIC_DEFAULT_MAX_TOKENS
        if gen.get("top_p") is not None:
            extra["top_p"] = gen["top_p"]
        if gen.get("stop"):
            extra["stop_sequences"] = list(gen["stop"])
        kwargs: dict[str, Any] = {
            "model": self.profile.model,
            "messages": a_msgs,
            "max_tokens": max_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS,
            "extra_headers": headers,
            "extra_body": {**extra, **(gen.get("extra_body") or {})},
        }
        if system:
            kwargs["system"] = system
        if a_tools:
            kwargs["tools"] = a_tools

        def call() -> tuple[list[Choice], str | None, dict[str, Any] | None]:
            if self.profile.stream:
                body = {k: v for k, v in kwargs.items() if k not in ("extra_headers", "extra_body")}
                body.update(kwargs["extra_body"], stream=True)
                text = self.sdk.post("/v1/messages", body=body, cast_to=str, options={"headers": headers})
                choices, usage, model = parse_messages_stream(text)
                return choices, model, usage
            data = _parse_json(self.sdk.messages.with_raw_response.create(**kwargs))
            return (*_choices_or_malformed(data, True), _normalise_usage(data.get("usage"), True))

        return call, max_tokens

    def _chat_call(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, temperature: float, n: int,
        seed: int | None, max_tokens: int | None, gen: dict[str, Any], headers: dict[str, str],
    ) -> Callable[[], tuple[list[Choice], str | None, dict[str, Any] | None]]:  # fmt: skip
        """The OpenAI-compatible chat request as a call to retry (the SDK's raw route, JSON or SSE)."""
        body: dict[str, Any] = {"model": self.profile.model, "messages": messages, "temperature": temperature}
        if n > 1:
            body["n"] = n
        if seed is not None:
            body["seed"] = seed
        if tools:
            body["tools"] = tools
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        for k in ("top_p", "stop", "reasoning_effort"):
            if gen.get(k) is not None:
                body[k] = gen[k]
        if gen.get("thinking_budget"):  # OpenAI-compatible gateways (LiteLLM) pass this to Anthropic models
            body["thinking"] = {"type": "enabled", "budget_tokens": gen["thinking_budget"]}
        body.update(gen.get("extra_body") or {})
        if self.profile.stream:  # usage arrives in a last chunk only when asked for
            body.update(stream=True, stream_options={"include_usage": True})

        def call() -> tuple[list[Choice], str | None, dict[str, Any] | None]:
            # The SDK's documented raw route (`client.post(path, body=…, cast_to=…)`): same auth, timeouts
            # and error classes as `chat.completions.create`, without re-walking our plain-dict params through
            # its TypedDict transform and pydantic models — 40% of the client CPU per call, measured.
            text = self.sdk.post("/chat/completions", body=body, options={"headers": headers}, cast_to=str)
            if self.profile.stream:
                choices, usage, model = parse_chat_stream(text)
                return choices, model, usage
            data = _parse_json_text(text)
            return (*_choices_or_malformed(data, False), _normalise_usage(data.get("usage"), False))

        return call

    def list_models(self) -> list[str]:
        """Model ids the server lists (GET /models); raises ProviderError (same classes and retries as chat)."""

        def call() -> list[str]:
            raw = self.sdk.models.with_raw_response.list()
            data = _parse_json(raw)
            items = data.get("data")
            if not isinstance(items, list):
                raise _Malformed("no 'data' list in the models response")
            return [str(m.get("id")) for m in items if isinstance(m, dict) and m.get("id")]

        models, _ = self._with_retries(call, 0, access_check=True)
        return models
