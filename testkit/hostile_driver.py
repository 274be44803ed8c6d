"""Grades hostile candidates in this process and reports what happened (used by test_hostile_candidates.py).

Run as `python hostile_driver.py < spec.json`, as root or as an unprivileged uid: this process plays the
worker (its environment holds a canary API key; a sentinel process of its uid runs alongside). Prints JSON.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

from elo_per_token.worker.graders.code import Limits, run_tests


def _maxrss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _survivors(mark: str) -> list[str]:
    """Running (non-zombie) processes whose command line carries `mark`."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{d}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if mark.encode() in cmd and state != b"Z":
            found.append(cmd.replace(b"\0", b" ").decode(errors="replace")[:120])
    return found


def _in_namespace(pidns: str | None) -> int:
    if not pidns:
        return 0
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.readlink(f"/proc/{d}/ns/pid") == pidns:
                    with open(f"/proc/{d}/stat", "rb") as fh:
                        n += fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
            except OSError:
                continue
    return n


def main() -> None:
    spec = json.loads(sys.stdin.read())
    subs = {"{WORKER_PID}": str(os.getpid())}
    sentinel = subprocess.Popen(["sleep", "300"])
    out: dict = {"pid": os.getpid(), "uid": os.getuid(), "results": {}, "controls": {}}
    for name, a in spec["attacks"].items():
        code = a["code"]
        for k, v in subs.items():
            code = code.replace(k, v)
        rss0 = _maxrss_kb()
        t0 = time.monotonic()
        res = run_tests(
            code, a["tests"], "f", Limits(**a.get("limits", {})), audit_hook=a.get("audit_hook", True)
        )
        res["elapsed_s"] = time.monotonic() - t0
        res["maxrss_growth_kb"] = _maxrss_kb() - rss0
        time.sleep(0.05)
        res["survivors"] = _survivors(spec["mark"])
        res["left_in_namespace"] = _in_namespace(res.get("pidns"))
        out["results"][name] = res
    for name, code in spec.get("controls", {}).items():
        # The same attack with no sandbox: shows the test would notice if the sandbox did not hold.
        p = subprocess.run(
            [sys.executable, "-I", "-c", code + "\nprint(f(1))"], capture_output=True, text=True, timeout=30
        )
        out["controls"][name] = (p.stdout + p.stderr)[-300:]
    out["sentinel_alive"] = sentinel.poll() is None
    sentinel.kill()
    sentinel.wait()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
