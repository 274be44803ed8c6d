"""elo-per-token command line (`ept`). The stages live in their own packages; this one only wires them."""

__version__ = "0.1.0"
