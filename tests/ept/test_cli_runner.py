"""testkit/cli_runner.py: the in-process `ept` gives what the child process gives (exit code, stdout, stderr) and
leaves this process as it found it (environment, working directory)."""

from __future__ import annotations

import os
from pathlib import Path

from cli_runner import run_ept, run_ept_process


def test_in_process_and_child_agree_on_success_and_on_a_usage_error(tmp_path: Path) -> None:
    for args in (("version",), ("no-such-command",)):
        here, child = run_ept(*args, cwd=tmp_path), run_ept_process(*args, cwd=tmp_path, timeout=120)
        assert (here.returncode, here.stdout) == (child.returncode, child.stdout), args
        assert ("No such command" in here.stderr) == ("No such command" in child.stderr), args
    assert run_ept("version").returncode == 0
    assert run_ept("no-such-command").returncode == 2


def test_bad_input_is_exit_2_with_the_message_on_stderr(tmp_path: Path) -> None:
    r = run_ept("analyze", str(tmp_path / "missing.jsonl"), "--no-plots", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "missing.jsonl" in r.stderr.replace("\n", "") and "Traceback" not in r.stderr


def test_environment_and_working_directory_are_restored(tmp_path: Path) -> None:
    before_env, before_cwd = dict(os.environ), os.getcwd()
    r = run_ept("--verify-jobs", "version", env={"EPT_CLI_RUNNER_PROBE": "1"}, cwd=tmp_path, columns=123)
    assert r.returncode == 0, r.stderr
    assert dict(os.environ) == before_env and os.getcwd() == before_cwd
