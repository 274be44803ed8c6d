"""The `ept` command. Each stage registers its own commands; errors map to exit codes here, once."""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from rich.console import Console

from elo_per_token.contracts.errors import EXIT_BAD_INPUT, InputError
from elo_per_token.contracts.secrets import scrub

app = typer.Typer(
    help="elo-per-token: how much quality does each extra 1k tokens of test-time compute buy?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    verify_jobs: bool = typer.Option(
        False,
        "--verify-jobs",
        help="Find a compacted run's uncompacted job objects by listing the run, not from its declared keys "
        "(same as EPT_VERIFY_JOBS=1): for runs something outside ept may have written into.",
    ),
    show_version: bool = typer.Option(
        False,
        "--version",
        help="Print the version and exit.",
        is_eager=True,
        callback=lambda v: _print_version(v),
    ),
) -> None:
    """elo-per-token: how much quality does each extra 1k tokens of test-time compute buy?"""
    if verify_jobs:
        # The readers (ledger/keyspace.py) look this up where they decide; one switch for every command.
        from elo_per_token.ledger.keyspace import VERIFY_ENV

        os.environ[VERIFY_ENV] = "1"


def _print_version(value: bool) -> None:
    """`ept --version`, as every command-line tool answers it."""
    if value:
        from elo_per_token import __version__

        typer.echo(f"ept {__version__}")
        raise typer.Exit(0)


@app.command()
def version() -> None:
    """Print the tool's version."""
    from elo_per_token import __version__

    typer.echo(__version__)


_registered = False


def _register() -> None:
    # Import order follows the data flow; each module adds its commands to `app`. Once per process:
    # main() may be called repeatedly in-process (tests), and typer would add every command again.
    global _registered
    if _registered:
        return
    _registered = True
    from elo_per_token.analysis import cli as analysis_cli
    from elo_per_token.analysis import cli_report
    from elo_per_token.analysis.imports import cli as imports_cli
    from elo_per_token.coordinator import cli as coordinator_cli
    from elo_per_token.egress import cli as egress_cli
    from elo_per_token.ept import suites_cli
    from elo_per_token.simulator import cli as simulator_cli
    from elo_per_token.viewer import cli as viewer_cli
    from elo_per_token.worker import cli as worker_cli

    for mod in (
        coordinator_cli,
        worker_cli,
        suites_cli,
        analysis_cli,
        imports_cli,
        cli_report,
        simulator_cli,
        viewer_cli,
    ):
        mod.register(app)
    egress_cli.register(app, machine_checks=[worker_cli.sandbox_check])


# typer >= 0.2x labels every option in --help with a Python type tag (`--help <bool>`, `--out <str>`); a
# click/typer user expects click's plain style: flags bare, values as TEXT / INTEGER / FLOAT / PATH / [a|b].
_CLICK_TYPE_NAMES = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "path": "PATH", "bool": ""}


def _click_style(tag: str | None) -> str | None:
    if not tag or not tag.startswith("<"):
        return tag  # an explicit metavar, or an older typer that already prints click's names
    inner = tag.strip("<>").removesuffix("...")
    if inner.startswith("list[") and inner.endswith("]"):
        inner = inner[5:-1]
    if "|" in inner:
        return f"[{inner}]"
    return _CLICK_TYPE_NAMES.get(inner, inner.upper()) or None


def _plain_help(cmd: Any) -> None:
    """Rewrite the help of every parameter of `cmd` and its subcommands in click's style (see above)."""
    for sub in getattr(cmd, "commands", {}).values():
        _plain_help(sub)
    make_help = getattr(cmd, "get_help_option", None)
    if make_help is not None:  # --help is built on demand, outside `params`

        def help_option(ctx: Any, _make: Any = make_help) -> Any:
            opt = _make(ctx)
            if opt is not None and hasattr(opt, "display_type_rich"):
                opt.display_type_rich = lambda ctx: None
            return opt

        cmd.get_help_option = help_option
    for p in getattr(cmd, "params", []):
        shown = getattr(p, "display_type_rich", None)
        if shown is None:
            continue
        if getattr(p, "param_type_name", "") == "argument":
            # The argument's name is its metavar (PATHS...), as in click; no type tag next to it.
            name = (p.metavar or p.name or "ARG").upper()
            dots = "..." if p.nargs != 1 else ""
            p.metavar = name
            p.display_type_rich = lambda ctx: None
            p.get_usage_pieces = lambda ctx, u=(name + dots if p.required else f"[{name}]{dots}"): [u]
        elif getattr(p, "is_flag", False) or getattr(p, "count", False):
            p.display_type_rich = lambda ctx: None
        else:
            p.display_type_rich = lambda ctx, f=shown: _click_style(f(ctx))


_command: Any = None
HELP_PIPE_WIDTH = 160


def _help_width() -> None:
    """--help into a pipe (`ept suites accuracy --help | less`) at a readable width, not cut at 80 columns,
    unless TERMINAL_WIDTH or COLUMNS says otherwise."""
    import typer.rich_utils

    if not sys.stdout.isatty() and not (os.environ.get("TERMINAL_WIDTH") or os.environ.get("COLUMNS")):
        typer.rich_utils.MAX_WIDTH = HELP_PIPE_WIDTH


def main(argv: list[str] | None = None) -> None:
    global _command
    _register()
    if _command is None:
        _command = typer.main.get_command(app)
        _plain_help(_command)
    _help_width()
    from elo_per_token.contracts.secrets import scrub_log_records

    scrub_log_records()  # logs go through the same scrub as errors and transcripts
    try:
        _command(args=argv, prog_name="ept")  # standalone: click prints usage errors itself and exits 2
    except InputError as e:
        from rich.markup import escape

        # The message is text, not markup: arm labels such as greedy@1[effort=low] must keep their brackets.
        Console(stderr=True, soft_wrap=True).print(
            f"[bold red]error:[/] {escape(scrub(str(e)))}", highlight=False
        )
        sys.exit(EXIT_BAD_INPUT)
    except RecursionError:
        # A parser met input nested thousands deep (e.g. 100k brackets on one line) somewhere not caught closer.
        Console(stderr=True).print("[bold red]error:[/] input nested too deeply to read", highlight=False)
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
