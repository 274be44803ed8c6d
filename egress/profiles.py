"""Provider profiles: where a run sends its calls, and the NAME of the variable holding the key.

A profile is versioned configuration (profiles.toml); the key itself lives only in the environment
(or a CI secret) and is read at the moment a client is built. Profiles are therefore safe to put in
job payloads (by name), manifests (`public_dict`) and the repository.

File format (`profiles.toml`, or `--profiles FILE`, or $EPT_PROFILES)::

    [profiles.simulator]
    protocol = "openai"                 # or "anthropic" (messages API)
    base_url = "http://127.0.0.1:8765/v1"
    api_key_env = "EPT_SIM_API_KEY"     # the variable NAME, never the key
    model = "ept-sim-1"
    max_tokens = 2048                   # optional generation defaults for every run (contracts.generation):
    reasoning_effort = "medium"         # max_tokens, temperature, top_p, stop, seed, reasoning_effort,
                                        # thinking_budget, extra_body; plans and arms override them
    price_in_per_1m = 0.15              # optional prices (USD per 1M tokens): cost per task in reports
    price_cached_in_per_1m = 0.075
    price_out_per_1m = 0.60

The standard OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL variables form an implicit `default`
profile unless the file defines one.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from elo_per_token.common.tomlpos import toml_line
from elo_per_token.contracts import generation as gen_settings
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.secrets import mask, mask_url
from elo_per_token.contracts.settings import read_str

if TYPE_CHECKING:  # the bounds in the annotations, resolved by common.checked when a profile file is read
    from annotated_types import Ge, Gt, Interval

ProtocolName = Literal["openai", "anthropic"]
PROTOCOLS: tuple[ProtocolName, ...] = get_args(ProtocolName)
DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
# How long an outage is waited out before jobs fail, by default (egress.outage).
DEFAULT_PATIENCE_S = 600.0
MAX_PATIENCE_S = 7 * 86400.0  # a week: longer is a typo (and inf would never fail a job)
# A response body past this many MB is not read (egress.bounded): a 16-sample reply of 128k tokens each is ~8 MB.
DEFAULT_MAX_RESPONSE_MB = 32.0

# Field names that would put a literal secret into a versioned file.
_LITERAL_KEY_FIELDS = frozenset(
    {"api_key", "apikey", "key", "token", "auth_token", "secret", "api_token", "access_token", "password"}
)
_SECRET_HEADER = re.compile(r"auth|key|token|secret|cookie", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_POSITIVE = {"must": "a positive finite number"}
_COUNT = {"must": "a positive integer"}
_PRICE = {"must": "a finite number >= 0"}


@dataclass(frozen=True)
class Profile:
    """A provider profile. The fields a profiles file sets are checked by their annotations (types, bounds:
    `_validate` through common.checked); `metadata["must"]` is the rule in the words an error shows."""

    name: str
    protocol: ProtocolName
    base_url: str
    api_key_env: str
    model: str
    # total seconds per request attempt (connect to last byte), not per read
    timeout: Annotated[float, Gt(0)] = field(default=120.0, metadata=_POSITIVE)
    max_retries: Annotated[int, Ge(0)] = field(default=3, metadata={"must": "an integer >= 0"})
    rpm: Annotated[int, Ge(1)] | None = field(default=None, metadata=_COUNT)
    tpm: Annotated[int, Ge(1)] | None = field(default=None, metadata=_COUNT)
    headers: dict[str, str] = field(
        default_factory=dict, metadata={"must": "a table of strings", "secret": True}
    )
    supports_n: bool = False
    price_in_per_1m: Annotated[float, Ge(0)] | None = field(default=None, metadata=_PRICE)
    price_out_per_1m: Annotated[float, Ge(0)] | None = field(default=None, metadata=_PRICE)
    # cached input tokens; None = priced as fresh input
    price_cached_in_per_1m: Annotated[float, Ge(0)] | None = field(default=None, metadata=_PRICE)
    # defaults for every request (contracts.generation)
    generation: dict[str, Any] = field(default_factory=dict)
    stream: bool = False  # ask for SSE streams (usage from the final event, recorded as from plain responses)
    # The model's context window in tokens, when known: prompts that cannot fit are refused before sending
    # (context_overflow) and max_tokens is lowered to what the window leaves.
    context_length: Annotated[int, Ge(1)] | None = field(default=None, metadata=_COUNT)
    small_fast_model: str | None = None  # Claude Code's ANTHROPIC_SMALL_FAST_MODEL; defaults to `model`
    # a response body past this is not read (transient)
    max_response_mb: Annotated[float, Gt(0)] = field(default=DEFAULT_MAX_RESPONSE_MB, metadata=_POSITIVE)
    # Seconds an endpoint that answered before may stay down (refused, 5xx) before its jobs fail (egress.outage).
    patience: Annotated[float, Interval(ge=0, le=MAX_PATIENCE_S)] = field(
        default=DEFAULT_PATIENCE_S,
        metadata={"must": f"between 0 and {MAX_PATIENCE_S:g} seconds (0: no outage is waited out)"},
    )
    # A key handed in by code that made it (`ept demo`'s throwaway key for its in-process simulator), used
    # instead of $api_key_env; never in a profiles file (a literal key field is refused there), a manifest or
    # a repr (public_dict drops it).
    inline_key: str | None = field(default=None, repr=False, compare=False)

    def __hash__(self) -> int:  # headers is a dict; hash by identity fields only
        return hash((self.name, self.protocol, self.base_url, self.model))

    def api_key(self) -> str | None:
        """The inline key, else the key from the environment; None when neither is there."""
        return self.inline_key or self.env_key()

    def env_key(self) -> str | None:
        """The key in $api_key_env, or None when the variable is unset or empty."""
        return self.env_value() or None

    def env_value(self) -> str | None:
        """$api_key_env as set (None: unset; `ept doctor` tells empty and padded values apart). The one read of
        it: an edge read, as the variable is named by the user's profile, not declared in contracts/settings.py."""
        return os.environ.get(self.api_key_env)

    def masked_key(self) -> str:
        return mask(self.api_key())

    def __repr__(self) -> str:  # a repr in a log or traceback shows the public fields only (masked base_url)
        return f"Profile({', '.join(f'{k}={v!r}' for k, v in self.public_dict().items())})"

    def public_dict(self) -> dict[str, Any]:
        """Everything needed to reproduce the endpoint choice, and nothing secret (for manifests)."""
        d = dataclasses.asdict(self)
        del d["inline_key"]
        d["headers"] = {k: v for k, v in self.headers.items() if not _SECRET_HEADER.search(k)}
        d["base_url"] = mask_url(self.base_url)  # a password in the URL's userinfo is a secret too
        return d

    def with_base_url(self, url: str) -> Profile:
        return dataclasses.replace(self, base_url=url)


# Profile fields a profiles file does not set: the name is the table's, generation settings sit at the top level
# of the table (checked by contracts.generation), an inline key is never in a file.
_NOT_IN_FILE = frozenset({"name", "generation", "inline_key"})
_FILE_FIELDS = frozenset(f.name for f in dataclasses.fields(Profile)) - _NOT_IN_FILE
_GEN_FIELDS = frozenset(gen_settings.FIELDS)


def _check_values(values: dict[str, Any], err: Callable[[str, str | None], InputError]) -> None:
    """What the field types cannot say: the key variable is a NAME (shown masked: it may be a pasted key), the
    URL is http(s), no header carries a credential."""
    env = values["api_key_env"]
    if not _ENV_NAME.match(env):
        raise err(
            f"api_key_env must be the NAME of an environment variable (e.g. OPENAI_API_KEY), not {mask(env)}",
            "api_key_env",
        )
    parts = urlsplit(values["base_url"])
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise err(f"base_url must be an http(s) URL, got {values['base_url']!r}", "base_url")
    for hk, hv in values["headers"].items():
        if _SECRET_HEADER.search(hk):
            raise err(
                f"header {hk!r} looks like a credential ({mask(hv)}); use api_key_env instead", "headers"
            )


def _validate(name: str, raw: Any, file: str, text: str) -> Profile:
    """One [profiles.NAME] table as a Profile; InputError naming file, line and field (keys never shown)."""
    from elo_per_token.common.checked import ModelError, checked_fields  # pydantic: when a file is read

    def err(msg: str, key: str | None) -> InputError:
        return InputError(
            msg,
            file=file,
            line=toml_line(text, key, ("profiles", name)),
            field=f"profiles.{name}" + (f".{key}" if key else ""),
        )

    if not isinstance(raw, dict):
        raise err("a profile must be a table ([profiles.NAME])", None)
    for k, v in raw.items():
        if k.lower() in _LITERAL_KEY_FIELDS:
            shown = mask(v) if isinstance(v, str) else "<value>"
            raise err(
                f"literal key ({shown}) in a profile file is not allowed: remove '{k}' and set "
                f'api_key_env = "SOME_VAR", then export SOME_VAR in the environment or CI secret',
                k,
            )
    unknown = sorted(set(raw) - _FILE_FIELDS - _GEN_FIELDS)
    if unknown:
        known = ", ".join(sorted(_FILE_FIELDS | _GEN_FIELDS))
        raise err(f"unknown field(s) {', '.join(unknown)}; known: {known}", unknown[0])
    generation = gen_settings.check({k: v for k, v in raw.items() if k in _GEN_FIELDS}, err)
    try:
        values = checked_fields(
            Profile,
            {"protocol": "openai", **{k: v for k, v in raw.items() if k in _FILE_FIELDS}},
            _NOT_IN_FILE,
        )
    except ModelError as e:
        if e.message == "missing required field":
            raise err(f"missing required field '{e.key}'", None) from None
        raise err(f"{e.key} {e.message}" if e.key == "protocol" else e.message, e.key) from None
    values["base_url"] = values["base_url"].strip()
    _check_values(values, err)
    return Profile(name=name, generation=generation, **values)


def default_profile() -> Profile:
    """The implicit profile from the standard OpenAI variables."""
    return Profile(
        name="default",
        protocol="openai",
        base_url=os.environ.get("OPENAI_BASE_URL") or DEFAULT_OPENAI_BASE_URL,
        api_key_env="OPENAI_API_KEY",
        model=os.environ.get("OPENAI_MODEL") or DEFAULT_OPENAI_MODEL,
    )


def profiles_path(path: str | Path | None = None) -> Path | None:
    """The profile file in effect: the argument, else $EPT_PROFILES, else ./profiles.toml if present."""
    if path:
        return Path(path)
    env = read_str("EPT_PROFILES")
    if env:
        return Path(env)
    local = Path("profiles.toml")
    return local if local.exists() else None


def load_profiles(path: str | Path | None = None) -> dict[str, Profile]:
    p = profiles_path(path)
    out: dict[str, Profile] = {}
    if p is not None:
        file = str(p)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError("profile file not found", file=file) from None
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read profile file: {e}", file=file) from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            m = re.search(r"line (\d+)", str(e))
            raise InputError(f"invalid TOML: {e}", file=file, line=int(m.group(1)) if m else None) from None
        except RecursionError:
            raise InputError("invalid TOML: nested too deeply", file=file) from None
        except ValueError as e:  # tomllib lets int()'s digit limit through (4,300+ digits)
            raise InputError(f"invalid TOML: {e}", file=file) from None
        extra = sorted(set(data) - {"profiles"})
        if extra:
            raise InputError(
                f"unexpected top-level key(s) {', '.join(extra)}; put profiles under [profiles.NAME]",
                file=file,
                field=extra[0],
            )
        profiles = data.get("profiles", {})
        if not isinstance(profiles, dict):
            raise InputError("'profiles' must be a table", file=file, field="profiles")
        out = {name: _validate(name, raw, file, text) for name, raw in profiles.items()}
    out.setdefault("default", default_profile())
    return out


def get_profile(name: str, path: str | Path | None = None) -> Profile:
    profiles = load_profiles(path)
    if name not in profiles:
        where = profiles_path(path)
        if where is None:  # say why only `default` exists: no file was found, and where ept looked
            raise InputError(
                f"unknown profile {name!r}: no profiles.toml was found (looked for --profiles, $EPT_PROFILES "
                f"(unset) and {Path('profiles.toml').resolve()}); only the implicit 'default' profile (from "
                "OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL) exists. Pass --profiles FILE or set EPT_PROFILES",
                field="profile",
            )
        raise InputError(
            f"unknown profile {name!r} in {where}; known: {', '.join(sorted(profiles))}",
            file=str(where),
            field="profile",
        )
    return profiles[name]
