"""Code grader: run a candidate function against the task's tests in a bubblewrap sandbox.

Layers (docs/reliability.md, "Hostile input", states the boundary):
* worker/sandbox/bwrap.py: new user/pid/net/ipc/uts/mount namespaces, read-only system binds only, private
  size-capped /tmp and /dev/shm, no capabilities, empty environment, own session; as root a fresh
  unprivileged uid per run. A hard wall-clock deadline (WALL_FACTOR x timeout_s) kills the whole namespace;
  output past a few MB kills it too (the worker never buffers more);
* rlimits set inside before candidate code runs: CPU seconds (`timeout_s` of CPU, so a loaded machine does
  not fail honest candidates), address space, processes, file size, open files;
* worker/sandbox/checks.py: the sandbox reports plain values, the worker decides pass/fail, so a forged
  result line, an early exit or an always-equal object scores 0;
* the old audit hook (sockets, subprocesses, fork/exec, ctypes refused) stays inside as an extra layer.
Where bwrap cannot run, grading refuses with SandboxUnavailable naming the fix: never unsandboxed.
A candidate that trips any layer scores 0 with the reason.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from elo_per_token.contracts.graders import check_code
from elo_per_token.contracts.tasks import Task
from elo_per_token.contracts.transcripts import clip
from elo_per_token.worker.graders.extract import extract_code
from elo_per_token.worker.graders.registry import Answered, Grader, GradeResult
from elo_per_token.worker.sandbox import budget, bwrap, checks
from elo_per_token.worker.sandbox.bwrap import SandboxUnavailable

__all__ = ["Limits", "SandboxUnavailable", "grade_code", "run_tests", "sandbox_info"]

WALL_FACTOR = 3
MAX_STDOUT = 8 * 1024 * 1024  # the harness's reports; a candidate writing more is killed
MAX_STDERR = 64 * 1024
MARKER = b"\x1eEPT:"  # the harness's report lines (worker/sandbox/harness.py)
_HARNESS = os.path.join(os.path.dirname(bwrap.__file__), "harness.py")


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0  # CPU seconds for the whole run; the wall-clock backstop is WALL_FACTOR times this
    cpu_s: int = 5
    memory_mb: int = 512
    # Processes inside this sandbox (counted per user namespace). Address space is per process, so the
    # sandbox's memory can reach nproc x memory_mb: keep it small, and bound the grader's container/pod too.
    nproc: int = 16
    fsize_mb: int = 4


def sandbox_info() -> dict[str, Any]:
    """Which isolation layers are active on this machine (shown in docs and tests)."""
    why = bwrap.probe()
    info: dict[str, Any] = {
        "bwrap": why is None,
        "audit_hook": True,
        "rlimits": True,
        "unforgeable_verdicts": True,
    }
    if why is None:
        info.update(
            interpreter=bwrap.interpreter(), uid_drop=os.geteuid() == 0, whole_sandbox=budget.describe()
        )
    else:
        info["unavailable"] = why
    return info


_CACHE: dict[tuple[Any, ...], dict[str, Any]] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_MAX = 4096
_PREP: dict[str, checks.Prepared] = {}


def _prepared(test: str) -> checks.Prepared:
    p = _PREP.get(test)
    if p is None:
        p = checks.prepare(test)
        with _CACHE_LOCK:
            if len(_PREP) >= _CACHE_MAX:
                _PREP.clear()
            _PREP[test] = p
    return p


def run_tests(
    code: str, tests: list[str], entry_point: str, limits: Limits = Limits(), *, audit_hook: bool = True
) -> dict[str, Any]:
    """Run `tests` against `code` in the sandbox; returns passed/total/failures/reason.

    Raises SandboxUnavailable (with the fix) when this machine cannot sandbox; never raises for anything the
    candidate does. Results are memoised per (code, tests, limits): samples often repeat the same function.
    Timeouts and kills are not memoised (they can be load noise). audit_hook=False exists only so tests can
    show the other layers hold on their own.
    """
    key = (code, tuple(tests), entry_point, limits, audit_hook)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return dict(hit)
    bwrap.require()
    res = _run_tests(code, tests, entry_point, limits, audit_hook)
    if res.pop("_memo", False):
        with _CACHE_LOCK:
            if len(_CACHE) >= _CACHE_MAX:
                _CACHE.clear()
            _CACHE[key] = res
    return dict(res)


def _run_tests(
    code: str, tests: list[str], entry_point: str, limits: Limits, audit_hook: bool
) -> dict[str, Any]:
    preps = [_prepared(t) for t in tests]
    payload = json.dumps(
        {
            "code": code,
            "entry_point": entry_point,
            "tests": [p.sandbox_src for p in preps],
            "limits": {k: v for k, v in asdict(limits).items() if k != "timeout_s"},
            "audit_hook": audit_hook,
        }
    )
    with open(_HARNESS, encoding="utf-8") as fh:
        harness_src = fh.read()
    wall = limits.timeout_s * WALL_FACTOR
    run = bwrap.run(
        ["-I", "-S", "-c", harness_src],
        payload.encode(),
        wall_s=wall,
        max_stdout=MAX_STDOUT,
        max_stderr=MAX_STDERR,
    )
    base = {
        "passed": 0,
        "total": len(tests),
        "failures": [],
        "load_error": None,
        "returncode": run.returncode,
        "pidns": run.pidns,
        "sandbox_output": _sandbox_output(run.stdout, run.stderr),
    }
    if run.overflow:
        cap = MAX_STDOUT if run.overflow == "stdout" else MAX_STDERR
        return {**base, "reason": f"output limit exceeded: more than {cap} bytes on {run.overflow} (killed)"}
    if run.timed_out:
        return {**base, "reason": f"timeout: still running after {wall:g}s wall clock (killed)"}
    try:
        load, lines, done = checks.parse_report(run.stdout, MARKER)
    except checks.Tampered as e:
        return {**base, "reason": f"result channel tampered with ({e}): graded as failed", "_memo": True}
    if not done:
        return {**base, "reason": _death_reason(run, limits), "load_error": load}
    if load is not None:
        return {**base, "load_error": load, "reason": f"candidate failed to load: {load}", "_memo": True}
    passed = 0
    failures: list[dict[str, str]] = []
    try:
        for i, (t, prep) in enumerate(zip(tests, preps, strict=True)):
            why = checks.verdict(prep, lines.get(i))
            if why is None:
                passed += 1
            elif len(failures) < 5:
                failures.append({"test": t[:200], "error": why})
    except checks.Tampered as e:
        return {**base, "reason": f"result channel tampered with ({e}): graded as failed", "_memo": True}
    reason = None
    if failures:
        reason = f"{len(tests) - passed} of {len(tests)} tests failed: {failures[0]['error']}"
    return {**base, "passed": passed, "failures": failures, "reason": reason, "_memo": True}


def _sandbox_output(stdout: bytes, stderr: bytes, limit: int = 4000) -> str:
    """What the candidate printed (print() and sys.stdout/sys.stderr, reported by the harness on its own
    channel), wrote raw to fd 1 (without the harness's report lines) and to stderr: at most `limit`
    characters, start and end kept, every cut marked, control characters shown escaped. Transcript evidence
    only (worker.transcript takes it out of the job object); no verdict is read from it."""
    printed, cut = checks.printed_output(stdout, MARKER)
    if cut:
        printed += f"\n…[ept: {cut} more characters printed in the sandbox, not kept]…"
    # split("\n"), not splitlines(): that also splits at the marker's \x1e and would keep the report lines
    raw = [ln for ln in stdout.decode(errors="replace").split("\n") if MARKER.decode() not in ln]
    parts = [
        ("printed", printed.strip()),
        ("stdout (raw fd 1)", "\n".join(raw).strip()),
        ("stderr", stderr.decode(errors="replace").strip()),
    ]
    text = "".join(f"{label}:\n{_visible(body)}\n" for label, body in parts if body)
    return clip(text, limit) if len(text) > limit else text


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _visible(text: str) -> str:
    """Control characters (terminal escapes, NUL, the report marker) and lone surrogates as visible escapes."""
    return _CONTROL.sub(
        lambda m: f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 256 else f"\\u{ord(m.group(0)):04x}", text
    )


def _death_reason(run: bwrap.RunResult, limits: Limits) -> str:
    rc = run.returncode
    err = run.stderr.decode(errors="replace").strip().splitlines()
    if err and err[0].startswith("bwrap:"):
        return f"sandbox could not start: {err[0][:200]}"
    if rc == 128 + 24:  # SIGXCPU
        return f"timeout: CPU limit of {limits.cpu_s}s exceeded (killed)"
    why = f"killed by signal {rc - 128}" if rc is not None and rc > 128 else f"exit code {rc}"
    tail = err[-1:] or [""]
    return f"sandbox process ended before reporting ({why}) {tail[0][:200]}".strip()


TestRunner = Callable[[str, list[str], str, Limits], dict[str, Any]]
# Where the tests run: None = run_tests, in this process's sandbox. A process whose code grading goes to the
# grader queue installs that queue's runner (worker/celery_app.py route_grading): the grader receives its
# transport instead of importing it.
_test_runner: TestRunner | None = None


def use_test_runner(runner: TestRunner | None) -> None:
    """Run the code grader's tests with `runner` from now on in this process (None: locally, run_tests)."""
    global _test_runner
    _test_runner = runner


def grade_code(code: str | None, task: Task, tests: list[str] | None = None) -> GradeResult:
    """Score = fraction of tests passed; correct = all passed. No code or a sandbox failure scores 0."""
    if not code:
        return GradeResult(0.0, False, {"grader": "code", "reason": "no code block in the answer"})
    opts = task.get("grader", {})
    timeout_s = float(opts.get("timeout_s", 5.0))
    limits = Limits(
        timeout_s=timeout_s,
        cpu_s=int(opts.get("cpu_s", max(1, round(timeout_s)))),
        memory_mb=int(opts.get("memory_mb", 512)),
    )
    tests = task["tests"] if tests is None else tests
    res = (_test_runner or run_tests)(code, tests, task["entry_point"], limits)
    score = res["passed"] / res["total"] if res["total"] else 0.0
    if res.get("load_error"):
        score = 0.0
    # The namespace id would make identical jobs write different ledger objects.
    details = {k: v for k, v in res.items() if k != "pidns"}
    return GradeResult(
        score, res["passed"] == res["total"] and res["total"] > 0, {"grader": "code", **details}
    )


def code_key(task: Task, cand: Answered) -> str | None:
    """Vote key of a code answer: the same code without blank lines and comments."""
    if cand.answer is None:
        return None
    lines = [re.sub(r"\s+#.*$", "", ln).rstrip() for ln in cand.answer.splitlines()]
    return "\n".join(ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#"))


def _grade(task: Task, answer: str | None, tool_calls: list[dict[str, Any]]) -> GradeResult:
    return grade_code(answer, task)


def _test_score(task: Task, code: str, tests: list[str]) -> float:
    return grade_code(code, task, tests=tests).score


GRADERS = (
    Grader(
        "code",
        _grade,
        extract=lambda task, text: extract_code(text),
        vote_key=code_key,
        check_options=check_code,
        needs_sandbox=True,
        run_tests=_test_score,
    ),
)
