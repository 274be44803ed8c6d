"""Run the `ept` command from a test: in this process by default, in a child process where the test needs one.

`run_ept` calls `elo_per_token.ept.cli:main` with argv and returns what `subprocess.run(..., capture_output=True,
text=True)` would: the exit code, stdout and stderr. It saves the interpreter start (about a second per call)
where the exit code and output are all the test checks. `run_ept_process` runs `python -m elo_per_token` for the
tests that need a real child: signals, an environment the parent must not see, secrets in argv, a timeout.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None, cwd: str | Path | None) -> Iterator[None]:
    """os.environ updated by `env` and the working directory `cwd`, both restored afterwards (also what the
    command itself changed in os.environ, e.g. --verify-jobs)."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update(env or {})
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def _exit_code(e: SystemExit, err: io.StringIO) -> int:
    """The exit status a process would have for `sys.exit(e.code)`."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    err.write(f"{e.code}\n")  # sys.exit("message") prints the message and exits 1
    return 1


def run_ept(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    columns: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """`ept ARGS...` in this process, with `env` added to the environment and `cwd` as working directory."""
    from elo_per_token.ept.cli import main

    extra = {**({"COLUMNS": str(columns)} if columns else {}), **(env or {})}
    out, err = io.StringIO(), io.StringIO()
    with _environment(extra, cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = _exit_code(e, err)
        except Exception:
            traceback.print_exc()  # an uncaught exception: the traceback on stderr and status 1, as a process
            code = 1
    return subprocess.CompletedProcess(["ept", *args], code, out.getvalue(), err.getvalue())


def run_ept_process(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    columns: int | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """`python -m elo_per_token ARGS...` in a child process (this checkout first on its path)."""
    full = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        **({"COLUMNS": str(columns)} if columns else {}),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "elo_per_token", *args],
        capture_output=True, text=True, env=full, cwd=cwd, timeout=timeout,
    )  # fmt: skip
