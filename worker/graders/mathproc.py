"""math-verify in killable child processes: a reply can make sympy compute for ever, the worker cannot.

math-verify bounds its work with signal.alarm, which works only in a process's main thread, and every job
runs in a thread: `Answer: $9^{9^{9}}$` froze `ept sweep` for 1,255 s (SIGTERM ignored: the GIL was held in
sympy's integer power), `\\binom{10^9}{5\\cdot10^8}` > 90 s, 2,000 nested `\\frac` 14.8 s. Here each check
is sent to a small pool of persistent child processes (`python -m elo_per_token.worker.graders.mathproc`),
where math-verify runs in the main thread with its own timeouts; the worker waits at most TIMEOUT_S and
then SIGKILLs the child (a new one starts on the next check). Children also refuse more than
MEMORY_MB of address space and more than TIMEOUT_S + 5 s of CPU per check (a backstop for a child whose
worker died), and get an environment without the worker's secrets.

Settings (environment): EPT_MATH_TIMEOUT_S (default 10), EPT_MATH_PROCS (children, default 2),
EPT_MATH_MEMORY_MB (default 1024).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elo_per_token.contracts.settings import read_float, read_int
from elo_per_token.worker.graders.registry import GradingUnavailable

START_TIMEOUT_S = (
    120.0  # importing sympy on a loaded machine; a child that never says "ready" is infrastructure
)


@dataclass(frozen=True)
class MathSettings:
    """EPT_MATH_TIMEOUT_S, EPT_MATH_PROCS and EPT_MATH_MEMORY_MB as values: read once where a worker starts
    (`configure`) or when this process's pool of math children is made, never per comparison."""

    timeout_s: float = 10.0  # one symbolic comparison
    procs: int = 2  # child processes (at least 1)
    memory_mb: int = 1024  # RLIMIT_AS of each child

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> MathSettings:
        """The settings from `env` (default: the process environment); a bad value is an InputError naming it."""
        return cls(
            timeout_s=read_float("EPT_MATH_TIMEOUT_S", env),
            procs=max(1, read_int("EPT_MATH_PROCS", env)),
            memory_mb=read_int("EPT_MATH_MEMORY_MB", env),
        )

    def child_env(self) -> dict[str, str]:
        """The variables that hand these settings to a math child (its own start reads them: its edge)."""
        return {"EPT_MATH_TIMEOUT_S": repr(self.timeout_s), "EPT_MATH_MEMORY_MB": str(self.memory_mb)}


_configured: MathSettings | None = None


def configure(settings: MathSettings | None) -> None:
    """Install the settings of this process's math pool (None: read the environment when the pool is made).
    Called at the worker's start; a pool made before keeps its settings until `close`."""
    global _configured
    _configured = settings


def current() -> MathSettings:
    """The configured settings, else the environment's now."""
    return _configured if _configured is not None else MathSettings.from_env()


def timeout_s() -> float:
    """Seconds one symbolic comparison may take (the current settings)."""
    return current().timeout_s


@dataclass(frozen=True)
class MathVerdict:
    equal: bool
    parsed: bool  # the answer parsed as math at all (for the reason given)
    timed_out: bool = False
    error: str | None = None  # the child died or refused (memory): the candidate's answer is still the cause


def _child_env(settings: MathSettings) -> dict[str, str]:
    # No provider keys, broker or S3 credentials: only what finds the interpreter and this package, and the
    # pool's own settings (not the environment's: a worker configured at start hands those on).
    keep = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "HOME", "TMPDIR")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, **settings.child_env()}


class _Child:
    """One math-verify process, asked one JSON line at a time."""

    def __init__(self, settings: MathSettings) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "elo_per_token.worker.graders.mathproc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_child_env(settings),
            close_fds=True,
            start_new_session=True,  # a Ctrl-C at the terminal is the worker's to handle, not the child's
        )
        self.buf = b""
        if self._line(START_TIMEOUT_S) != b"ready":
            self.kill()
            raise GradingUnavailable("the math-verify process did not start (is math-verify installed?)")

    def _line(self, timeout: float) -> bytes | None:
        """The next line from the child, or None at the deadline or if the child is gone."""
        stdout = self.proc.stdout
        if stdout is None:
            return None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(stdout, selectors.EVENT_READ)
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    return None
                chunk = os.read(stdout.fileno(), 65536)
                if not chunk:
                    return None
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def ask(self, answer: str, reference: str, timeout: float) -> dict[str, Any] | None:
        if self.proc.stdin is None:
            return None
        try:
            self.proc.stdin.write(json.dumps({"a": answer, "r": reference}).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        line = self._line(timeout)
        if line is None:
            return None
        try:
            out = json.loads(line)
        except ValueError:
            return None
        return out if isinstance(out, dict) else None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        self.proc.wait()


class _Pool:
    def __init__(self, settings: MathSettings) -> None:
        self.settings = settings
        self.lock = threading.Lock()
        self.idle: list[_Child] = []
        self.slots = threading.BoundedSemaphore(settings.procs)

    def check(self, answer: str, reference: str) -> MathVerdict:
        limit = self.settings.timeout_s
        with self.slots:
            with self.lock:
                child = self.idle.pop() if self.idle else None
            if child is None or child.proc.poll() is not None:
                child = _Child(self.settings)
            out = child.ask(answer, reference, limit)
            if out is None:
                alive = child.proc.poll() is None
                child.kill()  # stuck in sympy (or dead): killed, never reused
                if alive:
                    return MathVerdict(
                        False,
                        False,
                        timed_out=True,
                        error=f"math check still running after {limit:g}s (killed)",
                    )
                return MathVerdict(False, False, error="the math check process died (memory or CPU limit)")
            with self.lock:
                self.idle.append(child)
        return MathVerdict(bool(out.get("equal")), bool(out.get("parsed")), error=out.get("error"))

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for c in idle:
            c.kill()


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def check(answer: str, reference: str) -> MathVerdict:
    """Whether `answer` equals `reference` by math-verify, computed in a child process with a deadline."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = _Pool(current())
        pool = _POOL
    return pool.check(answer, reference)


def close() -> None:
    """Stop the children (they also exit when the worker closes their stdin, i.e. when it exits)."""
    with _POOL_LOCK:
        if _POOL is not None:
            _POOL.close()


# ---- the child ------------------------------------------------------------------------------------


def _serve() -> None:
    import resource

    settings = MathSettings.from_env()  # the child's edge: the parent put its pool's settings in this env
    mb = settings.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mb, mb))
    from elo_per_token.worker.graders.mathsym import parse_here, verify_here

    parse_here("1")  # warm up sympy's parsers before saying ready
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    cpu_extra = int(settings.timeout_s) + 5
    for raw in sys.stdin.buffer:
        # CPU backstop per check: a child whose worker is gone (no one to kill it) stops on its own.
        used = resource.getrusage(resource.RUSAGE_SELF)
        now = int(used.ru_utime + used.ru_stime) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (now + cpu_extra, resource.RLIM_INFINITY))
        try:
            req = json.loads(raw)
            got = parse_here(str(req["a"]))
            equal = bool(got) and verify_here(str(req["a"]), str(req["r"]), got)
            reply: dict[str, Any] = {"equal": equal, "parsed": bool(got)}
        except Exception as e:  # any failure is a reason for this answer, never a dead child
            reply = {"equal": False, "parsed": False, "error": _describe(e)}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


def _describe(e: BaseException) -> str:
    try:
        return f"{type(e).__name__}: {str(e)[:200]}"
    except Exception:  # a message that cannot be built (an int past the digit limit inside it)
        return type(e).__name__


if __name__ == "__main__":
    _serve()
