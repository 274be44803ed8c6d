"""The `ept` command imports only the stage it runs (issue 39): a command named on the command line registers
its own stage's commands, `ept --help` and unknown names still see every command, and the in-process runner
(main() called again and again) gives what a fresh process gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import typer
from bounds import bounded
from cli_runner import REPO, run_ept, run_ept_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FIXTURE = REPO / "tests" / "fixtures" / "table3x2"


def _names(root: typer.Typer) -> list[str]:
    cmds = [c.name or (c.callback.__name__ if c.callback else "") for c in root.registered_commands]
    return [n.replace("_", "-") for n in cmds] + [g.name or "" for g in root.registered_groups]


def test_the_stage_table_names_exactly_what_each_stage_registers() -> None:
    from elo_per_token.ept import cli

    for module, commands in cli.STAGES.items():
        root = typer.Typer()
        cli._register_stages(root, [module])
        assert sorted(_names(root)) == sorted(commands), module
    cli._register()
    everything = typer.main.get_command(cli.app).commands
    assert sorted(everything) == sorted(["version", *cli.STAGE_OF])


_PROBE = """
import json, sys
from elo_per_token.ept.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
mods = sorted(m for m in sys.modules if m.endswith(".cli") or m.endswith("cli_report") or m == "typer.rich_utils")
print(json.dumps(mods), file=sys.stderr)
"""


def _imported(*args: str) -> set[str]:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, env=env, timeout=120
    )
    return set(json.loads(r.stderr.strip().splitlines()[-1]))


def test_a_named_command_imports_only_its_stage_and_no_help_formatter(tmp_path: Path) -> None:
    got = _imported("tokens", str(FIXTURE / "calls.jsonl"), "--csv", str(tmp_path / "t.csv"))
    assert (tmp_path / "t.csv").stat().st_size > 0
    assert "elo_per_token.analysis.cli" in got
    others = {
        m
        for m in got
        if m.startswith("elo_per_token.") and m not in ("elo_per_token.analysis.cli", "elo_per_token.ept.cli")
    }
    assert others == set(), others
    assert "typer.rich_utils" not in got  # help formatting only for help pages and usage errors
    assert "typer.rich_utils" in _imported("tokens", "--help")
    assert "elo_per_token.coordinator.cli" in _imported("--help")


def test_in_process_calls_in_any_order_match_a_fresh_process(tmp_path: Path) -> None:
    # A lazily built command first, then the whole app, then another stage: each as a child process shows it.
    for args in (
        ("tokens", "--help"),
        ("--help",),
        ("suites", "--help"),
        ("nosuch",),
        ("version",),
        ("--version",),
    ):
        here, child = (
            run_ept(*args, cwd=tmp_path, columns=120),
            run_ept_process(*args, cwd=tmp_path, columns=120),
        )
        assert (here.returncode, here.stdout) == (child.returncode, child.stdout), args
    assert (
        "tokens" in run_ept("--help", columns=120).stdout
        and "replay-adaptive" in run_ept("--help", columns=200).stdout
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                ["--verify-jobs", "--help", "--version", "-", "--", "tokens", "suites", "import", "version"]
            ),
            st.text(max_size=30),
        ),
        max_size=8,
    )
)
def test_any_argv_picks_a_declared_stage_or_the_whole_app(args: list[str]) -> None:
    from elo_per_token.ept import cli

    stage = bounded(lambda: cli._stage_of(args), time_s=0.5, memory_mb=1)
    assert stage is None or stage == "" or stage in cli.STAGES
    first = next((a for a in args if a != "--verify-jobs"), None)
    if stage:
        assert first in cli.STAGES[stage]  # the command the user named, never an option or a later word
    if first is None or first.startswith("-"):
        assert stage is None  # root help/version and no command: the whole app answers


# Libraries `ept tokens` has no use for, each 0.03-0.5 s of start-up: numeric and plotting stacks, the model
# clients and their validation layer, the object-store and queue clients, typer's help formatter.
HEAVY = (
    *("numpy", "scipy", "sympy", "matplotlib", "pydantic", "openai"),
    *("boto3", "botocore", "celery", "redis", "typer.rich_utils", "rich.markdown"),
)


def test_tokens_imports_none_of_the_heavy_libraries(tmp_path: Path) -> None:
    probe = _PROBE.replace(
        'mods = sorted(m for m in sys.modules if m.endswith(".cli") or m.endswith("cli_report") or m == "typer.rich_utils")',
        "mods = sorted(sys.modules)",
    )
    assert probe != _PROBE
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    args = ["tokens", str(FIXTURE / "calls.jsonl"), "--csv", str(tmp_path / "t.csv")]
    r = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert (tmp_path / "t.csv").stat().st_size > 0, r.stderr  # the command ran to the end
    got = set(json.loads(r.stderr.strip().splitlines()[-1]))
    assert "polars" in got and "elo_per_token.analysis.tokens" in got  # the probe sees what was imported
    assert sorted(m for m in HEAVY if m in got) == []
