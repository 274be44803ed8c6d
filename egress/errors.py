"""Provider errors and their classification: every SDK or transport failure becomes one ProviderError.

The SDKs run with max_retries=0 (egress.retry retries), so every failure is classified once, with an actionable
message:

    credential        401/403; any 4xx on GET /models   no retry   names the env variable the profile reads
                      or on a profile's first request            and whether it is set (a proxy such as
                      (before any request succeeded)             LiteLLM answers a bad key with 400)
    endpoint          404                                no retry   base_url (/api vs /api/v1) or model name
    rate_limit        429                                retry      waits Retry-After (capped), else backoff
    unreachable       connection refused, DNS failure    retry      backoff; after UNREACHABLE_CIRCUIT failed
                                                                    connects in a row the circuit opens: no
                                                                    more attempts (one probe per
                                                                    CIRCUIT_PROBE_S) until one connects. Once
                                                                    the endpoint answered: an outage, waited
                                                                    out up to the profile's patience
                                                                    (egress.outage), as are 5xx
    transient         5xx, timeouts, malformed bodies,   retry      exponential backoff with full jitter
                      streams cut before a finish reason
    context_overflow  400 context length exceeded       no retry   prompt + max_tokens above the model's window:
                                                                    a property of the strategy and the task
    permanent         other 4xx                          no retry   a 4xx naming a request field (`param`,
                                                                    unsupported_parameter) says which field
                                                                    and how to drop it; never `credential`

Keys are scrubbed from every message; the key variable's value is only ever shown masked.
"""

from __future__ import annotations

import email.utils
import re
import sys
import time
from typing import Any, TypedDict

from elo_per_token.contracts.errors import PROVIDER_ERROR_CLASSES, ProviderErrorClass
from elo_per_token.contracts.secrets import mask, scrub
from elo_per_token.contracts.usage import check_usage
from elo_per_token.egress.profiles import Profile

_CONTEXT = re.compile(
    r"context length|context_length|context window|prompt is too long|too many tokens", re.I
)


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
        param: str | None = None,
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
        # The request field the server's error names (OpenAI's `param`): the request, not the key, is at fault.
        self.param = param
        self.message = message
        self.retry_after = retry_after
        self.attempts = attempts
        # Set by the client when it gives up (JobContext records them): what the failed attempt itself was billed
        # (a malformed 2xx's usage, checked) and the billed responses discarded before it.
        self.usage: dict[str, Any] | None = None
        self.usage_invalid: str | None = None
        self.discarded: list[Discarded] = []
        # The call's upper bound in tokens (egress.client.usage_bound): what a billed attempt without usable
        # usage counts toward a spending cap.
        self.usage_bound: int | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its fields (Celery's result backend, multiprocessing): Exception's default pickling
        calls __init__(message) alone, which fails without the error class."""
        kwargs = {
            "status": self.status,
            "retry_after": self.retry_after,
            "attempts": self.attempts,
            "code": self.code,
            "param": self.param,
        }
        state = {
            "usage": self.usage,
            "usage_invalid": self.usage_invalid,
            "discarded": self.discarded,
            "usage_bound": self.usage_bound,
        }
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


class Malformed(Exception):
    """A 2xx response whose body is not the JSON we need. `usage` is what the body said it cost, if anything."""

    usage: dict[str, Any] | None = None


class Incomplete(Malformed):
    """A stream that ended cleanly (`[DONE]`, message_stop) before the reply did: no choice got a finish or stop
    reason. The generation was interrupted (llama-cpp-python closes an aborted stream this way), so its text is
    a fragment: retried like a malformed body, its partial usage kept as a call of its own."""


def discarded_call(usage: Any, message: str, attempt: int) -> Discarded:
    u, bad = check_usage(usage)
    return {"usage": u, "usage_invalid": bad, "message": message, "attempt": attempt}


def parse_retry_after(headers: Any) -> float | None:
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


_UNSUPPORTED = re.compile(
    r"unsupported parameter|unrecognized (?:request )?(?:argument|parameter|field)|"
    r"(?:unknown|unexpected|extra) (?:parameter|field|argument|inputs?)|not (?:supported|permitted|allowed)",
    re.I,
)
_QUOTED_FIELD = re.compile(r"""(?:parameter|argument|field)s?:?\s*['"`]([A-Za-z_][\w.]{0,80})['"`]""", re.I)


def _server_param(e: Exception) -> tuple[str | None, bool]:
    """(the request field a 4xx body names, whether it says the server does not take that field at all).
    OpenAI names it in `param` (code `unsupported_parameter`); others only in the message ("Unsupported
    parameter: 'reasoning_effort'", "reasoning_effort: Extra inputs are not permitted")."""
    body = getattr(e, "body", None)
    err = body.get("error", body) if isinstance(body, dict) else None
    err = err if isinstance(err, dict) else {}
    message, code = _server_message(e), str(err.get("code") or "")
    param = err.get("param") if isinstance(err.get("param"), str) and err.get("param") else None
    if param is None and (m := _QUOTED_FIELD.search(message)):
        param = m.group(1)
    if param is None and (m := re.match(r"\s*([A-Za-z_]\w{0,80}): Extra inputs", message)):
        param = m.group(1)
    unsupported = code in ("unsupported_parameter", "unsupported_value") or bool(_UNSUPPORTED.search(message))
    return (param[:100] if param else None), unsupported and param is not None


def _param_failure(e: Exception, status: int, where: str) -> tuple[str, str] | None:
    """(the field, the message) of a 4xx naming a request field: which field, and how to get a sweep past
    it; None when the body names none."""
    param, unsupported = _server_param(e)
    if param is None:
        return None
    if not unsupported:
        return param, f"{status} rejected by {where}: {_server_message(e)} (the request field '{param}')"
    advice = (
        "drop the effort arms or pass it via extra_body"
        if param == "reasoning_effort"
        else f"drop `{param}` from the arms' generation settings or pass it via extra_body"
    )
    return (
        param,
        f"this server does not accept {param}: {advice} ({status} from {where}: {_server_message(e)})",
    )


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
    400 ("No connected db"). Reclassified as `credential`, naming the key variable. Never called for an error
    that names a request field (`err.param`): that is the request's fault whatever came before."""
    env_key = profile.env_key()
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

    from elo_per_token.egress.bounded import CrossHostRedirect, DeadlineExceeded, ResponseTooLarge

    chain = _chain(e)
    hop = next((c for c in chain if isinstance(c, CrossHostRedirect)), None)
    if hop is not None:  # the endpoint moved: a configuration problem, not something a retry fixes
        return "endpoint", (
            f"{where} answered with a {hop} — not followed, so the prompt and the key go only to the configured "
            "endpoint; set the profile's base_url to the address the server should be called at"
        )
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
    env_key = profile.env_key()
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
    ra, param = None, None
    cls: ProviderErrorClass
    transport = None if isinstance(e, Malformed) else _transport_failure(e, profile, where)
    if isinstance(e, Malformed):
        kind = "incomplete reply" if isinstance(e, Incomplete) else "malformed response"
        cls, msg = "transient", f"{kind} from {where}: {e}"
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
        ra = parse_retry_after(getattr(getattr(e, "response", None), "headers", None))
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
    elif status in (400, 422) and (named := _param_failure(e, status, where)) is not None:
        cls, (param, msg) = "permanent", named
    elif status is not None:
        cls, msg = "permanent", f"{status} rejected by {where}: {_server_message(e)}"
    else:
        cls, msg = "permanent", f"{type(e).__name__} calling {where}: {e}"
    code = _server_code(e)
    return ProviderError(
        cls,
        scrub(msg, [key]),
        status=status,
        retry_after=ra,
        code=scrub(code, [key]) if code else None,
        param=scrub(param, [key]) if param else None,
    )
