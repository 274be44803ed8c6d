"""`ept simulate`: run the OpenAI-compatible simulator in the foreground."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


def simulate(
    port: int = typer.Option(8765, help="Port to listen on."),
    host: str = typer.Option(
        "127.0.0.1", help="Interface to bind (the control routes have no auth: keep loopback)."
    ),
    config: Path | None = typer.Option(None, "--config", help="Simulator config TOML (docs/simulator.md)."),
    seed: int | None = typer.Option(
        None, help="Seed for replies, faults and latency (overrides the config)."
    ),
) -> None:
    """Run the ept SIMULATOR: a fake OpenAI-compatible provider (/v1/models, /v1/chat/completions, /v1/messages, /v1/responses; SSE streaming)."""
    from rich.console import Console

    from elo_per_token.simulator.config import SimConfig, apply_updates, load_config
    from elo_per_token.simulator.server import load_brain, serve

    cfg = load_config(config) if config else SimConfig()
    if seed is not None:
        cfg = apply_updates(cfg, {"seed": seed})
    brain = load_brain()
    Console(stderr=True).print(
        f"ept simulator (not a real model) on http://{host}:{port}/v1  brain={type(brain).__name__} seed={cfg.seed} "
        f"key check={'on' if cfg.api_key else 'off'}  — Ctrl-C to stop",
        highlight=False,
    )
    serve(cfg, host=host, port=port, brain=brain)
