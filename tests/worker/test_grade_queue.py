"""Least privilege: with EPT_GRADE_QUEUE=grade, code is graded by a separate Celery worker that holds no
provider key and no S3 credentials (a real Redis broker and a real `ept worker --queue grade` process)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from fixtures_services import start_celery_workers
from test_compose import compose  # noqa: F401 - the fixture

from elo_per_token.worker.graders.code import Limits
from elo_per_token.worker.sandbox import bwrap

needs_bwrap = pytest.mark.skipif(bwrap.probe() is not None, reason="no working bwrap here")
REPO = Path(__file__).resolve().parents[2]

CANARY = "sk-grader-canary-" + uuid.uuid4().hex[:8]


@pytest.fixture
def grader(tmp_path, redis_server, monkeypatch):
    queue = "grade-" + uuid.uuid4().hex[:6]
    # The grader's environment: the broker, nothing else of ours (the env below drops keys and AWS settings).
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "EPT_SIM_API_KEY", "OPENAI", "ANTHROPIC")) and "KEY" not in k
    }
    for k in list(os.environ):
        if k not in keep:
            monkeypatch.delenv(k)
    ws = start_celery_workers(1, redis_server.url, tmp_path / "grader", env={}, concurrency=2, queue=queue)
    monkeypatch.setenv("EPT_BROKER_URL", redis_server.url)
    monkeypatch.setenv("EPT_GRADE_QUEUE", queue)
    # The caller holds a key; the candidate below looks for it in the grader's environment.
    monkeypatch.setenv("EPT_SIM_API_KEY", CANARY)
    import elo_per_token.worker.celery_app as ca
    from elo_per_token.worker.graders.code import use_test_runner

    ca.__dict__.pop("app", None)  # built from the broker URL above
    yield ws
    ca.__dict__.pop("app", None)
    use_test_runner(None)  # the app built here routed this process's grading to the queue: no longer
    ws.stop()


@needs_bwrap
def test_code_is_graded_on_the_grade_queue_and_no_key_is_there_to_steal(grader):
    from elo_per_token.worker.celery_app import app, route_grading

    route_grading(app)  # what a worker does before each job: with EPT_GRADE_QUEUE set, grading goes there
    from elo_per_token.worker.graders import code as code_grader
    from elo_per_token.worker.graders.code import grade_code

    runner = code_grader._test_runner
    assert runner is not None and runner is not code_grader.run_tests

    task = {
        "entry_point": "f",
        "tests": ["assert f(1) == 2", "assert f(5) == 6"],
        "grader": {"type": "code", "timeout_s": 3},
    }
    ok = grade_code("def f(x):\n    return x + 1\n", task)
    assert ok.score == 1.0 and ok.correct
    half = grade_code("def f(x):\n    return 2\n", task)
    assert half.score == 0.5 and "1 of 2 tests failed" in half.details["reason"]
    # Even if the sandbox fell, the grader process has no key: its environment is all there is.
    leak = "import os\ndef f(x):\n    return repr(sorted(os.environ))\n"
    res = runner(leak, ["assert f(1) == 2"], "f", Limits(timeout_s=3))
    assert res["passed"] == 0 and CANARY not in repr(res)
    with open(f"/proc/{grader.procs[0].pid}/environ", "rb") as fh:
        env = fh.read().decode(errors="replace")
    assert CANARY not in env and "AWS_SECRET_ACCESS_KEY" not in env

    # The three verdicts came from the grader worker, not from this process.
    stats = app.control.inspect(timeout=2).stats() or {}
    done = sum(s.get("total", {}).get("ept.grade_code", 0) for s in stats.values())
    assert done == 3


def _secretless(env: dict) -> None:
    assert set(env) == {"EPT_BROKER_URL"}, env


def test_compose_grader_service_has_no_secrets(compose):  # noqa: F811
    r = compose("config", "--format", "json")
    assert r.returncode == 0, r.stderr
    svcs = json.loads(r.stdout)["services"]
    grader = svcs["grader"]
    assert "env_file" not in grader
    _secretless(grader["environment"])
    assert "--queue" in grader["command"] and "grade" in grader["command"]
    assert svcs["worker"]["environment"]["EPT_GRADE_QUEUE"] == "grade"
    # The same broker, as its own restricted user (deploy/README.md, "Broker users"), not the workers' login.
    g_url, w_url = (
        urlsplit(grader["environment"]["EPT_BROKER_URL"]),
        urlsplit(svcs["worker"]["environment"]["EPT_BROKER_URL"]),
    )
    assert (g_url.hostname, g_url.port, g_url.path) == (w_url.hostname, w_url.port, w_url.path)
    assert g_url.username == "grader" and g_url.password != w_url.password
    assert "AWS_SECRET_ACCESS_KEY" in svcs["worker"]["environment"]  # the worker has what the grader lacks
    assert "seccomp=unconfined" in grader["security_opt"]  # bwrap needs user namespaces; the worker does not
    assert not any("unconfined" in o for o in svcs["worker"].get("security_opt", []))


def test_k8s_grader_pod_has_no_secrets():
    dep = yaml.safe_load((REPO / "deploy" / "k8s" / "grader.yaml").read_text())
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert "envFrom" not in c and [e["name"] for e in c["env"]] == ["EPT_BROKER_URL"]
    assert pod["securityContext"]["runAsUser"] == 10001 and pod["automountServiceAccountToken"] is False
    assert c["args"][-2:] == ["--queue", "grade"]
    cfg = yaml.safe_load((REPO / "deploy" / "k8s" / "config.yaml").read_text())
    assert cfg["data"]["EPT_GRADE_QUEUE"] == "grade"


def test_a_grader_without_a_sandbox_refuses_to_start(tmp_path):
    import subprocess
    import sys

    env = {
        **os.environ,
        "EPT_SANDBOX_PYTHON": "/nonexistent/python3",
        "PYTHONPATH": str(REPO),
        "EPT_BROKER_URL": "redis://127.0.0.1:1/0",
    }
    p = subprocess.run(
        [sys.executable, "-m", "elo_per_token", "worker", "--queue", "grade"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2, p.stderr[-2000:]
    assert "this grader cannot run its sandbox" in p.stderr and "EPT_SANDBOX_PYTHON" in p.stderr
