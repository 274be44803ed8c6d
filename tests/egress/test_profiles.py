"""Profiles: the shipped profiles.toml, validation errors (file, line, field), the implicit default, no secrets."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from cli_runner import run_ept

from elo_per_token.contracts.errors import InputError
from elo_per_token.egress.profiles import DEFAULT_OPENAI_BASE_URL, Profile, get_profile, load_profiles

REPO = Path(__file__).resolve().parents[2]
CANARY = "sk-canary-literal-key-1234567890QRST"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "profiles.toml"
    p.write_text(text)
    return p


def test_shipped_profiles_have_required_examples_and_no_keys(monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(var, raising=False)
    profiles = load_profiles(REPO / "profiles.toml")
    assert {"simulator", "openai", "default"} <= set(profiles)
    assert any(p.protocol == "anthropic" for p in profiles.values())
    raw = tomllib.loads((REPO / "profiles.toml").read_text())
    for name, fields in raw["profiles"].items():
        assert "api_key_env" in fields, name
        assert not any("sk-" in str(v) for v in fields.values()), name
    sim = profiles["simulator"]
    assert sim.base_url.endswith("/v1") and sim.model == "ept-sim-1"
    anth = next(p for p in profiles.values() if p.protocol == "anthropic" and p.name == "anthropic")
    assert not anth.base_url.rstrip("/").endswith("/v1")


def test_defaults_and_types(tmp_path):
    p = write(
        tmp_path,
        '[profiles.x]\nbase_url = "http://h/v1"\napi_key_env = "X_KEY"\nmodel = "m"\n'
        'headers = {"X-Org" = "team"}\nrpm = 10\nprice_in_per_1m = 1\n',
    )
    x = load_profiles(p)["x"]
    assert (x.protocol, x.timeout, x.max_retries, x.supports_n, x.rpm, x.tpm) == (
        "openai",
        120.0,
        3,
        False,
        10,
        None,
    )
    assert x.headers == {"X-Org": "team"} and x.price_in_per_1m == 1


def test_implicit_default_profile_from_openai_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9999/v1")
    monkeypatch.setenv("OPENAI_MODEL", "my-model")
    p = write(tmp_path, "")
    d = load_profiles(p)["default"]
    assert (d.base_url, d.model, d.api_key_env) == ("http://127.0.0.1:9999/v1", "my-model", "OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.delenv("OPENAI_MODEL")
    d = load_profiles(p)["default"]
    assert d.base_url == DEFAULT_OPENAI_BASE_URL
    # a file may define its own default
    p2 = write(tmp_path, '[profiles.default]\nbase_url = "http://h/v1"\napi_key_env = "K"\nmodel = "own"\n')
    assert load_profiles(p2)["default"].model == "own"


def test_profiles_path_from_env(tmp_path, monkeypatch):
    p = write(tmp_path, '[profiles.envfile]\nbase_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\n')
    monkeypatch.setenv("EPT_PROFILES", str(p))
    assert "envfile" in load_profiles()


def test_literal_key_is_rejected_with_mask_file_line_and_field(tmp_path):
    p = write(
        tmp_path,
        f'# comment\n[profiles.leaky]\nbase_url = "http://h/v1"\nmodel = "m"\napi_key = "{CANARY}"\n',
    )
    with pytest.raises(InputError) as ei:
        load_profiles(p)
    e = ei.value
    assert (e.file, e.line, e.field) == (str(p), 5, "profiles.leaky.api_key")
    assert "api_key_env" in e.message and "sk-…QRST" in e.message
    assert CANARY not in str(e)


def test_key_pasted_into_api_key_env_is_rejected_masked(tmp_path):
    p = write(tmp_path, f'[profiles.x]\nbase_url = "http://h/v1"\nmodel = "m"\napi_key_env = "{CANARY}"\n')
    with pytest.raises(InputError) as ei:
        load_profiles(p)
    assert ei.value.field == "profiles.x.api_key_env" and ei.value.line == 4
    assert CANARY not in str(ei.value)


def test_credential_header_is_rejected(tmp_path):
    p = write(
        tmp_path,
        f'[profiles.x]\nbase_url = "http://h/v1"\nmodel = "m"\napi_key_env = "K"\n'
        f'headers = {{"Authorization" = "Bearer {CANARY}"}}\n',
    )
    with pytest.raises(InputError) as ei:
        load_profiles(p)
    assert ei.value.field == "profiles.x.headers" and CANARY not in str(ei.value)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (
            'base_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\nprotocol = "grpc"\n',
            "protocol",
            "one of",
        ),
        ('base_url = "ftp://h"\napi_key_env = "K"\nmodel = "m"\n', "base_url", "http(s)"),
        (
            'base_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\ntimeout = "slow"\n',
            "timeout",
            "must be a positive finite number, got 'slow'",
        ),
        (
            'base_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\nsupports_n = 1\n',
            "supports_n",
            "must be true or false, got 1",
        ),
        (
            'base_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\nmax_retries = true\n',
            "max_retries",
            "must be an integer >= 0, got True",
        ),
        (
            'base_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\ntemprature = 1\n',
            "temprature",
            "unknown",
        ),
        ('base_url = "http://h/v1"\napi_key_env = "K"\n', None, "missing required field 'model'"),
    ],
)
def test_bad_entries_name_the_field(tmp_path, body, field, words):
    p = write(tmp_path, "[profiles.x]\n" + body)
    with pytest.raises(InputError) as ei:
        load_profiles(p)
    assert ei.value.file == str(p)
    assert ei.value.field == "profiles.x" + (f".{field}" if field else "")
    assert words in ei.value.message
    assert ei.value.line is not None


def test_invalid_toml_names_line(tmp_path):
    p = write(tmp_path, '[profiles.x]\nbase_url = "http://h/v1"\nmodel = \n')
    with pytest.raises(InputError) as ei:
        load_profiles(p)
    assert ei.value.line == 3


def test_get_profile_unknown_lists_names(tmp_path):
    p = write(tmp_path, '[profiles.alpha]\nbase_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\n')
    with pytest.raises(InputError) as ei:
        get_profile("beta", p)
    assert "alpha" in ei.value.message and "default" in ei.value.message


def test_key_accessors_and_public_dict(monkeypatch):
    prof = Profile(
        name="x",
        protocol="openai",
        base_url="http://h/v1",
        api_key_env="EPT_TEST_KEY",
        model="m",
        headers={"X-Org": "o"},
    )
    monkeypatch.delenv("EPT_TEST_KEY", raising=False)
    assert prof.api_key() is None and prof.masked_key() == "<unset>"
    monkeypatch.setenv("EPT_TEST_KEY", "")
    assert prof.api_key() is None
    monkeypatch.setenv("EPT_TEST_KEY", CANARY)
    assert prof.api_key() == CANARY and prof.masked_key() == "sk-…QRST"
    pub = prof.public_dict()
    assert (
        CANARY not in repr(pub) and pub["api_key_env"] == "EPT_TEST_KEY" and pub["headers"] == {"X-Org": "o"}
    )
    assert CANARY not in repr(prof)
    moved = prof.with_base_url("http://other/v1")
    assert moved.base_url == "http://other/v1" and prof.base_url == "http://h/v1" and moved.model == "m"
    assert hash(prof) == hash(Profile(**{**prof.__dict__}))


def test_cli_bad_profile_file_exits_2_with_masked_message(tmp_path):
    p = write(tmp_path, f'[profiles.leaky]\nbase_url = "http://h/v1"\nmodel = "m"\napi_key = "{CANARY}"\n')
    r = run_ept("profiles", "list", "--profiles", str(p), cwd=REPO)
    assert r.returncode == 2
    assert str(p) in r.stderr.replace("\n", "") and "api_key_env" in r.stderr
    assert CANARY not in r.stdout + r.stderr
