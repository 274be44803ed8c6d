"""The storage stage: where a run's manifest, job records, failures, segments and key declarations live.

Modules: `store` (the `Ledger` protocol, the local-folder and S3 ledgers, opening a ledger by URL, the retry
policy and S3 diagnostics), `segments` (compaction into Parquet segments and reading their indexes),
`keyspace` (key-space declarations, so a compacted run reads without a listing), `schema` (the record and
segment schemas). Writers (coordinator, worker) and readers (analysis) import storage from here only.
"""

from elo_per_token.ledger.store import (
    FAILURE_SUFFIX,
    JOB_SUFFIX,
    FileLedger,
    Ledger,
    S3Ledger,
    check_run,
    open_ledger,
    open_ledger_for_reading,
)

__all__ = [
    "FAILURE_SUFFIX",
    "JOB_SUFFIX",
    "FileLedger",
    "Ledger",
    "S3Ledger",
    "check_run",
    "open_ledger",
    "open_ledger_for_reading",
]
