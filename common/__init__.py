"""Utilities every stage may use and that know nothing of the project's data: all-or-nothing file writes
(`atomic`), the one retry backoff formula (`backoff`), the file:line lookup for TOML error messages
(`tomlpos`), settings dataclasses checked by models (`checked`: pydantic, imported by the loaders only). This
stage imports no other stage (docs/architecture.md, "Import allow-list"); the schemas that cross stage
boundaries are `contracts/`.
"""
