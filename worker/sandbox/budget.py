"""One memory budget for all of a worker's sandboxes together, not only per process.

RLIMIT_AS bounds one process; a sandbox may run `nproc` of them, and a worker runs several gradings at once
(8 concurrent gradings x 16 processes x 512 MB is ~64 GB). Two layers:

* a cgroup, where this process can create one (cgroup v1 `memory`, or v2 with the memory controller): every
  sandbox of this worker is started inside `ept-sandbox-<pid>` (created next to the worker's own cgroup)
  whose memory limit is EPT_SANDBOX_MEMORY_MB (default 2048). Past it the kernel's OOM killer kills a
  sandbox process (that grading scores 0), never the worker. The sandbox joins the cgroup before bwrap
  starts (a root shell writes its own pid, then drops to the sandbox's uid with setpriv), so nothing it
  forks escapes the limit;
* always, at most EPT_SANDBOX_CONCURRENCY sandboxes (default 4) run at once in this process; others wait.

`describe()` says which layers hold here (shown by `sandbox_info()` and docs/reliability.md).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from elo_per_token.worker.sandbox.settings import current

CGROUP_ROOT = "/sys/fs/cgroup"


def total_mb() -> int:
    """Memory (MB) all of this worker's sandboxes share (SandboxSettings.memory_mb)."""
    return current().memory_mb


def concurrency() -> int:
    """Sandboxes this worker runs at once (SandboxSettings.concurrency)."""
    return current().concurrency


@dataclass(frozen=True)
class Cgroup:
    path: str  # the directory
    procs: str  # the file a process writes its pid into to join
    version: int


def _own_path(controller: str | None) -> str | None:
    """This process's cgroup path in the v1 hierarchy of `controller`, or in the v2 one (controller None)."""
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if (controller is None and ctrls == "") or (controller in ctrls.split(",")):
                    return path
    except (OSError, ValueError):
        return None
    return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _make(parent: str, limit_file: str, version: int) -> Cgroup | None:
    d = os.path.join(parent, f"ept-sandbox-{os.getpid()}")
    try:
        os.makedirs(d, exist_ok=True)
        _write(os.path.join(d, limit_file), str(total_mb() * 1024 * 1024))
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(d)
        return None
    atexit.register(_remove, d)
    return Cgroup(d, os.path.join(d, "cgroup.procs"), version)


def _remove(d: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(d)  # only once empty: every sandbox has been waited for by then


@functools.cache
def cgroup() -> Cgroup | None:
    """This worker's sandbox cgroup (created once), or None where no memory cgroup can be made."""
    if not current().cgroup:
        return None
    v1 = os.path.join(CGROUP_ROOT, "memory")
    own = _own_path("memory")
    if own is not None and os.path.isfile(os.path.join(v1, "memory.limit_in_bytes")):
        parent = os.path.join(v1, own.lstrip("/"))
        return _make(parent if os.path.isdir(parent) else v1, "memory.limit_in_bytes", 1)
    own2 = _own_path(None)
    controllers = os.path.join(CGROUP_ROOT, "cgroup.controllers")
    if own2 is not None and os.path.isfile(controllers):
        # v2: a process may not sit in a cgroup that has children with controllers, so the sandbox cgroup is
        # a sibling of the worker's own (or a child of the root, where processes are allowed).
        base = os.path.dirname(own2.rstrip("/")) if own2.strip("/") else "/"
        parent = os.path.join(CGROUP_ROOT, base.lstrip("/"))
        with contextlib.suppress(OSError):
            _write(os.path.join(parent, "cgroup.subtree_control"), "+memory")
        return _make(parent, "memory.max", 2)
    return None


def launcher(argv: list[str], uid: int | None) -> tuple[list[str], bool]:
    """(argv that joins the sandbox cgroup first, whether the uid drop is done by the launcher).

    Without a cgroup: argv unchanged (Popen drops the uid). With one: `sh` writes its own pid into the
    cgroup (as the worker's user, which may write there), then `setpriv` drops to `uid`, then bwrap runs:
    the same process, so every process of the sandbox is born inside the limit."""
    cg = cgroup()
    if cg is None:
        return argv, False
    script = 'echo $$ > "$0" && exec "$@"'
    if uid is None:
        return ["/bin/sh", "-c", script, cg.procs, *argv], False
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
    if setpriv is None:
        return argv, False
    drop = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    return ["/bin/sh", "-c", script, cg.procs, *drop, *argv], True


_SLOTS: threading.BoundedSemaphore | None = None
_SLOTS_LOCK = threading.Lock()


@contextlib.contextmanager
def slot() -> Iterator[None]:
    """Hold one of EPT_SANDBOX_CONCURRENCY sandbox slots of this process while a sandbox runs."""
    global _SLOTS
    with _SLOTS_LOCK:
        if _SLOTS is None:
            _SLOTS = threading.BoundedSemaphore(concurrency())
        slots = _SLOTS
    with slots:
        yield


def describe() -> dict[str, object]:
    """Which whole-sandbox bounds hold here."""
    cg = cgroup()
    return {
        "cgroup": None if cg is None else cg.path,
        "cgroup_version": None if cg is None else cg.version,
        "memory_mb_all_sandboxes": total_mb() if cg is not None else None,
        "concurrent_sandboxes": concurrency(),
    }
