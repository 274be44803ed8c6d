"""Contracts between the stages of elo-per-token.

Everything that crosses a stage boundary is defined here exactly once:
the job payload (coordinator -> queue -> worker), the records a worker writes
(worker -> ledger -> analysis), task suites and provider profiles, and the `EPT_*`
environment variables (settings.py). Utilities that know no project data (atomic
writes, backoff, TOML lines) are `common/`. Storage
itself (the ledger's layout and backends) is the `ledger/` stage. Stages
import from here; they never import from each other against the data flow
(coordinator -> queue -> worker -> ledger -> analysis).
"""
