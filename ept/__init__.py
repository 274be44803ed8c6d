"""elo-per-token command line (`ept`). The stages live in their own packages; this one only wires them."""

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    """`__version__` from the package, read only when asked for (see elo_per_token.__getattr__)."""
    if name == "__version__":
        import elo_per_token

        return elo_per_token.__version__
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
