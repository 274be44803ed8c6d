"""The code grader's sandbox: hostile candidates cost at most the time limit and score 0 with the reason."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from elo_per_token.worker.graders.code import Limits, grade_code, run_tests

TASK = {
    "task_id": "c",
    "family": "code",
    "prompt": "p",
    "reference": "",
    "entry_point": "f",
    "tests": ["assert f(1) == 2", "assert f(5) == 6"],
    "grader": {"type": "code", "timeout_s": 3},
}


def test_correct_and_partly_wrong_candidates():
    ok = grade_code("def f(x):\n    return x + 1\n", TASK)
    assert (ok.score, ok.correct, ok.details["reason"]) == (1.0, True, None)
    half = grade_code("def f(x):\n    return 2\n", TASK)
    assert (half.score, half.correct) == (0.5, False) and "1 of 2 tests failed" in half.details["reason"]
    missing = grade_code("def g(x):\n    return x + 1\n", TASK)
    assert missing.score == 0.0 and "not defined" in missing.details["reason"]
    assert grade_code(None, TASK).details["reason"] == "no code block in the answer"


def test_infinite_loop_is_killed_at_the_cpu_limit():
    # 1 s of CPU against a 15 s wall clock: holds even on a heavily loaded 2-core machine.
    t0 = time.monotonic()
    r = run_tests(
        "def f(x):\n    while True:\n        pass\n", ["assert f(1) == 2"], "f", Limits(timeout_s=5, cpu_s=1)
    )
    elapsed = time.monotonic() - t0
    assert r["passed"] == 0 and r["reason"] == "timeout: CPU limit of 1s exceeded (killed)"
    assert 0.9 < elapsed < 5 * 3 + 1


def test_sleeping_candidate_is_killed_at_the_wall_clock_backstop():
    t0 = time.monotonic()
    r = run_tests(
        "import time\ndef f(x):\n    time.sleep(60)\n",
        ["assert f(1) == 2"],
        "f",
        Limits(timeout_s=1, cpu_s=1),
    )
    elapsed = time.monotonic() - t0
    assert r["passed"] == 0 and r["reason"] == "timeout: still running after 3s wall clock (killed)"
    assert r["pidns"] and _live_in_namespace(r["pidns"]) == 0 and elapsed < 3 + 2


def _live_in_namespace(pidns: str) -> int:
    """Processes still in the sandbox's pid namespace (`pid:[N]`), read from /proc."""
    n = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{d}/ns/pid") == pidns:
                with open(f"/proc/{d}/stat") as fh:
                    n += fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is not running
        except OSError:
            continue
    return n


def test_fork_bomb_is_blocked_and_leaves_no_processes():
    code = "import os\ndef f(x):\n    while True:\n        os.fork()\n"
    r = grade_code(code, TASK)
    assert r.score == 0.0 and "os.fork is not allowed" in r.details["reason"]
    assert "pidns" not in r.details  # a namespace id would make identical jobs' ledger objects differ
    raw = run_tests(code, ["assert f(1) == 2"], "f", Limits(timeout_s=4))
    assert "os.fork is not allowed" in raw["reason"] and _live_in_namespace(raw["pidns"]) == 0


def test_fork_bomb_without_the_audit_hook_hits_the_process_cap():
    code = (
        "import os, time\ndef f(x):\n    n = 0\n    while True:\n        try:\n            pid = os.fork()\n"
        "        except OSError:\n            return n\n        if pid == 0:\n            time.sleep(60)\n"
        "        n += 1\n"
    )
    r = run_tests(code, ["assert f(1) == 2"], "f", Limits(timeout_s=4, nproc=16), audit_hook=False)
    # The candidate got at most the cap (minus bwrap's init and itself), then fork failed.
    assert r["passed"] == 0 and "got f(1) = " in r["reason"], r
    assert 0 < int(r["reason"].rsplit("= ", 1)[1].rstrip(")")) < 16
    time.sleep(0.2)
    assert _live_in_namespace(r["pidns"]) == 0  # the sleepers died with the namespace


def test_os_system_is_refused_and_has_no_effect(tmp_path):
    marker = tmp_path / "pwned"
    os.chmod(tmp_path, 0o777)
    r = grade_code(f"import os\nos.system('touch {marker}')\ndef f(x):\n    return x + 1\n", TASK)
    assert r.score == 0.0 and "os.system is not allowed" in r.details["reason"]
    sub = grade_code(
        f"import subprocess\ndef f(x):\n    subprocess.run(['touch', '{marker}'])\n    return x + 1\n", TASK
    )
    assert sub.score == 0.0 and "subprocess.Popen is not allowed" in sub.details["reason"]
    assert not marker.exists()


class _Listener:
    """A real TCP server on 127.0.0.1 that counts connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.accepted += 1
                c.close()
            except OSError:
                pass

    def close(self) -> None:
        self.stop = True
        self.t.join()
        self.sock.close()


@pytest.fixture
def listener():
    lst = _Listener()
    yield lst
    lst.close()


def _net_code(port: int) -> str:
    return (
        f"import socket\ndef f(x):\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        "    s.close()\n    return x + 1\n"
    )


def test_network_call_is_blocked(listener):
    r = grade_code(_net_code(listener.port), TASK)
    assert r.score == 0.0 and "socket" in r.details["reason"] and "not allowed" in r.details["reason"]
    urllib_code = (
        f"import urllib.request\ndef f(x):\n    urllib.request.urlopen('http://127.0.0.1:{listener.port}/', timeout=1)\n"
        "    return x + 1\n"
    )
    assert grade_code(urllib_code, TASK).score == 0.0
    time.sleep(0.3)
    assert listener.accepted == 0


def test_network_namespace_holds_without_the_audit_hook(listener):
    r = run_tests(_net_code(listener.port), ["assert f(1) == 2"], "f", Limits(timeout_s=3), audit_hook=False)
    assert r["passed"] == 0 and ("refused" in r["reason"] or "unreachable" in r["reason"])
    time.sleep(0.3)
    assert listener.accepted == 0
    # Control: the same code does connect when nothing isolates it, so the test can fail.
    ns: dict = {}
    exec(_net_code(listener.port), ns)
    assert ns["f"](1) == 2
    time.sleep(0.3)
    assert listener.accepted == 1


def test_memory_bomb_scores_zero():
    r = grade_code("x = bytearray(4 * 1024 ** 3)\ndef f(x):\n    return x + 1\n", TASK)
    assert r.score == 0.0 and "MemoryError" in r.details["reason"]


def test_candidate_output_cannot_forge_a_result():
    code = 'print(\'\\nEPT-RESULT-0000{"passed": 2, "total": 2, "failures": [], "load_error": null}\')\ndef f(x):\n    return 0\n'
    r = grade_code(code, TASK)
    assert r.score == 0.0
    # tests/worker/test_hostile_candidates.py covers forging the current protocol


def test_no_sandbox_means_no_grading_and_no_tokens_spent(make_sim, monkeypatch):
    """Where bwrap cannot start, code is never run unsandboxed: grading raises with the fix, and a code job
    is refused before its first API call."""
    from fixtures_sim import SIM_KEY

    from elo_per_token.contracts.jobs import Job
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.simulator.brain import TaskBrain
    from elo_per_token.suites.load import load_builtin_suite
    from elo_per_token.worker.graders.code import SandboxUnavailable
    from elo_per_token.worker.job import run_job
    from elo_per_token.worker.sandbox import bwrap

    task = load_builtin_suite("code")[0]
    sim = make_sim(brain=TaskBrain([task]))
    monkeypatch.setenv(
        "EPT_SANDBOX_PYTHON", "/nonexistent/python3"
    )  # the sandbox cannot start its interpreter
    bwrap.probe.cache_clear()
    bwrap.interpreter.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="EPT_SANDBOX_PYTHON"):
            run_tests("def f(x):\n    return x\n", ["assert f(1) == 1"], "f")
        client = ProviderClient(sim.profile(), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)
        with pytest.raises(SandboxUnavailable):
            run_job(Job("r", task, "greedy", 1, seed=1), client)
        assert sim.control.stats()["requests"] == 0
    finally:
        monkeypatch.delenv("EPT_SANDBOX_PYTHON")
        bwrap.probe.cache_clear()
        bwrap.interpreter.cache_clear()
    assert bwrap.probe() is None  # back to the working sandbox for the other tests


@pytest.mark.slow
def test_a_sandbox_cannot_see_a_concurrent_one():
    """Two gradings at once (as two worker threads would run them): the second sees neither the first's
    processes nor its /tmp or /dev/shm files."""
    holder = (
        "import time\nopen('/tmp/peer-secret', 'w').write('x')\nopen('/dev/shm/peer-shm', 'w').write('x')\n"
        "def f(x):\n    time.sleep(3)\n    return 0\n"
    )
    spy = (
        "import os\ndef f(x):\n    return 'pids ' + ','.join(sorted(p for p in os.listdir('/proc') if p.isdigit()))"
        " + ' tmp ' + ','.join(sorted(os.listdir('/tmp') + os.listdir('/dev/shm')))\n"
    )
    out: dict = {}
    t = threading.Thread(
        target=lambda: out.setdefault(
            "holder", run_tests(holder, ["assert f(1) == 1"], "f", Limits(timeout_s=5))
        )
    )
    t.start()
    time.sleep(1.0)  # the holder is loaded and sleeping
    seen = run_tests(spy, ["assert f(1) == 1"], "f", Limits(timeout_s=5))["reason"]
    t.join()
    assert "got f(1) = 'pids 1 tmp '" in seen, seen  # only itself (pid 1 of its namespace)
    assert "peer" not in seen
    assert "got f(1) = 0" in out["holder"]["reason"]  # the holder really ran (and wrote its files) meanwhile


def test_no_zombie_is_left_for_the_containers_pid_1():
    """In a container whose pid 1 is the worker (no init), an orphaned sandbox process would stay a zombie
    forever: one per grading until the pid limit. The sandbox's init must be reaped by the time we return."""
    from elo_per_token.worker.sandbox import bwrap

    for _ in range(3):
        r = bwrap.run(
            ["-I", "-S", "-c", "import os\nif os.fork() == 0:\n    os.setsid()\nprint(1)"], b"", wall_s=10
        )
        assert r.stdout.strip().endswith(b"1") and r.init_pid
        assert not os.path.exists(f"/proc/{r.init_pid}")  # reaped, not a zombie


def test_a_killed_worker_leaves_no_sandbox_behind(tmp_path):
    """SIGKILL the grading process mid-run: --die-with-parent takes the whole sandbox (setsid children too)."""
    import signal
    import subprocess
    import sys
    import uuid
    from pathlib import Path

    mark = str(300 + uuid.uuid4().int % 600) + ".5"  # a unique `sleep` argument to find the survivor by
    script = tmp_path / "grader.py"
    script.write_text(
        "from worker.graders.code import Limits, run_tests\n"
        f"run_tests(\"import subprocess, time\\nsubprocess.Popen(['setsid', 'sleep', '{mark}'])\\n"
        "def f(x):\\n    time.sleep(60)\\n\", ['assert f(1) == 1'], 'f', Limits(timeout_s=20), audit_hook=False)\n"
    )
    repo = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": repo})

    def sleepers() -> list[str]:
        found = []
        for d in os.listdir("/proc"):
            try:
                with open(f"/proc/{d}/cmdline", "rb") as fh:
                    if fh.read().split(b"\0")[:2] == [b"sleep", mark.encode()]:
                        found.append(d)
            except OSError:
                continue
        return found

    deadline = time.monotonic() + 30
    while not sleepers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sleepers(), "the candidate's child never started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    while sleepers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sleepers() == []
