"""Simulator configuration: a TOML file at start, and JSON merged in at runtime (POST /_sim/config).

Faults are drawn deterministically from (seed, request counter): request number k (counting every
completion request since start or the last reset, in arrival order) gets the same fault in every run
with the same seed. Under concurrency the arrival order, and so which request gets a fault, can vary;
the fault *rates* do not. For exact sequences use `script`: a list of faults consumed one per
completion request before the rates apply, e.g. ["429", "500", "ok"].
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from annotated_types import Ge, Interval, MinLen

from elo_per_token.common.tomlpos import toml_line
from elo_per_token.contracts.errors import InputError

# "403", "400", "quota" (429 insufficient_quota), "proxy_400" (LiteLLM's "No connected db" for a key it cannot
# check) and "context_length" (400 context_length_exceeded) exist for scripts only (no rate).
# "403", "400" and "quota" (429 insufficient_quota) exist for scripts only (no rate), as do the hostile-provider
# faults: "usage_negative", "usage_nan", "usage_float", "usage_huge" (a normal reply whose usage is broken that
# way) and "no_choices" (a billed 200 with usage but no choices, which the client must discard and retry).
# "stream_cut": a streamed reply that stops halfway and still ends cleanly (`data: [DONE]`, usage sent, no
# finish_reason / stop_reason) — what llama-cpp-python does when a generation is interrupted; a plain
# (not streamed) request drawing it is answered normally.
Fault = Literal[
    "429",
    "500",
    "hang",
    "malformed_json",
    "missing_usage",
    "fewer_choices",
    "403",
    "400",
    "quota",
    "proxy_400",
    "context_length",
    "usage_negative",
    "usage_nan",
    "usage_float",
    "usage_huge",
    "no_choices",
    "stream_cut",
    "ok",
]
FAULTS: tuple[Fault, ...] = get_args(Fault)
LatencyDist = Literal["uniform", "normal", "exponential"]
LATENCY_DISTS: tuple[LatencyDist, ...] = get_args(LatencyDist)
PromptCacheMode = Literal["seen", "warm"]
PROMPT_CACHE_MODES: tuple[PromptCacheMode, ...] = get_args(PromptCacheMode)
DEFAULT_MODELS = ("ept-sim-1", "ept-sim-large")


Rate = Annotated[float, Interval(ge=0, le=1)]
Seconds = Annotated[float, Ge(0)]
_RATE = {"must": "a number in 0..1"}
_NONNEG = {"must": "a non-negative number"}


@dataclass
class SimConfig:
    """The simulator's settings: each field's type and bounds are checked by `apply_updates` (common.checked),
    and `metadata["must"]` is the rule in the words an error shows."""

    seed: int = field(default=0, metadata={"must": "an integer"})
    # mean added latency per completion request
    latency_ms: Seconds = field(default=0.0, metadata=_NONNEG)
    # uniform: +-jitter; normal: sd; exponential: ignored (sd = mean)
    latency_jitter_ms: Seconds = field(default=0.0, metadata=_NONNEG)
    latency_dist: LatencyDist = field(
        default="uniform", metadata={"must": f"one of {', '.join(get_args(LatencyDist))}"}
    )
    # when set, any other key gets 401
    api_key: Annotated[str, MinLen(1)] | None = field(
        default=None, metadata={"must": "a non-empty string or null", "secret": True}
    )
    # How a wrong key is refused: "openai" (401 invalid_api_key) or "litellm" (400 "No connected db", what
    # LiteLLM's proxy answers when it cannot check keys), on every route including GET /models.
    auth_style: Literal["openai", "litellm"] = field(default="openai", metadata={"must": "openai or litellm"})
    models: Annotated[list[str], MinLen(1)] = field(
        default_factory=lambda: list(DEFAULT_MODELS), metadata={"must": "a non-empty list of strings"}
    )
    # when true, a model not in `models` gets 404 model_not_found
    strict_models: bool = field(default=False, metadata={"must": "true or false"})
    # false: GET /models answers 404, like a gateway without a model list
    serve_models: bool = field(default=True, metadata={"must": "true or false"})
    rate_429: Rate = field(default=0.0, metadata=_RATE)
    # seconds, sent as Retry-After (rounded up) and retry-after-ms
    retry_after: Seconds = field(default=1.0, metadata=_NONNEG)
    rate_500: Rate = field(default=0.0, metadata=_RATE)
    rate_hang: Rate = field(default=0.0, metadata=_RATE)
    hang_s: Seconds = field(default=30.0, metadata=_NONNEG)  # should exceed the client's timeout
    rate_malformed_json: Rate = field(default=0.0, metadata=_RATE)
    rate_missing_usage: Rate = field(default=0.0, metadata=_RATE)
    rate_fewer_choices: Rate = field(default=0.0, metadata=_RATE)
    script: list[Fault] = field(
        default_factory=list, metadata={"must": f"a list of faults from {', '.join(get_args(Fault))}"}
    )
    # arm label -> accuracy drop, used by the brain
    degrade: dict[str, Rate] = field(
        default_factory=dict, metadata={"must": "a table mapping arm labels to numbers in 0..1"}
    )
    # Context window in tokens (None = unlimited): prompt + max_tokens above it gets a 400
    # context_length_exceeded; without max_tokens a reply stops at the window (finish_reason "length").
    context_length: Annotated[int, Ge(1)] | None = field(
        default=None, metadata={"must": "an integer >= 1 or null"}
    )
    # answer n>1 with one choice (servers that ignore `n`, e.g. some llama.cpp builds)
    ignore_n: bool = field(default=False, metadata={"must": "true or false"})
    # Report prompt prefixes as cached input tokens. false: never. "warm" (what the demo uses): a cache that a
    # long sweep has already filled — every message but the newest counts as cached, a function of the request
    # alone, so a run's usage is the same whatever the concurrency. true / "seen": a prefix counts once an
    # earlier request sent it — closer to a cold provider, but which of two concurrent requests "hits" depends
    # on arrival order, so usage varies from run to run.
    prompt_cache: bool | PromptCacheMode = field(
        default=False, metadata={"must": f"true, false or one of {', '.join(get_args(PromptCacheMode))}"}
    )
    # Request fields this server refuses (400 `unsupported_parameter` naming the field in `param`, OpenAI's
    # wording), e.g. ["reasoning_effort"] for a server without reasoning models.
    reject_params: list[Annotated[str, MinLen(1)]] = field(
        default_factory=list, metadata={"must": "a list of request field names"}
    )

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON-able data (GET /_sim/config), the key masked."""
        d = dataclasses.asdict(self)
        d["api_key"] = "<set>" if self.api_key else None  # /_sim/config never echoes the key
        return d


def apply_updates(cfg: SimConfig, updates: dict[str, Any]) -> SimConfig:
    """A new config with `updates` applied, every field checked by the model; ValueError naming the bad field
    (`rate_429 must be a number in 0..1, got 1.5`)."""
    from elo_per_token.common.checked import checked  # pydantic: imported by the simulator only

    merged = {**dataclasses.asdict(cfg), **updates}
    return checked(SimConfig, merged)


def make_config(config: SimConfig | dict[str, Any] | None = None, **overrides: Any) -> SimConfig:
    """A config from a dict (checked), a config, or the defaults, with `overrides` applied (checked)."""
    base = config if isinstance(config, SimConfig) else apply_updates(SimConfig(), dict(config or {}))
    return apply_updates(base, overrides) if overrides else base


def load_config(path: str | Path) -> SimConfig:
    """The simulator's TOML file (a [simulator] table or top-level keys); InputError naming file, line, field."""
    from elo_per_token.common.checked import ModelError, checked

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise InputError("simulator config not found", file=str(p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read simulator config: {e}", file=str(p)) from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"invalid TOML: {e}", file=str(p)) from None
    except RecursionError:
        raise InputError("invalid TOML: nested too deeply", file=str(p)) from None
    except ValueError as e:  # tomllib lets int()'s digit limit through (4,300+ digits)
        raise InputError(f"invalid TOML: {e}", file=str(p)) from None
    table = "simulator" if isinstance(data.get("simulator"), dict) else None
    try:
        return checked(SimConfig, data["simulator"] if table else data)
    except ModelError as e:
        # `key = …`, else a `[key]` table of its own (`[degrade]`)
        line = None
        if e.key:
            line = toml_line(text, e.key, table) or toml_line(
                text, None, (*([table] if table else []), e.key)
            )
        raise InputError(e.message, file=str(p), line=line, field=e.field or table) from None
