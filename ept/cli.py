"""The `ept` command. Each stage registers its own commands; errors map to exit codes here, once."""

from __future__ import annotations

import os
import sys

# polars' allocator (jemalloc) keeps freed pages by default: a million-job analysis then holds ~2x the memory
# its frames need. Returning them promptly costs no measurable time here. Must be set before polars loads.
os.environ.setdefault("_RJEM_MALLOC_CONF", "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0")

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
    import coordinator.cli
    import ept.egress_cli
    import simulator.cli
    import suites.cli
    import worker.cli

    for mod in (
        coordinator.cli,
        worker.cli,
        suites.cli,
        analysis.cli,
        analysis.cli_report,
        ept.egress_cli,
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


if __name__ == "__main__":
    main()
