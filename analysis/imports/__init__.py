"""Other tools' logs turned into our record shape (docs/imports.md): OpenAI Batch API files, inspect_ai logs.

Each importer returns call and outcome records as dicts that `ept analyze` reads like our own ledger,
plus the bad input lines it skipped (with --skip-bad) — the same validation contract as analysis.io:
the first bad line raises InputError naming file, line and field (exit 2), nothing is written.
"""
