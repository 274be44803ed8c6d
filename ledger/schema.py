"""The storage format's schemas: the fields of a record line every reader uses (RAW_SCHEMA, whose types
analysis validates against) and what a compacted segment keeps of each record (SEGMENT_SCHEMA).

contracts/records.py defines the lines themselves; docs/schema.md documents them.
"""

from __future__ import annotations

import polars as pl

# The usage breakdown kept as returned (OpenAI's details objects, Anthropic's cache fields): reasoning vs
# visible output, cached vs fresh input. Segments (ledger.segments) store the same fields, so both use this.
USAGE_BREAKDOWN: dict[str, pl.DataType] = {
    "prompt_tokens_details": pl.Struct({"cached_tokens": pl.Int64}),
    "completion_tokens_details": pl.Struct({"reasoning_tokens": pl.Int64}),
    "cache_read_input_tokens": pl.Int64(),
    "cache_creation_input_tokens": pl.Int64(),
}
# The two counts every cost figure uses, plus the breakdown.
RECORD_USAGE = pl.Struct({"prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, **USAGE_BREAKDOWN})
CLASS_STRUCT = pl.Struct({"class": pl.String})

# Every field analysis uses; anything else on a line is ignored (extra fields are allowed).
RAW_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.String(),
    "task_id": pl.String(),
    "family": pl.String(),
    "strategy": pl.String(),
    "budget_n": pl.Int64(),
    "arm": pl.String(),
    "replicate": pl.Int64(),
    "role": pl.String(),
    "usage": RECORD_USAGE,
    "prompt_tokens": pl.Int64(),
    "completion_tokens": pl.Int64(),
    "usage_missing": pl.Boolean(),
    "error": CLASS_STRUCT,
    "failure": CLASS_STRUCT,
    "finish_reason": pl.String(),
    "score": pl.Float64(),
    "correct": pl.Boolean(),
    "winner": pl.String(),
    "arm_a": pl.String(),
    "arm_b": pl.String(),
    "strategy_a": pl.String(),
    "budget_a": pl.Int64(),
    "strategy_b": pl.String(),
    "budget_b": pl.Int64(),
}

# The counts, the provider's total, and the breakdown analysis splits tokens by (USAGE_BREAKDOWN above).
_SEGMENT_USAGE = pl.Struct(
    {"prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "total_tokens": pl.Int64, **USAGE_BREAKDOWN}
)

# What a segment keeps of each record (contracts/records.py): every field analysis reads (RAW_SCHEMA, one
# definition of their types), plus the call and outcome details worth querying. Object-valued fields (error,
# failure, gen, grader) keep their JSON text. Anything else stays in the job objects only.
_AS_JSON_TEXT = ("error", "failure")
SEGMENT_SCHEMA: dict[str, pl.DataType] = {
    "schema": pl.Int64(),
    "run_id": pl.String(),
    **{k: (pl.String() if k in _AS_JSON_TEXT else v) for k, v in RAW_SCHEMA.items()},
    "usage": _SEGMENT_USAGE,  # with the provider's total_tokens, kept for queries on the segment
    "call_index": pl.Int64(),
    "model": pl.String(),
    "latency_s": pl.Float64(),
    "attempts": pl.Int64(),
    "gen": pl.String(),  # the generation settings a call sent
    "answer": pl.String(),
    "grader": pl.String(),
    "started_at": pl.Float64(),
    "finished_at": pl.Float64(),
    "task_digest": pl.String(),  # the graded task's digest (outcome lines): analysis checks it against the run
}
