"""Egress commands: `ept doctor`, `ept profiles list`, `ept profiles export`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from elo_per_token.common.atomic import write_atomic

if TYPE_CHECKING:
    from elo_per_token.egress.doctor import Check

PROFILES_HELP = "Profile file (default: $EPT_PROFILES, else ./profiles.toml)."

# Checks of this machine that other stages own (the code grader's sandbox): the `ept` CLI hands them in at
# registration, so egress imports no stage and `ept doctor` still shows the whole setup on one page.
_machine_checks: list[Callable[[], Check]] = []


def register(app: typer.Typer, machine_checks: Sequence[Callable[[], Check]] = ()) -> None:
    """Add `ept doctor` and `ept profiles` to `app`; `machine_checks` run after the egress checks."""
    _machine_checks[:] = list(machine_checks)
    app.command("doctor")(doctor)
    profiles_app = typer.Typer(
        help="Provider profiles (profiles.toml): list them, export client configs.", no_args_is_help=True
    )
    profiles_app.command("list")(profiles_list)
    profiles_app.command("export")(profiles_export)
    app.add_typer(profiles_app, name="profiles")


def doctor(
    profile: Annotated[str, typer.Option("--profile", "-p", help="Profile name.")] = "default",
    profiles: Annotated[Path | None, typer.Option("--profiles", help=PROFILES_HELP)] = None,
    timeout: Annotated[
        float, typer.Option(help="Per-request timeout for the network checks (seconds).")
    ] = 20.0,
    profile_url_override: Annotated[
        str | None,
        typer.Option(
            "--profile-url-override",
            help="Check this base URL instead of the profile's (as sweep and retry).",
        ),
    ] = None,
) -> None:
    """Check credentials and egress for a profile (key set, base_url, /models, model, usage). Exit 0 = all pass."""
    from rich.console import Console

    from elo_per_token.contracts.secrets import scrub
    from elo_per_token.egress.doctor import check_client_configs, ok, render, run_checks
    from elo_per_token.egress.profiles import get_profile

    p = get_profile(profile, profiles)
    if profile_url_override:
        p = p.with_base_url(profile_url_override)
    checks = [*run_checks(p, timeout=timeout), check_client_configs(), *(c() for c in _machine_checks)]
    console = Console(emoji=False, highlight=False, soft_wrap=True)
    for line in render(p, checks):
        console.print(scrub(line))  # masks keys from the environment and any password in base_url
    if not ok(checks):
        raise typer.Exit(1)


def profiles_list(
    profiles: Annotated[Path | None, typer.Option("--profiles", help=PROFILES_HELP)] = None,
) -> None:
    """List profiles: protocol, base_url, model and whether each key variable is set (masked)."""
    from rich.console import Console
    from rich.table import Table

    from elo_per_token.contracts.secrets import mask_url
    from elo_per_token.egress.profiles import load_profiles

    table = Table("name", "protocol", "base_url", "model", "key variable", "key")
    for p in load_profiles(profiles).values():
        key = p.api_key()
        table.add_row(
            p.name,
            p.protocol,
            mask_url(p.base_url),
            p.model,
            p.api_key_env,
            p.masked_key() if key else "[red]not set[/]",
        )
    import sys

    # Piped output (CI logs, docs) keeps full URLs instead of squeezing columns to 80 characters.
    Console(emoji=False, highlight=False, width=None if sys.stdout.isatty() else 160).print(table)


def profiles_export(
    name: Annotated[str, typer.Argument(help="Profile name.")],
    to: Annotated[str, typer.Option("--to", help="claude-code | codex | cc-switch | env")],
    out: Annotated[Path | None, typer.Option("--out", help="Write to this file instead of stdout.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    profiles: Annotated[Path | None, typer.Option("--profiles", help=PROFILES_HELP)] = None,
) -> None:
    """Write a client configuration for a profile (placeholder key YOUR_API_KEY, never the real one)."""
    import sys

    from elo_per_token.contracts.errors import InputError
    from elo_per_token.egress.exports import render
    from elo_per_token.egress.profiles import get_profile

    text = render(get_profile(name, profiles), to)
    if out is None:
        sys.stdout.write(text)
        return
    if out.exists() and not force:
        raise InputError(
            "exists; pass --force to overwrite (or merge the printed block by hand)", file=str(out)
        )
    write_atomic(out, text, prefix=".tmp-", suffix=out.suffix)  # all or nothing
    typer.echo(f"wrote {out} ({to})", err=True)
