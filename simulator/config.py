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
from typing import Any

from elo_per_token.contracts.errors import InputError

# "403", "400", "quota" (429 insufficient_quota), "proxy_400" (LiteLLM's "No connected db" for a key it cannot
# check) and "context_length" (400 context_length_exceeded) exist for scripts only (no rate).
# "403", "400" and "quota" (429 insufficient_quota) exist for scripts only (no rate), as do the hostile-provider
# faults: "usage_negative", "usage_nan", "usage_float", "usage_huge" (a normal reply whose usage is broken that
# way) and "no_choices" (a billed 200 with usage but no choices, which the client must discard and retry).
# "stream_cut": a streamed reply that stops halfway and still ends cleanly (`data: [DONE]`, usage sent, no
# finish_reason / stop_reason) — what llama-cpp-python does when a generation is interrupted; a plain
# (not streamed) request drawing it is answered normally.
FAULTS = (
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
)
LATENCY_DISTS = ("uniform", "normal", "exponential")
PROMPT_CACHE_MODES = ("seen", "warm")
DEFAULT_MODELS = ("ept-sim-1", "ept-sim-large")


@dataclass
class SimConfig:
    seed: int = 0
    latency_ms: float = 0.0  # mean added latency per completion request
    latency_jitter_ms: float = 0.0  # uniform: +-jitter; normal: sd; exponential: ignored (sd = mean)
    latency_dist: str = "uniform"
    api_key: str | None = None  # when set, any other key gets 401
    # How a wrong key is refused: "openai" (401 invalid_api_key) or "litellm" (400 "No connected db", what
    # LiteLLM's proxy answers when it cannot check keys), on every route including GET /models.
    auth_style: str = "openai"
    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    strict_models: bool = False  # when true, a model not in `models` gets 404 model_not_found
    serve_models: bool = True  # false: GET /models answers 404, like a gateway without a model list
    rate_429: float = 0.0
    retry_after: float = 1.0  # seconds, sent as Retry-After (rounded up) and retry-after-ms
    rate_500: float = 0.0
    rate_hang: float = 0.0
    hang_s: float = 30.0  # should exceed the client's timeout
    rate_malformed_json: float = 0.0
    rate_missing_usage: float = 0.0
    rate_fewer_choices: float = 0.0
    script: list[str] = field(default_factory=list)
    degrade: dict[str, float] = field(default_factory=dict)  # arm label -> accuracy drop, used by the brain
    # Context window in tokens (None = unlimited): prompt + max_tokens above it gets a 400
    # context_length_exceeded; without max_tokens a reply stops at the window (finish_reason "length").
    context_length: int | None = None
    ignore_n: bool = False  # answer n>1 with one choice (servers that ignore `n`, e.g. some llama.cpp builds)
    # Report prompt prefixes as cached input tokens. false: never. "warm" (what the demo uses): a cache that a
    # long sweep has already filled — every message but the newest counts as cached, a function of the request
    # alone, so a run's usage is the same whatever the concurrency. true / "seen": a prefix counts once an
    # earlier request sent it — closer to a cold provider, but which of two concurrent requests "hits" depends
    # on arrival order, so usage varies from run to run.
    prompt_cache: bool | str = False
    # Request fields this server refuses (400 `unsupported_parameter` naming the field in `param`, OpenAI's
    # wording), e.g. ["reasoning_effort"] for a server without reasoning models.
    reject_params: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["api_key"] = "<set>" if self.api_key else None  # /_sim/config never echoes the key
        return d


_FIELDS = {f.name: f for f in dataclasses.fields(SimConfig)}


def _check(name: str, value: Any) -> Any:
    if name not in _FIELDS:
        raise ValueError(f"unknown field {name!r}; known: {', '.join(sorted(_FIELDS))}")
    if name.startswith("rate_"):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ValueError(f"{name} must be a number in 0..1")
        return float(value)
    if name in ("latency_ms", "latency_jitter_ms", "retry_after", "hang_s"):
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"{name} must be a non-negative number")
        return float(value)
    if name == "seed":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("seed must be an integer")
        return value
    if name == "auth_style":
        if value not in ("openai", "litellm"):
            raise ValueError("auth_style must be openai or litellm")
        return value
    if name == "latency_dist":
        if value not in LATENCY_DISTS:
            raise ValueError(f"latency_dist must be one of {', '.join(LATENCY_DISTS)}")
        return value
    if name == "api_key":
        if value is not None and (not isinstance(value, str) or not value):
            raise ValueError("api_key must be a non-empty string or null")
        return value
    if name == "models":
        if not isinstance(value, list) or not value or not all(isinstance(m, str) for m in value):
            raise ValueError("models must be a non-empty list of strings")
        return value
    if name == "prompt_cache":
        if not isinstance(value, bool) and value not in PROMPT_CACHE_MODES:
            raise ValueError(f"prompt_cache must be true, false or one of {', '.join(PROMPT_CACHE_MODES)}")
        return value
    if name in ("strict_models", "serve_models", "ignore_n"):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false")
        return value
    if name == "context_length":
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError("context_length must be an integer >= 1 or null")
        return value
    if name == "reject_params":
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ValueError("reject_params must be a list of request field names")
        return list(value)
    if name == "script":
        if not isinstance(value, list) or any(v not in FAULTS for v in value):
            raise ValueError(f"script must be a list of faults from {', '.join(FAULTS)}")
        return list(value)
    if name == "degrade":
        if not isinstance(value, dict) or any(
            isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1 for v in value.values()
        ):
            raise ValueError("degrade must map arm labels to numbers in 0..1")
        return {str(k): float(v) for k, v in value.items()}
    raise AssertionError(name)


def apply_updates(cfg: SimConfig, updates: dict[str, Any]) -> SimConfig:
    """A new config with `updates` applied; raises ValueError naming the bad field."""
    checked = {k: _check(k, v) for k, v in updates.items()}
    return dataclasses.replace(cfg, **checked)


def make_config(config: SimConfig | dict[str, Any] | None = None, **overrides: Any) -> SimConfig:
    base = config if isinstance(config, SimConfig) else apply_updates(SimConfig(), dict(config or {}))
    return apply_updates(base, overrides) if overrides else base


def load_config(path: str | Path) -> SimConfig:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("simulator config not found", file=str(p)) from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"invalid TOML: {e}", file=str(p)) from None
    data = data.get("simulator", data)  # accept a [simulator] table or top-level keys
    cfg = SimConfig()
    for k, v in data.items():
        try:
            cfg = apply_updates(cfg, {k: v})
        except ValueError as e:
            raise InputError(str(e), file=str(p), field=k) from None
    return cfg
