"""The program that runs INSIDE the sandbox (stdlib only; its source is passed to `python -I -S -c`).

It reports values, never verdicts: each `assert` of a test was rewritten by worker/sandbox/checks.py into
`__ept_check__(k, lambda: <probe>, ...)`, where the probes are the parts of the assertion that depend on
the candidate (e.g. `f(1)`); the expected values stay outside. Here each probe is evaluated and serialised
as a plain value (only exact int/float/str/bool/None/list/tuple/dict/set/frozenset/bytes/complex: an object
with its own `__eq__` is refused), and the harness outside decides pass/fail. Candidate code can write
anything on stdout, but all it can ever contribute is values, so printing a "pass" achieves nothing.

Protocol (stdout): lines `MARKER + json`: {"load": error|null}, then per test {"t": i, "c": [[k, [probe
results]]...], "e": error|null}, then {"done": 1}. A probe result is {"v": encoded} or {"x": "Type: msg"}.
After the load report and after each test report, what the candidate printed since (its print() and writes to
sys.stdout/sys.stderr, kept up to OUTPUT_CAP characters in all, the rest counted) as {"o": text, "cut": n}:
evidence for the transcript only, never read for a verdict (worker/sandbox/checks.py ignores it).
"""

from __future__ import annotations  # annotations are never evaluated here: typing is not imported at run time

import json
import os
import resource
import signal
import sys

TYPE_CHECKING = False  # mypy reads the block below; the sandboxed run imports nothing for annotations
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import FrameType
    from typing import Any

MARKER = "\x1eEPT:"
_BLOCKED = (
    "socket.",
    "subprocess.",
    "os.system",
    "os.fork",
    "os.forkpty",
    "os.posix_spawn",
    "os.spawn",
    "os.exec",
    "os.kill",
    "os.killpg",
    "ctypes.",
    "pty.",
    "os.putenv",
    "webbrowser.",
    "urllib.Request",
)
MAX_CHECKS_PER_TEST = 1000
MAX_NODES = 200_000
OUTPUT_CAP = 16_000  # characters of the candidate's printed output kept (the worker shows at most 4,000)


class _Printed:
    """sys.stdout/sys.stderr of the candidate: the first OUTPUT_CAP characters kept, the rest only counted.

    Bounded whatever the candidate prints (a print loop costs CPU time, not memory), and never written to fd 1,
    so nothing it prints can interleave with or imitate the harness's report lines."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.kept = 0
        self.cut = 0

    def write(self, s: object) -> int:
        text = s if type(s) is str else str(s)
        room = OUTPUT_CAP - self.kept
        if room > 0:
            self.parts.append(text[:room])
            self.kept += min(len(text), room)
        self.cut += max(0, len(text) - max(room, 0))
        return len(text)

    def writelines(self, lines: Iterable[object]) -> None:
        for ln in lines:
            self.write(ln)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def take(self) -> tuple[str, int]:
        text, cut = "".join(self.parts), self.cut
        self.parts, self.cut = [], 0
        return text, cut


def _guard(event: str, args: tuple[Any, ...]) -> None:
    # An extra layer only: the namespaces and rlimits are the boundary.
    if event.startswith(_BLOCKED):
        raise PermissionError(f"sandbox: {event} is not allowed")


def _limits(lim: dict[str, int]) -> None:
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (lim["cpu_s"], lim["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (lim["memory_mb"] * mb, lim["memory_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["fsize_mb"] * mb, lim["fsize_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    # Counted per user namespace: only this sandbox's processes.
    resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _encode(v: Any, budget: list[int]) -> Any:
    # Exact types only: a subclass (or any object) could define __eq__/__hash__ to fake a match.
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError("value too large to compare")
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -(2**53) < v < 2**53 else {"i": hex(v)}
    if t is float:
        return {"f": v.hex()}
    if t is list:
        return [_encode(x, budget) for x in v]
    if t is tuple:
        return {"t": [_encode(x, budget) for x in v]}
    if t is dict:
        return {"d": [[_encode(k, budget), _encode(x, budget)] for k, x in v.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "fs": [_encode(x, budget) for x in v]}
    if t is bytes:
        return {"b": v.hex()}
    if t is complex:
        return {"c": [v.real.hex(), v.imag.hex()]}
    raise TypeError(
        f"returned a {t.__name__} object; only plain values (int, float, str, bool, None, list, "
        "tuple, dict, set, bytes) can be compared"
    )


def _err(e: BaseException) -> str:
    try:
        text = str(e)
    except BaseException:
        text = "?"
    return type(e).__name__ + (": " + text[:200] if text else "")


def _on_xcpu(signum: int, frame: FrameType | None) -> None:
    # This process is its namespace's pid 1, which the kernel does not kill with a default-action signal:
    # exit as SIGXCPU would have (the hard limit's SIGKILL, one second later, is the backstop).
    os._exit(128 + signal.SIGXCPU)


def main() -> None:
    payload = json.loads(sys.stdin.buffer.read())
    os.close(0)
    signal.signal(signal.SIGXCPU, _on_xcpu)
    _limits(payload["limits"])
    if payload.get("audit_hook", True):
        sys.addaudithook(_guard)
    out_fd = 1
    # The candidate's print() goes to a bounded buffer, reported as evidence only (its raw writes to fd 1/2
    # are capped and shown by the caller, never parsed as reports).
    printed = _Printed()
    sys.stdout = sys.stderr = printed
    encode, dumps, write, budget_max, take, cap = (
        _encode,
        json.dumps,
        os.write,
        MAX_NODES,
        printed.take,
        OUTPUT_CAP,
    )

    def emit(obj: dict[str, Any]) -> None:
        data = (MARKER + dumps(obj, allow_nan=False) + "\n").encode("utf-8", "surrogatepass")
        while data:
            data = data[write(out_fd, data) :]

    def emit_printed() -> None:
        # `take` was bound before any candidate code ran; what it returns is still checked (the candidate can
        # reach the buffer through sys.stdout and fill it with anything).
        try:
            text, cut = take()
            text = text[:cap] if type(text) is str else ""
            cut = cut if type(cut) is int and 0 <= cut < 2**53 else 0
        except BaseException:
            text, cut = "", 0
        if text or cut:
            emit({"o": text, "cut": cut})

    ns: dict[str, object] = {"__name__": "candidate"}
    load = None
    try:
        exec(compile(payload["code"], "<candidate>", "exec"), ns)
        if payload["entry_point"] not in ns:
            load = "entry point " + payload["entry_point"] + " is not defined"
    except BaseException as e:
        load = _err(e)
    emit({"load": load})
    emit_printed()
    if load is None:
        for i, src in enumerate(payload["tests"]):
            events: list[list[object]] = []

            def check(k: int, *thunks: Callable[[], Any], events: list[list[object]] = events) -> None:
                if len(events) >= MAX_CHECKS_PER_TEST:
                    raise RuntimeError("too many checks in one test")
                res = []
                for th in thunks:
                    try:
                        res.append({"v": encode(th(), [budget_max])})
                    except BaseException as e:
                        res.append({"x": _err(e)})
                events.append([k, res])

            g = dict(ns)
            g["__ept_check__"] = check
            err = None
            try:
                exec(compile(src, "<test>", "exec"), g)
            except BaseException as e:
                err = _err(e)
            emit({"t": i, "c": events, "e": err})
            emit_printed()
    emit({"done": 1})
    os._exit(0)


if __name__ == "__main__":
    main()
