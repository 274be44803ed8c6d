"""The exported client configs, proved by the clients themselves: Codex CLI and Claude Code, installed from npm
at pinned versions, run one prompt each against `ept simulate` (a subprocess) through `ept profiles export`.

The clients are installed once into $EPT_NPM_CLIENTS (default ~/.cache/ept/npm-clients); .ci/run installs
node/npm. Without npm the tests are skipped, saying so."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CODEX = "@openai/codex@0.171.0"
CLAUDE = "@anthropic-ai/claude-code@2.1.332"
KEY = "sk-sim-clients-0123456789abcdef"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clients() -> Path:
    if shutil.which("npm") is None:
        pytest.skip("npm not installed (.ci/run installs it): cannot run the real clients")
    root = Path(os.environ.get("EPT_NPM_CLIENTS") or Path.home() / ".cache" / "ept" / "npm-clients")
    bins = root / "node_modules" / ".bin"
    marker = root / "pinned.txt"
    if not (marker.exists() and marker.read_text() == f"{CODEX} {CLAUDE}" and (bins / "codex").exists()):
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(root), CODEX, CLAUDE],
                       check=True, capture_output=True, timeout=900)  # fmt: skip
        marker.write_text(f"{CODEX} {CLAUDE}")
    return bins


@pytest.fixture(scope="module")
def simulator(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    (d / "sim.toml").write_text(f'api_key = "{KEY}"\n')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "elo_per_token", "simulate", "--port", str(port), "--config", str(d / "sim.toml")],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    root = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(root + "/_sim/stats", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    profiles = d / "profiles.toml"
    profiles.write_text(
        f'[profiles.simc]\nbase_url = "{root}/v1"\napi_key_env = "SIMC_KEY"\nmodel = "ept-sim-1"\n'
        f'[profiles.sima]\nprotocol = "anthropic"\nbase_url = "{root}"\napi_key_env = "SIMA_KEY"\nmodel = "ept-sim-1"\n'
    )
    yield root, profiles
    proc.terminate()
    proc.wait(10)


def _stats(root: str) -> dict:
    return json.loads(urllib.request.urlopen(root + "/_sim/stats", timeout=5).read())


def _export(profiles: Path, name: str, to: str) -> str:
    r = subprocess.run([sys.executable, "-m", "elo_per_token", "profiles", "export", name, "--to", to, "--profiles",
                        str(profiles)], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    return r.stdout


def test_codex_exec_with_the_exported_config_reaches_the_simulator(clients, simulator, tmp_path):
    root, profiles = simulator
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(_export(profiles, "simc", "codex"))
    urllib.request.urlopen(urllib.request.Request(root + "/_sim/reset", data=b"{}", method="POST"))
    r = subprocess.run([str(clients / "codex"), "exec", "--skip-git-repo-check", "What is 6 times 7?"],
                       capture_output=True, text=True, timeout=180, cwd=tmp_path,
                       env={**os.environ, "CODEX_HOME": str(home), "SIMC_KEY": KEY})  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    st = _stats(root)
    assert st["by_route"].get("responses", 0) >= 1 and st["by_status"].get("200", 0) >= 1, st
    assert "Answer:" in r.stdout  # the simulator's reply came back through the Responses stream


def test_claude_p_with_the_exported_settings_reaches_the_simulator(clients, simulator, tmp_path):
    root, profiles = simulator
    settings = _export(profiles, "sima", "claude-code")
    assert "YOUR_API_KEY" in settings
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(
        settings.replace("YOUR_API_KEY", KEY)
    )  # the user's one edit
    urllib.request.urlopen(urllib.request.Request(root + "/_sim/reset", data=b"{}", method="POST"))
    r = subprocess.run([str(clients / "claude"), "-p", "What is 6 times 7?"], capture_output=True, text=True,
                       timeout=180, cwd=tmp_path, env={**os.environ, "HOME": str(home)})  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    st = _stats(root)
    assert st["by_route"].get("messages", 0) >= 1 and st["by_status"].get("200", 0) >= 1, st
    assert "Answer:" in r.stdout
