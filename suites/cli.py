"""Commands of this stage, added to the `ept` app by ept.cli."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this stage's commands to `app` (filled in as the stage is built)."""
