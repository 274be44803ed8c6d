"""The `ept` command. Each stage registers its own commands; errors map to exit codes here, once."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
from typing import Annotated, Any

import typer

from elo_per_token.contracts import settings
from elo_per_token.contracts.errors import EXIT_BAD_INPUT, InputError
from elo_per_token.contracts.secrets import scrub

HELP = "elo-per-token: how much quality does each extra 1k tokens of test-time compute buy?"


def _root(
    verify_jobs: Annotated[
        bool,
        typer.Option(
            "--verify-jobs",
            help="Find a compacted run's uncompacted job objects by listing the run, not from its declared keys "
            "(same as EPT_VERIFY_JOBS=1): for runs something outside ept may have written into.",
        ),
    ] = False,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            is_eager=True,
            callback=lambda v: _print_version(v),
        ),
    ] = False,
) -> None:
    """elo-per-token: how much quality does each extra 1k tokens of test-time compute buy?"""
    if verify_jobs:
        # The readers (ledger/keyspace.py) look EPT_VERIFY_JOBS up where they decide; one switch for every
        # command, given as the setting's value for this command (main clears it when the command ends).
        settings.set_from_cli("EPT_VERIFY_JOBS", True)


def _print_version(value: bool) -> None:
    """`ept --version`, as every command-line tool answers it."""
    if value:
        from elo_per_token import __version__

        typer.echo(f"ept {__version__}")
        raise typer.Exit(0)


def version() -> None:
    """Print the tool's version."""
    from elo_per_token import __version__

    typer.echo(__version__)


def _new_app() -> typer.Typer:
    """The root `ept` app: its options and `ept version`, no stage commands yet."""
    root = typer.Typer(help=HELP, no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
    root.callback()(_root)
    root.command()(version)
    return root


app = _new_app()

# Which stage module adds which commands, in the order `ept --help` lists them (the data flow). A command
# named on the command line imports only its own stage: `ept tokens` does not import the coordinator, the
# worker, the viewer... (each costs start-up). tests/ept/test_cli_lazy.py checks this table against what the
# modules register.
STAGES: dict[str, tuple[str, ...]] = {
    "elo_per_token.coordinator.cli": (
        "sweep", "status", "retry", "compact", "demo", "services", "replay-adaptive",
    ),
    "elo_per_token.worker.cli": ("worker",),
    "elo_per_token.ept.suites_cli": ("suites",),
    "elo_per_token.analysis.cli": ("analyze", "tokens"),
    "elo_per_token.analysis.imports.cli": ("import",),
    "elo_per_token.analysis.cli_report": ("compare", "report"),
    "elo_per_token.simulator.cli": ("simulate",),
    "elo_per_token.viewer.cli": ("view",),
    "elo_per_token.egress.cli": ("doctor", "profiles"),
}  # fmt: skip
STAGE_OF = {command: module for module, commands in STAGES.items() for command in commands}


def _register_stages(target: typer.Typer, modules: list[str]) -> None:
    """Add the commands of `modules` (STAGES keys) to `target`, in STAGES order."""
    for name in STAGES:
        if name not in modules:
            continue
        mod = importlib.import_module(name)
        if name == "elo_per_token.egress.cli":
            # `ept doctor` also runs the code grader's sandbox check, which the worker stage owns.
            from elo_per_token.worker.cli import sandbox_check

            mod.register(target, machine_checks=[sandbox_check])
        else:
            mod.register(target)


_registered = False


def _register() -> None:
    # Every stage's commands on `app` (for `ept --help`, an unknown command, and tests that walk every
    # command). Once per process: main() may be called repeatedly in-process (tests), and typer would add
    # every command again.
    global _registered
    if _registered:
        return
    _registered = True
    _register_stages(app, list(STAGES))


def _stage_of(args: list[str]) -> str | None:
    """The stage module of the command `args` names ("" for `ept version`); None when the whole app is
    needed: no command, an option of the root other than --verify-jobs first (--help, --version), or a
    name no stage declares (click then lists the commands, or suggests one)."""
    for a in args:
        if a == "--verify-jobs":
            continue
        if a.startswith("-"):
            return None
        return "" if a == "version" else STAGE_OF.get(a)
    return None


# One click command per set of registered stages ("*" = all of them), built once per process.
_commands: dict[str, Any] = {}
HELP_PIPE_WIDTH = 160


def _command_for(args: list[str]) -> Any:
    """The click command that runs `args`: the root with only the named command's stage when one is named."""
    stage = _stage_of(args)
    key = "*" if stage is None else stage
    if key not in _commands:
        if stage is None:
            _register()
            root = app
        else:
            root = _new_app()
            _register_stages(root, [stage])
        # Help in click's plain style (TEXT, INTEGER; flags bare) is typer's own below 0.26, the bound
        # pyproject.toml sets: no rewriting of the parameters' help here.
        _commands[key] = typer.main.get_command(root)
    return _commands[key]


def _pipe_width() -> int | None:
    """Help's width: HELP_PIPE_WIDTH into a pipe (`ept suites accuracy --help | less`, readable, not cut at 80
    columns) unless TERMINAL_WIDTH or COLUMNS says otherwise; else typer's own (TERMINAL_WIDTH or the terminal)."""
    fixed = os.environ.get("TERMINAL_WIDTH", "")
    if not sys.stdout.isatty() and not (fixed or os.environ.get("COLUMNS")):
        return HELP_PIPE_WIDTH
    return int(fixed) if fixed.isdigit() else None


def _help_width() -> None:
    """Set typer's help width for this call (main() may run many times in one process, each its own output).
    Applied when typer's help formatter is first imported (help pages and usage errors only): a command that
    prints neither never imports it (rich.markdown and the rest, ~0.07 s of start-up)."""
    formatter: Any = sys.modules.get("typer.rich_utils")
    if formatter is not None:
        formatter.MAX_WIDTH = _pipe_width()
    elif not any(isinstance(f, _WidenOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _WidenOnImport())


class _WidenOnImport(importlib.abc.MetaPathFinder):
    """Sets typer.rich_utils.MAX_WIDTH the moment typer imports that module, then removes itself."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "typer.rich_utils":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            load = spec.loader.exec_module

            def exec_module(module: Any) -> None:
                load(module)
                module.MAX_WIDTH = _pipe_width()

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    command = _command_for(args)
    _help_width()
    from elo_per_token.contracts.secrets import scrub_log_records

    scrub_log_records()  # logs go through the same scrub as errors and transcripts
    try:
        command(args=args, prog_name="ept")  # standalone: click prints usage errors itself and exits 2
    except InputError as e:
        from rich.console import Console
        from rich.markup import escape

        # The message is text, not markup: arm labels such as greedy@1[effort=low] must keep their brackets.
        Console(stderr=True, soft_wrap=True, emoji=False).print(
            f"[bold red]error:[/] {escape(scrub(str(e)))}", highlight=False
        )
        sys.exit(EXIT_BAD_INPUT)
    except RecursionError:
        from rich.console import Console

        # A parser met input nested thousands deep (e.g. 100k brackets on one line) somewhere not caught closer.
        Console(emoji=False, stderr=True).print(
            "[bold red]error:[/] input nested too deeply to read", highlight=False
        )
        sys.exit(EXIT_BAD_INPUT)
    finally:
        settings.clear_cli()  # an option's value lasts one command (tests run many in one process)


if __name__ == "__main__":
    main()
