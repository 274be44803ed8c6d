"""`ept profiles export`: each client's own field names exactly, a placeholder key, never the real one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from elo_per_token.contracts.errors import InputError
from elo_per_token.egress.exports import PLACEHOLDER_KEY, render
from elo_per_token.egress.profiles import Profile

REPO = Path(__file__).resolve().parents[2]
CANARY = "sk-canary-export-0000111122223333"

ANTH = Profile(
    name="tao-claude",
    protocol="anthropic",
    base_url="https://gw.example.com/api",
    api_key_env="GW_API_KEY",
    model="claude-x",
    small_fast_model="claude-haiku-x",
)
OAI = Profile(
    name="tao token",
    protocol="openai",
    base_url="https://gw.example.com/api/v1",
    api_key_env="GW_API_KEY",
    model="codex-x",
)

PROFILES_TOML = """
[profiles.tao-claude]
protocol = "anthropic"
base_url = "https://gw.example.com/api"
api_key_env = "GW_API_KEY"
model = "claude-x"
small_fast_model = "claude-haiku-x"

[profiles.gw]
protocol = "openai"
base_url = "https://gw.example.com/api/v1"
api_key_env = "GW_API_KEY"
model = "codex-x"
"""


def test_claude_code_settings_fields_exactly():
    data = json.loads(render(ANTH, "claude-code"))
    assert list(data) == ["env"]
    assert data["env"] == {
        "ANTHROPIC_BASE_URL": "https://gw.example.com/api",
        "ANTHROPIC_AUTH_TOKEN": "YOUR_API_KEY",
        "ANTHROPIC_MODEL": "claude-x",
        "ANTHROPIC_SMALL_FAST_MODEL": "claude-haiku-x",
    }


def test_claude_code_small_fast_model_defaults_to_model():
    p = Profile(name="a", protocol="anthropic", base_url="https://h/api", api_key_env="K", model="only")
    assert json.loads(render(p, "claude-code"))["env"]["ANTHROPIC_SMALL_FAST_MODEL"] == "only"


def test_codex_config_fields_exactly():
    data = tomllib.loads(render(OAI, "codex"))
    pid = data["model_provider"]
    assert set(data) == {"model", "model_provider", "model_providers"}
    assert data["model"] == "codex-x" and pid == "tao_token"
    assert data["model_providers"] == {
        pid: {
            "name": "tao token",
            "base_url": "https://gw.example.com/api/v1",
            "env_key": "GW_API_KEY",
            "wire_api": "responses",
        }
    }


def test_cc_switch_triple():
    assert json.loads(render(OAI, "cc-switch")) == {
        "BASE_URL": "https://gw.example.com/api/v1",
        "API KEY": PLACEHOLDER_KEY,
        "MODEL": "codex-x",
    }


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (
            OAI,
            {
                "OPENAI_BASE_URL": "https://gw.example.com/api/v1",
                "OPENAI_API_KEY": "YOUR_API_KEY",  # what a plain openai.OpenAI() reads
                "OPENAI_MODEL": "codex-x",
                "GW_API_KEY": "YOUR_API_KEY",
            },
        ),
        (
            ANTH,
            {
                "ANTHROPIC_BASE_URL": "https://gw.example.com/api",
                "ANTHROPIC_AUTH_TOKEN": "YOUR_API_KEY",
                "ANTHROPIC_MODEL": "claude-x",
                "ANTHROPIC_SMALL_FAST_MODEL": "claude-haiku-x",
                "GW_API_KEY": "YOUR_API_KEY",
            },
        ),
    ],
)
def test_env_exports_source_in_bash(tmp_path, profile, expected):
    f = tmp_path / "env.sh"
    f.write_text(render(profile, "env"))
    names = " ".join(expected)
    out = subprocess.run(
        ["bash", "-c", f"set -e; source {f}; for v in {names}; do printf '%s=%s\\n' $v \"${{!v}}\"; done"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        env={"PATH": os.environ.get("PATH", "")},  # no key variable set: the placeholders show
    ).stdout
    assert dict(line.split("=", 1) for line in out.splitlines()) == expected


def test_protocol_mismatch_is_an_input_error():
    with pytest.raises(InputError):
        render(OAI, "claude-code")
    with pytest.raises(InputError):
        render(ANTH, "codex")
    with pytest.raises(InputError) as ei:
        render(OAI, "vscode")
    assert ei.value.field == "to"


def run_ept(*args: str, env_key: str | None = CANARY) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "GW_API_KEY": env_key} if env_key else dict(os.environ)
    return subprocess.run(
        [sys.executable, "-m", "elo_per_token", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )


def test_cli_export_never_writes_the_real_key(tmp_path):
    pf = tmp_path / "profiles.toml"
    pf.write_text(PROFILES_TOML)
    outputs = []
    for name, target in (
        ("tao-claude", "claude-code"),
        ("gw", "codex"),
        ("gw", "cc-switch"),
        ("gw", "env"),
        ("tao-claude", "env"),
    ):
        r = run_ept("profiles", "export", name, "--to", target, "--profiles", str(pf))
        assert r.returncode == 0, r.stderr
        outputs.append(r.stdout + r.stderr)
    assert json.loads(outputs[0])["env"]["ANTHROPIC_AUTH_TOKEN"] == "YOUR_API_KEY"
    assert tomllib.loads(outputs[1])["model_providers"]["gw"]["env_key"] == "GW_API_KEY"
    assert all(CANARY not in o and "canary" not in o for o in outputs)


def test_cli_export_to_file_refuses_overwrite(tmp_path):
    pf = tmp_path / "profiles.toml"
    pf.write_text(PROFILES_TOML)
    out = tmp_path / ".claude" / "settings.json"
    r = run_ept(
        "profiles", "export", "tao-claude", "--to", "claude-code", "--out", str(out), "--profiles", str(pf)
    )
    assert r.returncode == 0 and json.loads(out.read_text())["env"]["ANTHROPIC_MODEL"] == "claude-x"
    out.write_text("{}")
    r = run_ept(
        "profiles", "export", "tao-claude", "--to", "claude-code", "--out", str(out), "--profiles", str(pf)
    )
    assert r.returncode == 2 and "--force" in r.stderr and out.read_text() == "{}"
    r = run_ept(
        "profiles",
        "export",
        "gw",
        "--to",
        "claude-code",
        "--out",
        str(tmp_path / "x.json"),
        "--profiles",
        str(pf),
    )
    assert r.returncode == 2 and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("profile", [OAI, ANTH])
def test_env_exports_never_overwrite_a_set_key(tmp_path, profile):
    """Issue 27: `eval "$(ept profiles export NAME --to env)"` replaced a working key with the placeholder."""
    f = tmp_path / "env.sh"
    f.write_text(render(profile, "env"))
    sdk = "OPENAI_API_KEY" if profile.protocol == "openai" else "ANTHROPIC_AUTH_TOKEN"
    show = f'source {f}; printf \'%s|%s\' "$GW_API_KEY" "${sdk}"'
    base = {"PATH": os.environ.get("PATH", "")}

    def run(env: dict[str, str]) -> str:
        return subprocess.run(["bash", "-c", show], capture_output=True, text=True, check=True, timeout=30,
                              env={**base, **env}).stdout  # fmt: skip

    assert run({"GW_API_KEY": "sk-real-1234"}) == "sk-real-1234|sk-real-1234"  # the SDK's takes the profile's
    assert run({sdk: "sk-other-9"}) == "YOUR_API_KEY|sk-other-9"  # a set SDK key is kept
    # Both set: the SDK's variable takes the profile's key, the one for the base URL exported beside it.
    assert run({"GW_API_KEY": "sk-real-1234", sdk: "sk-other-9"}) == "sk-real-1234|sk-real-1234"
    assert "sk-" not in render(profile, "env")
