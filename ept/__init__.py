"""elo-per-token command line (`ept`). The stages live in their own packages; this one only wires them.

The version is `elo_per_token.__version__` (read once from the package metadata in elo_per_token/__init__.py).
"""
