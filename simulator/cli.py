"""`ept simulate`: run the OpenAI-compatible simulator in the foreground."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Annotated

import typer

from elo_per_token.contracts.errors import InputError


def check_port_free(host: str, port: int) -> None:
    """InputError (one line, exit 2) when the address cannot be bound: in use, or not an address of this host."""
    import socket

    try:
        with socket.create_server((host, port)):
            pass
    except OSError as e:
        why = "in use (another simulator? pick another --port)" if e.errno == errno.EADDRINUSE else e.strerror
        raise InputError(f"cannot listen on {host}:{port}: {why}", field="--port") from None


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


def simulate(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
    host: Annotated[
        str, typer.Option(help="Interface to bind (the control routes have no auth: keep loopback).")
    ] = "127.0.0.1",
    config: Annotated[
        Path | None, typer.Option("--config", help="Simulator config TOML (docs/simulator.md).")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed for replies, faults and latency (overrides the config).")
    ] = None,
) -> None:
    """Run the ept SIMULATOR: a fake OpenAI-compatible provider (/v1/models, /v1/chat/completions, /v1/messages, /v1/responses; SSE streaming)."""
    from rich.console import Console

    from elo_per_token.simulator.config import SimConfig, apply_updates, load_config
    from elo_per_token.simulator.server import load_brain, serve

    if not 0 < port < 65536:
        raise InputError(f"must be a port between 1 and 65535, got {port}", field="--port")
    check_port_free(host, port)
    cfg = load_config(config) if config else SimConfig()
    if seed is not None:
        cfg = apply_updates(cfg, {"seed": seed})
    brain = load_brain()
    Console(emoji=False, stderr=True).print(
        f"ept simulator (not a real model) on http://{host}:{port}/v1  brain={type(brain).__name__} seed={cfg.seed} "
        f"key check={'on' if cfg.api_key else 'off'}  — Ctrl-C to stop",
        highlight=False,
    )
    try:
        serve(cfg, host=host, port=port, brain=brain)
    except OSError as e:  # taken between the check and the bind
        raise InputError(f"cannot listen on {host}:{port}: {e.strerror or e}", field="--port") from None
