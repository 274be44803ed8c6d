"""analysis.io is a package (sources, schema, scan, recovery, runs, families) whose `__init__` offers the public
API: the submodules' own objects, not copies, and no private name in `__all__` (private helpers are imported
from their submodule, so they can change without an API change)."""

from __future__ import annotations

import elo_per_token.analysis.io as io_pkg


def test_all_lists_public_names_that_exist() -> None:
    assert io_pkg.__all__, "analysis.io offers no names"
    private = [n for n in io_pkg.__all__ if n.startswith("_")]
    assert not private, f"private names in analysis.io.__all__: {private}"
    missing = [n for n in io_pkg.__all__ if not hasattr(io_pkg, n)]
    assert not missing, f"analysis.io.__all__ lists names it does not define: {missing}"
    assert {"read_records", "read_summary", "run_source", "resolve_input", "BadLine"} <= set(io_pkg.__all__)


def test_public_names_are_the_submodules_objects_not_copies() -> None:
    from elo_per_token.analysis.io import recovery, schema, sources

    assert io_pkg.read_records.__module__ == io_pkg.__name__
    assert io_pkg.BadLine is schema.BadLine and io_pkg.RAW_SCHEMA is schema.RAW_SCHEMA
    assert io_pkg.line_of is recovery.line_of and io_pkg.expand_inputs is sources.expand_inputs
    assert sorted(io_pkg.__all__) == sorted(set(io_pkg.__all__))  # no name listed twice
