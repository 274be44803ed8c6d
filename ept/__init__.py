"""elo-per-token command line (`ept`). The stages live in their own packages; this one only wires them."""

from elo_per_token import __version__

__all__ = ["__version__"]
