"""`ept doctor` against the simulator: each failure class gives the right failing check and fix; exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_sim import SIM_KEY

from elo_per_token.egress.doctor import FAIL, PASS, SKIP, WARN, check_base_url, check_key, ok, run_checks
from elo_per_token.egress.profiles import Profile

REPO = Path(__file__).resolve().parents[2]
ENV = "EPT_DOCTOR_TEST_KEY"


def prof(base_url: str, protocol: str = "openai", model: str = "ept-sim-1") -> Profile:
    return Profile(name="t", protocol=protocol, base_url=base_url, api_key_env=ENV, model=model, timeout=5.0)


def statuses(checks) -> list[str]:
    """The first five checks (key, base_url, /models, model, completion); the n check has its own tests."""
    return [c.status for c in checks[:5]]


@pytest.fixture
def keyed_env(monkeypatch):
    monkeypatch.setenv(ENV, SIM_KEY)


def test_all_pass(sim_keyed, keyed_env):
    checks = run_checks(prof(sim_keyed.url))
    assert statuses(checks) == [PASS] * 5 and ok(checks)
    assert "prompt_tokens=" in checks[4].detail
    # check 6 asked for n=2: the simulator honours n, the profile says supports_n = false -> a warning
    assert checks[5].status == WARN and "supports_n = true" in checks[5].fix
    assert sim_keyed.control.stats()["by_role"] == {"doctor": 2}


def test_n_check_warns_when_supports_n_disagrees_with_the_server(sim_keyed, keyed_env):
    import dataclasses

    sim_keyed.control.set(ignore_n=True)  # like a server that ignores n
    checks = run_checks(dataclasses.replace(prof(sim_keyed.url), supports_n=True))
    assert checks[5].status == WARN and "ignores n" in checks[5].fix and ok(checks)
    checks = run_checks(prof(sim_keyed.url))  # supports_n = false: agrees
    assert checks[5].status == PASS


def test_litellm_style_400_on_models_is_a_credential_problem(sim_keyed, monkeypatch):
    sim_keyed.control.set(auth_style="litellm")
    monkeypatch.setenv(ENV, "sk-wrong-0000000000000000")
    checks = run_checks(prof(sim_keyed.url))
    assert statuses(checks) == [PASS, PASS, FAIL, SKIP, FAIL]
    assert "credential or access" in checks[2].detail and "No connected db" in checks[2].detail
    assert f"${ENV}" in checks[2].detail and "rejected the key" in checks[2].fix


def test_placeholder_key_left_in_a_client_config_is_flagged(tmp_path):
    from elo_per_token.egress.doctor import check_client_configs
    from elo_per_token.egress.exports import render

    p = prof("http://127.0.0.1:1", protocol="anthropic")
    cc = tmp_path / "settings.json"
    cc.write_text(render(p, "claude-code"))
    codex = tmp_path / "config.toml"
    codex.write_text(render(prof("http://127.0.0.1:1/v1"), "codex"))  # its placeholder is only in a comment
    c = check_client_configs([cc, codex])
    assert c.status == WARN and "env.ANTHROPIC_AUTH_TOKEN" in c.detail and str(codex) not in c.detail
    cc.write_text(cc.read_text().replace("YOUR_API_KEY", "sk-real-key-000000000000"))
    assert check_client_configs([cc, codex]).status == PASS
    assert check_client_configs([tmp_path / "missing.json"]).status == SKIP


def test_anthropic_profile_passes(sim_keyed, keyed_env):
    assert statuses(run_checks(prof(sim_keyed.root, "anthropic"))) == [PASS] * 5


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (None, "not set"),
        ("", "empty"),
        ('"' + SIM_KEY + '"', "quotes"),
        (SIM_KEY + "\n", "whitespace"),
        ("YOUR_API_KEY", "placeholder"),
    ],
)
def test_key_variable_problems(monkeypatch, value, words):
    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    c = check_key(prof("http://127.0.0.1:1/v1"))
    assert c.status == FAIL and words in c.detail and ENV in c.fix
    assert SIM_KEY not in c.detail + c.fix


def test_missing_key_skips_network_checks(sim, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    checks = run_checks(prof(sim.url))
    assert statuses(checks) == [FAIL, PASS, SKIP, SKIP, SKIP]
    assert sim.control.stats()["requests"] == 0


@pytest.mark.parametrize(
    ("url", "protocol", "status", "words"),
    [
        ("https://h/api/v1", "openai", PASS, ""),
        ("https://h/api", "openai", WARN, "/v1"),
        ("https://h/v1/chat/completions", "openai", FAIL, "endpoint path"),
        ("https://h/api/v1?utm_source=blog", "openai", FAIL, "query"),
        ("https://h/api", "anthropic", PASS, ""),
        ("https://h/api/v1", "anthropic", FAIL, "/v1"),
        ("http://10.1.2.3/v1", "openai", WARN, "unencrypted"),
        ("h/v1", "openai", FAIL, "not an http"),
    ],
)
def test_base_url_rules(url, protocol, status, words):
    c = check_base_url(prof(url, protocol))
    assert c.status == status and words in c.detail + c.fix


def test_wrong_key_is_credential_with_fix(sim_keyed, monkeypatch):
    monkeypatch.setenv(ENV, "sk-canary-not-the-right-key-4242")
    checks = run_checks(prof(sim_keyed.url))
    assert statuses(checks) == [PASS, PASS, FAIL, SKIP, FAIL]
    assert "401" in checks[2].detail and ENV in checks[2].detail and "THIS provider" in checks[2].fix
    # one retry at most, and 401 is never retried: one request per network check
    assert sim_keyed.control.stats()["by_status"] == {"401": 2}


def test_missing_v1_is_endpoint_with_path_fix(sim, keyed_env):
    checks = run_checks(prof(sim.root + "/api"))
    assert statuses(checks) == [PASS, WARN, FAIL, SKIP, FAIL]
    assert "/api/v1" in checks[2].fix


def test_unlisted_model(sim, keyed_env):
    sim.control.set(strict_models=True)
    checks = run_checks(prof(sim.url, model="gpt-4o"))
    assert statuses(checks) == [PASS, PASS, PASS, FAIL, FAIL]
    assert "ept-sim-1" in checks[3].detail and "model" in checks[4].fix
    # The fix is chosen by the server's error code (ProviderError.code), not by the wording of the message.
    assert checks[4].fix.startswith("set `model` in the profile to a name the server lists")


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_no_model_list_is_a_warning_when_completions_work(sim, keyed_env, protocol):
    """A server without GET /models (404) passes the doctor if the tiny completion works, whatever the n check
    says (the Anthropic protocol skips it)."""
    sim.control.set(serve_models=False)
    base = sim.url if protocol == "openai" else sim.root
    checks = run_checks(prof(base, protocol=protocol))
    assert statuses(checks) == [PASS, PASS, WARN, SKIP, PASS] and ok(checks)
    assert "does not serve /models" in checks[2].fix and "404" in checks[2].detail
    assert checks[5].status == (WARN if protocol == "openai" else SKIP)


def test_server_down(sim, keyed_env):
    url = sim.url
    sim.stop()
    checks = run_checks(prof(url))
    assert statuses(checks) == [PASS, PASS, FAIL, SKIP, FAIL]
    assert "cannot connect" in checks[2].detail and "curl" in checks[2].fix


def test_missing_usage_fails(sim, keyed_env):
    sim.control.set(rate_missing_usage=1.0)
    checks = run_checks(prof(sim.url))
    assert statuses(checks) == [PASS, PASS, PASS, PASS, FAIL]
    assert "no usage" in checks[4].detail


def test_timeout_is_reported(sim, keyed_env):
    sim.control.set(rate_hang=1.0, hang_s=20)
    checks = run_checks(prof(sim.url), timeout=0.3)
    assert checks[4].status == FAIL and "timed out" in checks[4].detail


def run_cli(args: list[str], env_key: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if env_key is not None:
        env[ENV] = env_key
    return subprocess.run(
        [sys.executable, "-m", "elo_per_token", "doctor", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


@pytest.mark.slow
def test_cli_exit_codes_and_no_key_in_output(sim_keyed, tmp_path):
    pf = tmp_path / "profiles.toml"
    pf.write_text(f'[profiles.s]\nbase_url = "{sim_keyed.url}"\napi_key_env = "{ENV}"\nmodel = "ept-sim-1"\n')
    good = run_cli(["--profile", "s", "--profiles", str(pf)], SIM_KEY)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "All checks passed" in good.stdout and "sk-…WXYZ" in good.stdout
    wrong = "sk-canary-wrong-cli-key-00005555"
    bad = run_cli(["--profile", "s", "--profiles", str(pf)], wrong)
    assert bad.returncode == 1 and "FAIL" in bad.stdout and "401" in bad.stdout
    unknown = run_cli(["--profile", "nope", "--profiles", str(pf)], SIM_KEY)
    assert unknown.returncode == 2 and "unknown profile" in unknown.stderr
    for r in (good, bad, unknown):
        assert SIM_KEY not in r.stdout + r.stderr and wrong not in r.stdout + r.stderr
        assert "canary" not in r.stdout + r.stderr


def test_doctor_docs_cover_every_scenario_and_class():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_doctor_docs", REPO / "docs" / "make_doctor_docs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    md = (REPO / "docs" / "doctor.md").read_text()
    for sc in mod.SCENARIOS:
        assert f"## {sc.title}" in md, (
            f"docs/doctor.md is stale: rerun python docs/make_doctor_docs.py ({sc.title})"
        )
    for cls in ("credential", "endpoint", "transient", "permanent", "429"):
        assert cls in md
    assert (
        mod.DOC_KEY not in md and md.count("All checks passed.") == 2
    )  # all pass; n ignored (a warning only)
