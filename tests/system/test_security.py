"""Security: a canary API key used for a whole distributed sweep never appears in the ledger, the manifest, the
Celery messages (read from Redis while queued, bodies decoded), logs, reports or exception text; Celery refuses
non-JSON messages; compose keeps Redis and S3 off the host network with a Redis password; the worker image runs
as non-root; the code grader's sandbox blocks network, bounds time and memory, and cannot read the key; ledger
objects carry only their documented fields (no request headers)."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import pytest
from fixtures_faults import FAULT_KEY, wait_until, worker_env, write_plan, write_profiles, write_suite
from fixtures_services import start_celery_workers

REPO = Path(__file__).resolve().parents[2]
CANARY = FAULT_KEY
# Any 12+ character piece of the key would be a leak too (masks keep the last 4 only).
CANARY_PIECES = [CANARY, CANARY[3:15], CANARY[10:22]]
HEADERISH = re.compile(r"header|authori[sz]ation|api[_-]?key|bearer|x-ept", re.IGNORECASE)


def assert_clean(blob: bytes | str, where: str) -> None:
    b = blob.encode() if isinstance(blob, str) else blob
    for piece in CANARY_PIECES:
        assert piece.encode() not in b, f"canary key found in {where}"


def redis_dump(r: Any) -> bytes:
    """Every key and value in Redis, with kombu message bodies base64-decoded (a plain grep would miss them)."""
    out: list[bytes] = []

    def add(v: bytes) -> None:
        out.append(v)
        try:
            env = json.loads(v)
        except (ValueError, UnicodeDecodeError):
            return
        if (
            isinstance(env, list) and env and isinstance(env[0], str | bytes)
        ):  # unacked hash values: [msg, ex, rk]
            env = env[0] if isinstance(env[0], dict) else env
        if isinstance(env, dict) and isinstance(env.get("body"), str):
            with_b64 = env.get("properties", {}).get("body_encoding") == "base64"
            out.append(base64.b64decode(env["body"]) if with_b64 else env["body"].encode())

    for k in r.scan_iter(count=1000):
        out.append(k)
        t = r.type(k).decode()
        if t == "string":
            add(r.get(k) or b"")
        elif t == "list":
            for v in r.lrange(k, 0, -1):
                add(v)
        elif t == "hash":
            for f, v in r.hgetall(k).items():
                out.append(f)
                add(v)
        elif t == "set":
            out.extend(r.smembers(k))
        elif t == "zset":
            out.extend(r.zrange(k, 0, -1))
    return b"\n".join(out)


def _walk_keys(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [str(k) for k in obj] + [x for v in obj.values() for x in _walk_keys(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _walk_keys(v)]
    return []


@pytest.mark.slow
@pytest.mark.services
def test_canary_key_never_leaks_through_a_distributed_sweep(tmp_path, redis_server, s3_env, s3_bucket, make_sim,
                                                           monkeypatch):  # fmt: skip
    import boto3
    from rich.console import Console

    from elo_per_token.contracts.records import LINE_IDENTITY_KEYS, CallRecord, Outcome
    from elo_per_token.coordinator.plan import load_plan
    from elo_per_token.coordinator.sweep import execute, plan_jobs, print_summary
    from elo_per_token.egress.profiles import get_profile
    from elo_per_token.ledger import open_ledger
    from elo_per_token.worker.celery_app import make_app

    sim = make_sim(api_key=CANARY, latency_ms=20, seed=9)
    suite = write_suite(tmp_path / "suite.jsonl", per_family=3)
    profiles = write_profiles(tmp_path / "profiles.toml", sim.url)
    monkeypatch.setenv("EPT_PROFILES", str(profiles))
    monkeypatch.setenv("EPT_SIM_API_KEY", CANARY)
    queue = "sec-" + uuid.uuid4().hex[:8]
    ledger = f"s3://{s3_bucket}/ledger"
    plan = load_plan(write_plan(tmp_path / "plan.toml", name="canary", suite=suite, ledger=ledger, queue=queue,
                                per_family=3))  # fmt: skip
    jobs = plan_jobs(plan)
    r = redis_server.client()
    console_buf = io.StringIO()
    console = Console(file=console_buf, width=200)

    # Enqueue with no worker yet, so the messages sit in Redis where we can read them.
    result: dict[str, Any] = {}
    t = threading.Thread(
        target=lambda: result.update(
            out=execute(
                plan,
                jobs,
                profile=get_profile("fault-sim"),
                broker_url=redis_server.url,
                console=console,
                analyze=True,
            )
        )
    )
    t.start()
    messages = -(-len(jobs) // plan.jobs_per_message)  # jobs go jobs_per_message to a message
    wait_until(lambda: r.llen(queue) >= messages, 30, "all jobs queued")
    queued = redis_dump(r)
    assert (
        b'"profile": "fault-sim"' in queued and b"EPT_SIM_API_KEY" not in queued
    )  # we read real job payloads
    assert_clean(queued, "Redis while jobs are queued")

    env = {**s3_env.env(), **worker_env(), "EPT_PROFILES": str(profiles), "EPT_SIM_API_KEY": CANARY}
    workers = start_celery_workers(1, redis_server.url, tmp_path / "w", env=env, concurrency=4, queue=queue)
    try:
        t.join(120)
        assert not t.is_alive()
        out = result["out"]
        assert out.ok, dict(out.tally.failures)
        print_summary(out, console)
        assert_clean(redis_dump(r), "Redis after the run (results, claims, rate limits)")

        # Celery refuses anything but JSON: a pickled job is never run.
        extra = plan_jobs(load_plan(write_plan(tmp_path / "plan2.toml", name="pickled", suite=suite, ledger=ledger,
                                               queue=queue, per_family=1)))[0]  # fmt: skip
        sim.control.reset()
        app = make_app(redis_server.url)
        ctx = {"ledger": ledger, "base_url": None, "rpm": None, "tpm": None}
        app.send_task("ept.run_job", args=[extra.to_dict(), ctx], queue=queue, serializer="pickle")
        time.sleep(4)
        app.close()
        assert sim.control.stats()["requests"] == 0
        assert not open_ledger(ledger).has_job("pickled", extra.key)
    finally:
        workers.stop()
    logs = b"".join(p.read_bytes() for p in workers.logs if p.exists())
    assert_clean(logs, "worker logs")
    assert b"pickle" in logs  # the refusal was logged (and so the message reached the worker)

    # Every object in the bucket: ledger job objects, manifest, failures.
    s3 = boto3.client("s3")
    names = [
        o["Key"]
        for p in s3.get_paginator("list_objects_v2").paginate(Bucket=s3_bucket)
        for o in p.get("Contents", [])
    ]
    assert any(n.endswith("manifest.json") for n in names) and sum("/jobs/" in n for n in names) == len(jobs)
    allowed = (set(LINE_IDENTITY_KEYS) | set(CallRecord.__dataclass_fields__) | set(Outcome.__dataclass_fields__)
               | {"started_at", "finished_at", "task_digest"})  # fmt: skip
    for n in names:
        body = s3.get_object(Bucket=s3_bucket, Key=n)["Body"].read()
        assert_clean(body, n)
        if "/jobs/" in n:
            for line in body.decode().splitlines():
                rec = json.loads(line)
                if rec["kind"] in ("call", "outcome"):
                    assert set(rec) <= allowed, (n, set(rec) - allowed)
                bad = [k for k in _walk_keys(rec) if HEADERISH.search(k)]
                assert not bad, (n, bad)
    m = open_ledger(ledger).get_manifest("canary")
    assert m["profile"]["api_key_env"] == "EPT_SIM_API_KEY" and not [
        k for k in _walk_keys(m) if "key" in k.lower() and k not in ("api_key_env", "declares_keys")
    ]

    # The coordinator's terminal output and the reports.
    assert_clean(console_buf.getvalue(), "coordinator output")
    rep = tmp_path / "report"
    cp = subprocess.run(
        [sys.executable, "-m", "elo_per_token", "analyze", open_ledger(ledger).run_url("canary") + "/jobs", "--rounds", "0",
         "--no-plots", "--out", str(rep)],
        capture_output=True, env={**os.environ, **s3_env.env()}, timeout=120,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr.decode()[-2000:]
    assert_clean(cp.stdout + cp.stderr, "ept analyze output")
    for f in rep.iterdir():
        assert_clean(f.read_bytes(), f"report {f.name}")


def test_exception_text_never_carries_the_key(make_sim, monkeypatch):
    """401, 404 and connection failures: message, str, repr and the formatted traceback are all clean."""
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.egress.errors import ProviderError
    from elo_per_token.egress.profiles import Profile

    sim = make_sim(api_key="sk-some-other-key-0000000000000")
    monkeypatch.setenv("EPT_SIM_API_KEY", CANARY)
    base = {"name": "sec", "protocol": "openai", "api_key_env": "EPT_SIM_API_KEY", "model": "ept-sim-1",
            "timeout": 3.0, "max_retries": 0}  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    cases = [sim.url, sim.url.replace("/v1", "/nope"), dead]
    for url in cases:
        client = ProviderClient(Profile(base_url=url, **base))
        with pytest.raises(ProviderError) as ei:
            client.chat([{"role": "user", "content": f"my key is {CANARY}"}])
        e = ei.value
        text = "\n".join([e.message, str(e), repr(e), "".join(traceback.format_exception(e))])
        assert_clean(text, f"ProviderError for {url}")


def test_credential_error_names_env_var_and_masks(make_sim, monkeypatch):
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.egress.errors import ProviderError
    from elo_per_token.egress.profiles import Profile

    sim = make_sim(api_key="sk-some-other-key-0000000000000")
    monkeypatch.setenv("EPT_SIM_API_KEY", CANARY)
    p = Profile(name="sec", protocol="openai", base_url=sim.url, api_key_env="EPT_SIM_API_KEY", model="ept-sim-1",
                max_retries=0)  # fmt: skip
    with pytest.raises(ProviderError) as ei:
        ProviderClient(p).chat([{"role": "user", "content": "hi"}])
    assert ei.value.error_class == "credential" and "EPT_SIM_API_KEY" in ei.value.message
    assert "WXYZ" in ei.value.message  # the mask keeps the last four characters only
    assert_clean(ei.value.message, "credential message")


# ---- configuration: Celery, compose, Dockerfile ----------------------------------------------------------------


def test_celery_accepts_json_only():
    from elo_per_token.worker.celery_app import make_app

    c = make_app("redis://127.0.0.1:1/0").conf
    assert list(c.accept_content) == ["json"] and list(c.result_accept_content) == ["json"]
    assert c.task_serializer == "json" and c.result_serializer == "json"
    assert c.task_acks_late and c.task_reject_on_worker_lost and c.worker_prefetch_multiplier == 1


def _compose() -> dict[str, Any]:
    import yaml

    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_compose_keeps_redis_and_s3_off_the_host_and_sets_a_redis_password():
    services = _compose()["services"]
    for name in ("redis", "s3"):
        svc = services[name]
        assert "ports" not in svc, f"{name} publishes ports to the host"
        assert svc.get("network_mode") != "host"
    assert all(s.get("network_mode") != "host" for s in services.values())
    # The password comes from the env file into Redis's environment and a config file, never its command line.
    cmd = " ".join(services["redis"]["command"])
    assert "requirepass %s" in cmd and '"$$REDIS_PASSWORD"' in cmd and "--requirepass" not in cmd, cmd
    assert services["redis"]["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD")
    # Every Redis client in the stack authenticates: as the default user with that password, or as `grader`.
    urls = [
        str(v)
        for s in services.values()
        for v in (s.get("environment") or {}).values()
        if "redis://" in str(v)
    ]
    assert not [c for s in services.values() for c in (s.get("command") or []) if "redis://" in str(c)]
    assert urls and all(":${REDIS_PASSWORD" in u or "grader:${REDIS_GRADER_PASSWORD" in u for u in urls), urls
    # Only loopback publishing anywhere (e.g. Flower's UI).
    for s in services.values():
        for p in s.get("ports") or []:
            assert str(p).startswith("127.0.0.1:"), p
    text = (REPO / "docker-compose.yml").read_text()
    assert not re.search(r"sk-[A-Za-z0-9]{8,}", text)


def test_worker_image_runs_as_non_root():
    lines = [ln.strip() for ln in (REPO / "deploy" / "Dockerfile").read_text().splitlines()]
    last_from = max(i for i, ln in enumerate(lines) if ln.upper().startswith("FROM "))
    users = [ln.split(None, 1)[1] for ln in lines[last_from:] if ln.upper().startswith("USER ")]
    assert users, "the runtime stage never switches user"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), user
    after_user = lines[max(i for i, ln in enumerate(lines) if ln.upper().startswith("USER ")) :]
    assert not any(ln.upper().startswith("USER ROOT") for ln in after_user)


# ---- the code grader's sandbox ----------------------------------------------------------------------------------


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                c, _ = srv.accept()
                accepted.append(1)
                c.close()
            except OSError:
                continue

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    yield srv.getsockname()[1], accepted
    stop.set()
    th.join(2)
    srv.close()


def test_sandbox_blocks_network_bounds_time_and_memory_and_hides_the_key(listener, monkeypatch):
    from elo_per_token.worker.graders.code import Limits, run_tests

    port, accepted = listener
    net = f"import socket\ndef f():\n    socket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n    return 1\n"
    r = run_tests(net, ["assert f() == 1"], "f", Limits(timeout_s=3))
    assert r["passed"] == 0
    time.sleep(0.3)
    assert accepted == [], "the candidate reached a socket on the host"

    t0 = time.monotonic()
    r = run_tests("def f():\n    while True:\n        pass\n", ["f()"], "f", Limits(timeout_s=1, cpu_s=1))
    assert r["passed"] == 0 and time.monotonic() - t0 < 15

    r = run_tests("def f():\n    return len(bytearray(2 * 1024 ** 3))\n", ["assert f() > 0"], "f",
                  Limits(timeout_s=3, memory_mb=256))  # fmt: skip
    assert r["passed"] == 0

    # The worker's environment (where the key lives) is not the candidate's.
    monkeypatch.setenv("EPT_SIM_API_KEY", CANARY)
    leak = "import os\ndef f():\n    raise ValueError(repr(sorted(os.environ.items())))\n"
    r = run_tests(leak, ["f()"], "f", Limits(timeout_s=3))
    assert r["passed"] == 0
    assert_clean(json.dumps(r), "sandbox result")
