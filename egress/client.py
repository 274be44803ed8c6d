"""The provider client: one chat call to an OpenAI-compatible or Anthropic endpoint, with our own retries.

It wires the parts together: the protocol adapters (egress.proto_chat, egress.proto_messages) build each
request and parse its reply, egress.retry runs the attempts (its circuit breaker shared by every thread of
the client), egress.errors classifies each failure once, with an actionable message.

`usage` is returned as the server sent it (never recomputed); for the Anthropic protocol only the key
names change (input_tokens -> prompt_tokens, output_tokens -> completion_tokens). Keys are scrubbed
from every message.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from elo_per_token.contracts.secrets import mask, secret_set
from elo_per_token.contracts.usage import check_usage
from elo_per_token.egress.errors import Discarded, Malformed, ProviderError
from elo_per_token.egress.outage import Outage, SharedReach
from elo_per_token.egress.profiles import Profile
from elo_per_token.egress.proto_chat import chat_body, send_chat
from elo_per_token.egress.proto_common import Choice, Reply, parse_json
from elo_per_token.egress.proto_messages import messages_request, send_messages
from elo_per_token.egress.retry import Circuit, RateLimiter, Retrier, RetryPolicy

log = logging.getLogger("ept.provider")


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
    # The call's upper bound in tokens (usage_bound): what it counts toward a spending cap when usage is None.
    usage_bound: int | None = None


def _scrubbed(choices: list[Choice], model: str | None, key: str | None) -> tuple[list[Choice], str | None]:
    """What a provider echoed of a secret, masked before anything stores it: in the labels (`model`,
    `finish_reason`) every secret pattern too (bearer tokens, URL passwords); in the text, the reasoning and
    the tool calls only the secrets the process knows (contracts.secrets: the key, key-like environment
    values, URL passwords, in any encoding), so that a candidate's own code (say, a "Bearer …" header in an
    answer) is graded as written. The reasoning is kept: transcripts show it."""
    known = secret_set([key])

    def text(t: str | None) -> str | None:
        return known.mask_values(t) if t else t

    out = [
        Choice(
            text=text(c.text),
            finish_reason=known.scrub(c.finish_reason) if c.finish_reason else c.finish_reason,
            tool_calls=[
                {k: text(v) if isinstance(v, str) else v for k, v in tc.items()} for tc in c.tool_calls
            ],
            reasoning=text(c.reasoning),
        )
        for c in choices
    ]
    return out, known.scrub(model) if model else model


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


# Completion tokens per choice assumed by usage_bound when a call sends no max_tokens and the profile has no
# context_length: the server's own limit is unknown (set max_tokens for a bound that holds by construction).
UNLIMITED_COMPLETION_BOUND = 16_384


def _prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """The prompt's size in tokens, estimated: ~4 characters per token, +10 %, plus 4 per message."""
    text = json.dumps([m.get("content") for m in messages]) + (json.dumps(tools) if tools else "")
    return int(len(text) / 4 * 1.1) + 4 * len(messages)


def usage_bound(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    max_tokens: int | None,
    n: int,
    context_length: int | None = None,
) -> int:
    """What a call counts toward a spending cap when its usage is missing or invalid: the prompt estimate plus
    max_tokens for each of the n choices (the context window, or UNLIMITED_COMPLETION_BOUND, without one)."""
    per_choice = max_tokens or context_length or UNLIMITED_COMPLETION_BOUND
    return _prompt_tokens(messages, tools) + per_choice * n


class ProviderClient:
    """Chat calls against one profile. Thread-safe (the SDK clients are); share one per worker thread pool."""

    def __init__(
        self,
        profile: Profile,
        *,
        api_key: str | None = None,
        rate_limiter: RateLimiter | None = None,
        shared_reach: SharedReach | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        retry_after_cap: float = 60.0,
    ) -> None:
        self.profile = profile
        self.protocol = profile.protocol
        self._key = api_key if api_key is not None else profile.api_key()
        self.rate_limiter = rate_limiter
        self.retry_policy = RetryPolicy(backoff_base, backoff_cap, retry_after_cap)
        self._sdk: Any = None
        self._sdk_lock = threading.Lock()
        # Shared by every thread of this client: whether any request got a 2xx yet, and failed connects.
        self.circuit = Circuit()
        # Set by the local executor on Ctrl-C/SIGTERM: no more retries or backoff waits, so in-flight jobs end
        # after their current request instead of riding out a 429 storm.
        self.stopping = threading.Event()
        # Shared too: an endpoint that answered before and stops answering is waited out (egress.outage).
        self.outage = Outage(profile.patience, profile.name, shared_reach)
        self._retrier = Retrier(
            profile,
            self._key,
            self.circuit,
            self.retry_policy,
            self.stopping,
            rate_limiter,
            outage=self.outage,
        )

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
        http: Any = bounded_http_client(p.timeout, int(p.max_response_mb * 2**20), self._observe)
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

    def _observe(self, headers: Any) -> None:
        """Every response's headers to the rate limiter (x-ratelimit-*): never fails the request."""
        if self.rate_limiter is not None:
            try:
                self.rate_limiter.observe(headers)
            except Exception as e:  # a header the limiter cannot read is not the request's failure
                log.debug("x-ratelimit headers not read: %s", e)

    def _require_key(self) -> None:
        """Refuse a call before its first attempt (and before the SDK client is made) when there is no key."""
        if not self._key:
            p = self.profile
            raise ProviderError(
                "credential",
                f"no API key: profile '{p.name}' reads ${p.api_key_env}, which is NOT set "
                f"or empty; export {p.api_key_env}=... (or inject it as a CI secret)",
                attempts=0,
            )

    def weather(self) -> dict[str, Any]:
        """What rate limits and retries cost this client so far: 429s answered (each paused every sender
        once), shared pauses, time blocked by the limiter (summed over threads), retries by class and the
        time spent backing off before them (summed over threads), and the outages waited out (count, and
        their length in wall-clock seconds)."""
        lim = getattr(self.rate_limiter, "stats", None)
        rs = self._retrier.stats
        with rs.lock:
            retries, retry_wait = dict(rs.retries), rs.wait_s
        return {
            "rate_limited": int(getattr(lim, "rate_limited", 0) or retries.get("rate_limit", 0)),
            "pauses": int(getattr(lim, "pauses", 0)),
            "limiter_wait_s": float(getattr(lim, "waited_s", 0.0)),
            "retries": retries,
            "retry_wait_s": retry_wait,
            "outages": self.outage.outages,
            "outage_s": self.outage.waited_s(),
        }

    def circuit_open(self) -> bool:
        """Whether the circuit over failed connects is open (egress.retry)."""
        return self.circuit.is_open()

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
        prompt = _prompt_tokens(messages, tools)
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
        self._require_key()
        bound = usage_bound(messages, tools, max_tokens, n, self.profile.context_length)
        try:
            (choices, model, raw_usage), attempts = self._retrier.run(call, est, discarded)
        except ProviderError as e:
            e.usage_bound = bound
            raise
        choices, model = _scrubbed(choices, model, self._key)
        # Checked before anything stores or sums it: invalid usage becomes None plus a reason.
        usage, usage_invalid = check_usage(raw_usage)
        if self.rate_limiter is not None:
            used = (
                (usage or {}).get("prompt_tokens", 0) + (usage or {}).get("completion_tokens", 0)
                if usage
                else est
            )
            self.rate_limiter.record(int(used), est)
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
            usage_bound=bound,
        )

    def _messages_call(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        temperature: float,
        seed: int | None,
        max_tokens: int | None,
        gen: dict[str, Any],
        headers: dict[str, str],
    ) -> tuple[Callable[[], Reply], int | None]:
        """The Anthropic Messages request as a call to retry, and the max_tokens it asks for."""
        kwargs, max_tokens = messages_request(
            self.profile, messages, tools, temperature, seed, max_tokens, gen, headers
        )
        # self.sdk inside the call: the SDK client is made on the first attempt, after the key check.
        return lambda: send_messages(self.sdk, kwargs, headers, self.profile.stream), max_tokens

    def _chat_call(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        temperature: float,
        n: int,
        seed: int | None,
        max_tokens: int | None,
        gen: dict[str, Any],
        headers: dict[str, str],
    ) -> Callable[[], Reply]:
        """The OpenAI-compatible chat request as a call to retry (the SDK's raw route, JSON or SSE)."""
        body = chat_body(self.profile, messages, tools, temperature, n, seed, max_tokens, gen)
        return lambda: send_chat(self.sdk, body, headers, self.profile.stream)

    def list_models(self) -> list[str]:
        """Model ids the server lists (GET /models); raises ProviderError (same classes and retries as chat)."""

        def call() -> list[str]:
            raw = self.sdk.models.with_raw_response.list()
            data = parse_json(raw)
            items = data.get("data")
            if not isinstance(items, list):
                raise Malformed("no 'data' list in the models response")
            return [str(m.get("id")) for m in items if isinstance(m, dict) and m.get("id")]

        self._require_key()
        models, _ = self._retrier.run(call, 0, access_check=True)
        return models
