"""The storage stage: where a run's manifest, job records, failures, segments and key declarations live.

Modules: `store` (the one `Ledger`: the key layout, over an object store; `FileLedger`/`S3Ledger` choose the
store; opening a ledger by URL), `objects` (the object-store interface), `local` and `s3` (its two
implementations, with their fast paths and the S3 diagnostics), `retry` (the retry policy), `segments`
(compaction into Parquet segments and reading their indexes), `keyspace` (key declarations, so a compacted
run reads without a listing), `schema` (the record and segment schemas), `runref` (a run named by its folder
or URL), `s3config` (polars' S3 options). Writers (coordinator, worker) and readers (analysis) import
storage from here only.
"""

from elo_per_token.ledger.store import (
    DEFAULT_LEDGER,
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
    "DEFAULT_LEDGER",
    "FAILURE_SUFFIX",
    "JOB_SUFFIX",
    "FileLedger",
    "Ledger",
    "S3Ledger",
    "check_run",
    "open_ledger",
    "open_ledger_for_reading",
]
