"""analysis.io became a package (sources, schema, scan, recovery, runs, families); every name the single
module offered is still importable from `analysis.io` itself, so callers, tests and benchmarks need no change."""

from __future__ import annotations

import elo_per_token.analysis.io as io_pkg

# Every top-level name of the former analysis/io.py (functions, classes, constants, public and private) and
# InputError, which it imported and callers could take from it.
_FORMER = """
KINDS WINNERS DATA_SUFFIXES USAGE_BREAKDOWN _USAGE _CLASS RAW_SCHEMA _INT_FIELDS RECORD_SCHEMA BadLine Records
storage_options _s3_client _is_data_file expand_inputs _list_s3 _drop_compacted_copies _RUN_URL RUN_CHUNK_JOBS
RunSource run_source split_runs DEFAULT_LEDGER resolve_input open_run read_run _read_segment _read_objects _scan
TOKENS_FIELDS _TYPE_WORDS _scan_parquet _SUSPECT_ID _SUSPECT_MSG _ID_FIELDS _normalise _open_text _read_lines
_split_lines _NotJson _refuse_constant _constant_field _type_problem _slow_read _parse_lines _slow_read_parquet
line_of _fast _read_group _settle_flagged _as_list read_records Summary read_summary read_tasks_file
_resolve_families InputError
"""
FORMER_NAMES = _FORMER.split()


def test_every_former_name_is_importable_from_the_package() -> None:
    missing = [n for n in FORMER_NAMES if not hasattr(io_pkg, n)]
    assert not missing, f"analysis.io no longer offers: {missing}"


def test_public_names_are_the_submodules_objects_not_copies() -> None:
    from elo_per_token.analysis.io import recovery, schema, sources

    assert io_pkg.read_records.__module__ == io_pkg.__name__
    assert io_pkg.BadLine is schema.BadLine and io_pkg.RAW_SCHEMA is schema.RAW_SCHEMA
    assert io_pkg.line_of is recovery.line_of and io_pkg.expand_inputs is sources.expand_inputs
    assert sorted(io_pkg.__all__) == sorted(set(io_pkg.__all__))  # no name listed twice
