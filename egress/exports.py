"""Client configurations for a profile, with each client's own field names exactly and a placeholder key.

Targets (file, then the fields each client reads):
  claude-code  ~/.claude/settings.json   {"env": {ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN, ANTHROPIC_MODEL,
                                                  ANTHROPIC_SMALL_FAST_MODEL}}
  codex        ~/.codex/config.toml      model, model_provider, [model_providers.<id>] name/base_url/env_key/wire_api
                                         (wire_api = "responses": targets Codex CLI 0.171, which refuses "chat")
  cc-switch    the BASE_URL / API KEY / MODEL triple
  env          shell exports
The key is never written: always the placeholder YOUR_API_KEY (or the env variable's NAME for Codex).
"""

from __future__ import annotations

import json
import re

from elo_per_token.contracts.errors import InputError
from elo_per_token.egress.profiles import Profile

PLACEHOLDER_KEY = "YOUR_API_KEY"
TARGETS = ("claude-code", "codex", "cc-switch", "env")


def _toml_str(s: str) -> str:
    # JSON string escapes are valid TOML basic-string escapes for the characters we can meet here.
    return json.dumps(s, ensure_ascii=False)


def _shell_quote(s: str) -> str:
    return '"' + re.sub(r'(["\\$`])', r"\\\1", s) + '"'


def claude_code_settings(p: Profile) -> str:
    if p.protocol != "anthropic":
        raise InputError(
            f"profile '{p.name}' speaks the {p.protocol} protocol; Claude Code needs an Anthropic-protocol "
            'endpoint (protocol = "anthropic", base_url without /v1)',
            field="protocol",
        )
    env = {
        "ANTHROPIC_BASE_URL": p.base_url,
        "ANTHROPIC_AUTH_TOKEN": PLACEHOLDER_KEY,
        "ANTHROPIC_MODEL": p.model,
        "ANTHROPIC_SMALL_FAST_MODEL": p.small_fast_model or p.model,
    }
    return json.dumps({"env": env}, indent=2) + "\n"


def codex_provider_id(p: Profile) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", p.name)


def codex_config(p: Profile) -> str:
    if p.protocol != "openai":
        raise InputError(
            f"profile '{p.name}' speaks the {p.protocol} protocol; Codex's wire_api = \"responses\" needs an "
            "OpenAI-compatible endpoint",
            field="protocol",
        )
    pid = codex_provider_id(p)
    return (
        f"# Codex config for ept profile '{p.name}'. The key is read from ${p.api_key_env} (env_key):\n"
        '# wire_api = "responses" (POST /v1/responses): written for Codex CLI 0.171, which refuses "chat";\n'
        '# an old Codex (0.58) still accepted wire_api = "chat".\n'
        f"#   export {p.api_key_env}={_shell_quote(PLACEHOLDER_KEY)}\n"
        f"model = {_toml_str(p.model)}\n"
        f"model_provider = {_toml_str(pid)}\n"
        "\n"
        f"[model_providers.{pid}]\n"
        f"name = {_toml_str(p.name)}\n"
        f"base_url = {_toml_str(p.base_url)}\n"
        f"env_key = {_toml_str(p.api_key_env)}\n"
        'wire_api = "responses"\n'
    )


def cc_switch(p: Profile) -> str:
    """The CC Switch triple (seed: BASE_URL, API KEY, MODEL) as JSON."""
    return json.dumps({"BASE_URL": p.base_url, "API KEY": PLACEHOLDER_KEY, "MODEL": p.model}, indent=2) + "\n"


def shell_env(p: Profile) -> str:
    if p.protocol == "anthropic":
        pairs = [
            ("ANTHROPIC_BASE_URL", p.base_url),
            ("ANTHROPIC_AUTH_TOKEN", PLACEHOLDER_KEY),
            ("ANTHROPIC_MODEL", p.model),
            ("ANTHROPIC_SMALL_FAST_MODEL", p.small_fast_model or p.model),
        ]
    else:
        # OPENAI_API_KEY is what the SDKs (and a plain `openai.OpenAI()`) read, whatever the profile's variable.
        pairs = [
            ("OPENAI_BASE_URL", p.base_url),
            ("OPENAI_API_KEY", PLACEHOLDER_KEY),
            ("OPENAI_MODEL", p.model),
        ]
    if p.api_key_env not in dict(pairs):
        pairs.append((p.api_key_env, PLACEHOLDER_KEY))
    lines = [
        f"# ept profile '{p.name}' ({p.protocol}); keys already set are kept (the SDK's variable "
        f"takes ${p.api_key_env} when set); {PLACEHOLDER_KEY} only fills an unset one: replace it with your key"
    ]
    lines += [
        f"export {k}={_key_default(k, p.api_key_env) if v == PLACEHOLDER_KEY else _shell_quote(v)}"
        for k, v in pairs
    ]
    return "\n".join(lines) + "\n"


def _key_default(name: str, profile_var: str) -> str:
    """A key variable's value that never puts the placeholder over a set key: `eval`-ing the exports must not
    replace a working key. The SDK's variable (OPENAI_API_KEY…) takes the profile's key when that is set — the
    key for the base URL exported beside it — else keeps its own value."""
    if name == profile_var:
        return f'"${{{name}:-{PLACEHOLDER_KEY}}}"'
    return f'"${{{profile_var}:-${{{name}:-{PLACEHOLDER_KEY}}}}}"'


def render(p: Profile, target: str) -> str:
    writers = {
        "claude-code": claude_code_settings,
        "codex": codex_config,
        "cc-switch": cc_switch,
        "env": shell_env,
    }
    if target not in writers:
        raise InputError(f"unknown export target {target!r}; choose one of {', '.join(TARGETS)}", field="to")
    return writers[target](p)
