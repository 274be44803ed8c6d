"""The `ept` command. Each stage registers its own commands; errors map to exit codes here, once."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from contracts.errors import EXIT_BAD_INPUT, InputError
from contracts.secrets import scrub

app = typer.Typer(
    help="elo-per-token: how much quality does each extra 1k tokens of test-time compute buy?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """elo-per-token: how much quality does each extra 1k tokens of test-time compute buy?"""


@app.command()
def version() -> None:
    """Print the tool's version."""
    from ept import __version__

    typer.echo(__version__)


_registered = False


def _register() -> None:
    # Import order follows the data flow; each module adds its commands to `app`. Once per process:
    # main() may be called repeatedly in-process (tests), and typer would add every command again.
    global _registered
    if _registered:
        return
    _registered = True
    import analysis.cli
    import analysis.cli_report
    import analysis.imports.cli
    import coordinator.cli
    import egress.cli
    import simulator.cli
    import suites.cli
    import worker.cli

    for mod in (
        coordinator.cli,
        worker.cli,
        suites.cli,
        analysis.cli,
        analysis.imports.cli,
        analysis.cli_report,
        egress.cli,
        simulator.cli,
    ):
        mod.register(app)


def main(argv: list[str] | None = None) -> None:
    _register()
    try:
        app(args=argv)  # standalone: click prints usage errors itself and exits 2
    except InputError as e:
        Console(stderr=True).print(f"[bold red]error:[/] {scrub(str(e))}", highlight=False)
        sys.exit(EXIT_BAD_INPUT)
    except RecursionError:
        # A parser met input nested thousands deep (e.g. 100k brackets on one line) somewhere not caught closer.
        Console(stderr=True).print("[bold red]error:[/] input nested too deeply to read", highlight=False)
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
