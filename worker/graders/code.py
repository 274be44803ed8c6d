"""Code grader: run a candidate function against the task's tests in a separate, locked-down process.

Layers, each holding on its own:
* a fresh process (`python -I`, new session, empty temp cwd). A busy loop is stopped by the CPU-seconds
  limit (`timeout_s` of CPU, so a loaded machine does not fail honest candidates); anything else that
  overstays (sleeping, blocked) is killed with its whole process group at 3 x `timeout_s` wall clock;
* resource limits set in the child before exec (`resource.setrlimit`): CPU seconds, address space,
  file size, open files, and process count (stops fork bombs; as root the child also drops to `nobody`,
  because the kernel does not apply RLIMIT_NPROC to root);
* no network: a fresh network namespace (`unshare -n`, when the kernel lets us) AND an audit hook in the
  child that refuses sockets, subprocesses, fork/exec, os.system and ctypes, so it holds without privileges.
A candidate that trips any of them scores 0 with the reason.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from worker.graders.basic import GradeResult

NOBODY = 65534
WALL_FACTOR = 3

# Runs inside the child. The audit hook goes in before any candidate code runs; hooks cannot be removed.
_RUNNER = r'''
import sys
_BLOCKED = ("socket.", "subprocess.", "os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
            "os.exec", "os.kill", "os.killpg", "ctypes.", "pty.", "os.putenv", "webbrowser.", "urllib.Request")
def _guard(event, args):
    if event.startswith(_BLOCKED):
        raise PermissionError(f"sandbox: {event} is not allowed")
import io, json
payload = json.loads(sys.stdin.read())
if payload.get("audit_hook", True):
    sys.addaudithook(_guard)
nonce = payload["nonce"]
out = {"passed": 0, "total": len(payload["tests"]), "failures": [], "load_error": None}
real_stdout = sys.stdout
sys.stdout = sys.stderr = io.StringIO()
ns = {"__name__": "candidate"}
try:
    exec(compile(payload["code"], "<candidate>", "exec"), ns)
    if payload["entry_point"] not in ns:
        out["load_error"] = "entry point " + payload["entry_point"] + " is not defined"
except BaseException as e:
    out["load_error"] = type(e).__name__ + ": " + str(e)[:300]
if out["load_error"] is None:
    for t in payload["tests"]:
        try:
            exec(compile(t, "<test>", "exec"), dict(ns))
            out["passed"] += 1
        except BaseException as e:
            if len(out["failures"]) < 5:
                out["failures"].append({"test": t[:200], "error": type(e).__name__ + ": " + str(e)[:200]})
real_stdout.write("\n" + nonce + json.dumps(out) + "\n")
real_stdout.flush()
'''


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0  # CPU seconds for the whole run; the wall-clock backstop is WALL_FACTOR times this
    cpu_s: int = 5
    memory_mb: int = 512
    nproc: int = 64  # per-user process cap (the sandbox user's processes)
    fsize_mb: int = 4


@functools.cache
def _netns_prefix() -> tuple[str, ...]:
    """`unshare -n` (root) or `unshare -rn` (user namespaces) when that works here, else nothing."""
    exe = shutil.which("unshare")
    if not exe:
        return ()
    for flags in (("-n",), ("-rn",)):
        try:
            ok = subprocess.run([exe, *flags, "true"], capture_output=True, timeout=5).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return (exe, *flags)
    return ()


def _drop_user_prefix() -> tuple[str, ...]:
    # After `unshare -n` (which needs root), become nobody so RLIMIT_NPROC applies.
    exe = shutil.which("setpriv")
    if os.geteuid() == 0 and exe:
        return (exe, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--")
    return ()


def _set_limits(limits: Limits) -> None:
    # Runs in the child between fork and exec: only async-signal-tolerant calls (setrlimit) here.
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * mb, limits.memory_mb * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.fsize_mb * mb, limits.fsize_mb * mb))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.nproc, limits.nproc))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def sandbox_info() -> dict[str, Any]:
    """Which isolation layers are active on this machine (shown in grader details and docs)."""
    return {"netns": bool(_netns_prefix()), "drop_user": bool(_drop_user_prefix()), "audit_hook": True, "rlimits": True}


_CACHE: dict[tuple[Any, ...], dict[str, Any]] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_MAX = 4096


def run_tests(
    code: str, tests: list[str], entry_point: str, limits: Limits = Limits(), *, audit_hook: bool = True
) -> dict[str, Any]:
    """Run `tests` against `code` in the sandbox; returns passed/total/failures/reason (never raises).

    Results are memoised per (code, tests, limits): samples often repeat the same function, and a
    deterministic test run need not be repeated. Timeouts are not memoised (they can be load noise).
    audit_hook=False exists only so tests can show the other layers hold on their own.
    """
    key = (code, tuple(tests), entry_point, limits, audit_hook)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return dict(hit)
    for attempt in range(3):
        res = _run_tests(code, tests, entry_point, limits, audit_hook)
        # The wrappers (unshare/setpriv) failing before the candidate ran is our problem, not the
        # candidate's: e.g. the sandbox user's process cap is briefly full from another grader.
        if not str(res.get("reason") or "").startswith("sandbox could not start"):
            break
        time.sleep(0.2 * (attempt + 1))
    if not str(res.get("reason") or "").startswith("timeout"):
        with _CACHE_LOCK:
            if len(_CACHE) >= _CACHE_MAX:
                _CACHE.clear()
            _CACHE[key] = res
    return dict(res)


def _run_tests(code: str, tests: list[str], entry_point: str, limits: Limits, audit_hook: bool) -> dict[str, Any]:
    nonce = "EPT-RESULT-" + secrets.token_hex(8)
    payload = json.dumps(
        {"code": code, "tests": tests, "entry_point": entry_point, "nonce": nonce, "audit_hook": audit_hook}
    )
    cmd = [*_netns_prefix(), *_drop_user_prefix(), sys.executable, "-I", "-S", "-c", _RUNNER]
    with tempfile.TemporaryDirectory(prefix="ept-sandbox-") as cwd:
        os.chmod(cwd, 0o777)  # the dropped user may need a writable cwd
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
            env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"},
            start_new_session=True, preexec_fn=functools.partial(_set_limits, limits),
        )
        try:
            out, err = proc.communicate(payload.encode(), timeout=limits.timeout_s * WALL_FACTOR)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            out, err = b"", b""
        finally:
            _kill_group(proc)
    # pgid: the sandbox's process group (= its pid), so callers can check nothing of it survives.
    base = {"passed": 0, "total": len(tests), "failures": [], "returncode": proc.returncode, "pgid": proc.pid}
    if timed_out:
        return {**base, "reason": f"timeout: still running after {limits.timeout_s * WALL_FACTOR:g}s wall clock (killed)"}
    for line in reversed(out.decode(errors="replace").splitlines()):
        if line.startswith(nonce):
            res = json.loads(line[len(nonce):])
            reason = res["load_error"] and f"candidate failed to load: {res['load_error']}"
            if not reason and res["failures"]:
                reason = f"{res['total'] - res['passed']} of {res['total']} tests failed: {res['failures'][0]['error']}"
            return {**base, **res, "reason": reason or None}
    rc = proc.returncode
    first_err = err.decode(errors="replace").strip().splitlines()[:1] or [""]
    if first_err[0].startswith(("setpriv:", "unshare:")):
        return {**base, "reason": f"sandbox could not start: {first_err[0][:200]}"}
    if rc is not None and -rc == signal.SIGXCPU:
        return {**base, "reason": f"timeout: CPU limit of {limits.cpu_s}s exceeded (killed)"}
    why = f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exit code {rc}"
    tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
    return {**base, "reason": f"sandbox process died ({why}) {tail[0][:200]}".strip()}


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # Anything the candidate left behind in its process group dies with it; repeat briefly because a
    # fork loop can race a single signal.
    for _ in range(40):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            break
        if proc.poll() is None:
            proc.wait()
        time.sleep(0.005)
    proc.wait()


def grade_code(code: str | None, task: dict[str, Any], tests: list[str] | None = None) -> GradeResult:
    """Score = fraction of tests passed; correct = all passed. No code or a sandbox failure scores 0."""
    if not code:
        return GradeResult(0.0, False, {"grader": "code", "reason": "no code block in the answer"})
    opts = task.get("grader", {})
    timeout_s = float(opts.get("timeout_s", 5.0))
    limits = Limits(timeout_s=timeout_s, cpu_s=int(opts.get("cpu_s", max(1, round(timeout_s)))),
                    memory_mb=int(opts.get("memory_mb", 512)))
    tests = task["tests"] if tests is None else tests
    res = run_tests(code, tests, task["entry_point"], limits)
    score = res["passed"] / res["total"] if res["total"] else 0.0
    if res.get("load_error"):
        score = 0.0
    # The sandbox's pgid is a process id: it would make identical jobs write different ledger objects.
    details = {k: v for k, v in res.items() if k != "pgid"}
    return GradeResult(score, res["passed"] == res["total"] and res["total"] > 0, {"grader": "code", **details})
