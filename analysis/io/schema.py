"""The record schemas and the validation rules, in their two forms side by side.

`_normalise` (rules in `_checks`) is the polars form: expressions over a scanned frame that flag the first
problem of each row (the fast path). `_type_problem` is its Python mirror for JSON types, used line by line
on the error path (analysis.io.recovery): it names the field of a value polars would refuse (polars names
no field), and catches ids of another JSON type, which polars reads as their text. The two must accept the
same lines and blame the same field; tests/analysis/test_io_schema_agree.py checks that they do.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.usage import MAX_CALL_TOKENS
from elo_per_token.ledger.schema import CLASS_STRUCT, RECORD_USAGE
from elo_per_token.ledger.schema import RAW_SCHEMA as RAW_SCHEMA
from elo_per_token.ledger.schema import USAGE_BREAKDOWN as USAGE_BREAKDOWN

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

KINDS = ("call", "outcome", "judgment")
WINNERS = {"a": "A", "b": "B", "tie": "tie"}

# The line schema analysis reads (RAW_SCHEMA) is the ledger's storage format: one definition, in ledger/schema.py.
_USAGE = RECORD_USAGE
_CLASS = CLASS_STRUCT

_INT_FIELDS = ("budget_n", "replicate", "prompt_tokens", "completion_tokens", "budget_a", "budget_b")

# Labels every row repeats (a 1M-job run is 6M rows over ~50k task ids and a handful of arms): the records
# frame holds them as Categorical, a 4-byte code per row instead of a 16-byte string view (plus the text of
# longer ones). That is most of a large run's frame, and it is what `ept analyze` keeps while it works.
LABEL_COLUMNS = (
    "file",
    "kind",
    "task_id",
    "family",
    "strategy",
    "arm",
    "role",
    "finish_reason",
    "error_class",
    "winner",
    "arm_a",
    "arm_b",
)

# The normalised frame every later stage reads.
RECORD_SCHEMA: dict[str, pl.DataType] = {
    "file": pl.Categorical(),
    "row": pl.Int64(),  # 0-based index among the file's non-blank lines (parquet: row number)
    "kind": pl.Categorical(),
    "task_id": pl.Categorical(),
    "family": pl.Categorical(),
    "strategy": pl.Categorical(),
    "budget_n": pl.Int64(),
    "arm": pl.Categorical(),
    "replicate": pl.Int64(),
    "role": pl.Categorical(),
    "prompt_tokens": pl.Int64(),
    "completion_tokens": pl.Int64(),
    "usage_missing": pl.Boolean(),
    # The usage breakdown as returned (null when the server did not send it); see analysis.tokens.token_split.
    "reasoning_tokens": pl.Int64(),
    "cached_tokens": pl.Int64(),  # OpenAI prompt_tokens_details.cached_tokens or Anthropic cache_read_input_tokens
    "cache_creation_tokens": pl.Int64(),  # Anthropic cache_creation_input_tokens
    "finish_reason": pl.Categorical(),
    # call: the failed call's class; outcome: why it has no score (error) or why it scored 0 (failure)
    "error_class": pl.Categorical(),
    "scored_failure": pl.Boolean(),  # outcome scored as a loss because the strategy failed on the task
    "score": pl.Float64(),
    "winner": pl.Categorical(),
    "arm_a": pl.Categorical(),
    "arm_b": pl.Categorical(),
}


# What `ept tokens` parses and validates: the call fields it counts, and what classifies a line without `kind`.
# "usage.x" parses only that member of the usage object: the breakdown (details objects, cache fields) is
# most of the JSON parse's cost on a call line and `ept tokens` does not report it. Not `family` either.
TOKENS_FIELDS = (
    "kind",
    "task_id",
    "strategy",
    "budget_n",
    "arm",
    "replicate",
    "role",
    "usage.prompt_tokens",
    "usage.completion_tokens",
    "prompt_tokens",
    "completion_tokens",
    "usage_missing",
    "error",
    "score",
    "correct",
    "winner",
)


def fields_schema(fields: Sequence[str]) -> dict[str, pl.DataType]:
    """The RAW_SCHEMA subset that parses `fields` (names of RAW_SCHEMA, or "usage.<member>" for members of
    the usage object). The scan fills every other field, and usage member, with nulls (analysis.io.scan).

    Args:
        fields: Field names of RAW_SCHEMA, or "usage.<member>".
    """
    schema: dict[str, pl.DataType] = {}
    members: dict[str, PolarsDataType] = {}
    usage = _USAGE.to_schema()
    for f in fields:
        top, _, member = f.partition(".")
        if top not in RAW_SCHEMA or (member and (top != "usage" or member not in usage)):
            raise ValueError(f"unknown record field {f!r}")
        if member:
            members[member] = usage[member]
        schema[top] = pl.Struct(members) if member else RAW_SCHEMA[top]
    return schema


@dataclass(frozen=True)
class BadLine:
    file: str
    line: int
    field: str | None
    message: str

    def __str__(self) -> str:
        return str(InputError(self.message, self.file, self.line, self.field))


# polars reads any JSON value into a String column as its text, so `"task_id": 5` and `"task_id": "5"` look the
# same on the fast path. Ids that could be a bare JSON number, literal, object or array send their file to the
# line-by-line path (which sees the JSON types); ids that are genuine strings are then accepted there.
_SUSPECT_ID = r"^(-?[0-9][0-9.eE+-]*|true|false|null|\{.*|\[.*)$"
_SUSPECT_MSG = "must be a string"
_EMPTY_MSG = "must not be empty or hold NUL/control characters"
_ID_FIELDS = ("task_id", "family", "strategy", "arm")
_WINNER_MSG = "must be A, B or tie"
# One call's token count is at most the bound the worker holds provider usage to (contracts.usage): beyond it a
# count is a bug, not a bill, and the bound keeps every sum of a log's counts inside Int64 (a wrapped sum would be
# a negative or zero total, shown as measured).
_TOO_MANY_MSG = f"must be at most {MAX_CALL_TOKENS:,} (one call's tokens)"


def _winner() -> pl.Expr:
    """A, B or tie from any casing; null for anything else (the `winner` check names it)."""
    return pl.col("winner").str.to_lowercase().replace_strict(WINNERS, default=None, return_dtype=pl.String)


def _normalise(lf: pl.LazyFrame, *, suspect_ids: bool = True, categorical: bool = True) -> pl.LazyFrame:
    """Raw schema -> RECORD_SCHEMA plus a `bad_field`/`bad_msg` pair describing the first problem.
    suspect_ids=False on the line-by-line path, where the JSON types were already checked. categorical=False
    keeps LABEL_COLUMNS as strings (a query that only aggregates them has no frame to keep small)."""
    bad_field, bad_msg = _first_problem(_checks(suspect_ids=suspect_ids))
    out = _prepare(lf).select(*_record_columns(), bad_field.alias("bad_field"), bad_msg.alias("bad_msg"))
    if not categorical:
        return out
    # In the same (streaming) query: the string columns are never materialised whole.
    return out.with_columns(pl.col(*LABEL_COLUMNS, "bad_field", "bad_msg").cast(pl.Categorical))


def _prepare(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The raw columns plus those the rules and RECORD_SCHEMA read: kind_r (the resolved kind), p and c (the
    token counts, from usage or the flat fields)."""
    kind_guess = (
        pl.when(pl.col("winner").is_not_null())
        .then(pl.lit("judgment"))
        .when(pl.col("score").is_not_null() | pl.col("correct").is_not_null())
        .then(pl.lit("outcome"))
        .otherwise(pl.lit("call"))
    )
    prompt = pl.coalesce(pl.col("usage").struct.field("prompt_tokens"), pl.col("prompt_tokens"))
    completion = pl.coalesce(pl.col("usage").struct.field("completion_tokens"), pl.col("completion_tokens"))
    return lf.with_columns(
        pl.coalesce(pl.col("kind"), kind_guess).alias("kind_r"),
        prompt.alias("p"),
        completion.alias("c"),
    )


# The record fields `ept tokens` groups raw rows by (read_summary's fast path): the ids, the arm, the replicate and
# the role, as written (`kind_r` resolved). A million call lines fall into a few thousand such groups, and every
# rule that reads only these fields is checked once per group instead of once per row (_group_rule_split).
GROUP_KEYS = ("kind_r", "task_id", "family", "arm", "strategy", "budget_n", "replicate", "role")


def _group_rule_split(keys: Sequence[str]) -> tuple[pl.Expr, pl.Expr]:
    """The rules of `_checks` (the id text rules left out: ids_pass checks them on distinct values) split in two
    over a group-by on `keys`: (an aggregation, any row of the group breaks a rule that reads a non-key column;
    a flag over the groups, the group's keys break a rule). A group is bad iff one of its rows is: the rules of
    the second kind read only the keys, which every row of the group shares. Derived from `_checks`, so a rule
    added there lands on one side or the other by the columns it reads.

    Args:
        keys: The columns the rows are grouped by (GROUP_KEYS, or a subset).
    """
    rules = [
        # The winner's spelling (lowercased, then looked up: the costliest rule per row, ~0.15 s per 1M
        # lines) is not checked here: any winner at all marks its group, so a log with judgments is
        # checked line by line. Stricter, never laxer; a call log has no winner.
        pl.col("winner").is_not_null() if msg == _WINNER_MSG else cond.fill_null(False)
        for _, msg, cond in _checks(suspect_ids=True)
        if msg not in (_EMPTY_MSG, _SUSPECT_MSG)
    ]
    on_keys = [r for r in rules if set(r.meta.root_names()) <= set(keys)]
    per_row = [r for r in rules if not set(r.meta.root_names()) <= set(keys)]
    nothing = [pl.lit(False)]
    return pl.any_horizontal(per_row or nothing).any(), pl.any_horizontal(on_keys or nothing)


def ids_pass(frame: pl.DataFrame, names: Sequence[str] = _ID_FIELDS) -> bool:
    """Whether the values of the id columns `names` in `frame` pass every id rule, checked on their distinct
    values (a log repeats a few thousand ids over a million lines: thousands of string checks, not millions).

    Args:
        frame: The records read.
        names: The id columns to check.
    """
    for name in names:
        values = frame.get_column(name).unique().to_frame(name)
        flags = values.select(
            pl.any_horizontal(cond.fill_null(False) for cond in _id_rules(name, suspect_ids=True))
        )
        if flags.to_series().any():
            return False
    return True


def _id_rules(name: str, *, suspect_ids: bool) -> list[pl.Expr]:
    """The text rules of one id field, flags-the-value expressions in `_checks` order."""
    rules = [(pl.col(name).str.strip_chars() == "") | pl.col(name).str.contains(r"[\x00-\x1f\x7f]")]
    if suspect_ids:
        rules.append(pl.col(name).str.contains(_SUSPECT_ID))
    return rules


def _checks(*, suspect_ids: bool) -> list[tuple[str, str, pl.Expr]]:
    """The validation rules in order, as (field, message, flags-the-row): a row's first true rule is its
    problem. Over the columns `_normalise` adds: kind_r (the resolved kind), p and c (the token counts)."""
    kind = pl.col("kind_r")
    call_or_outcome = kind.is_in(["call", "outcome"])
    winner = _winner()
    return [
        ("kind", "must be one of call, outcome, judgment", ~kind.is_in(KINDS)),
        ("task_id", "is required", pl.col("task_id").is_null()),
        *((name, _EMPTY_MSG, _id_rules(name, suspect_ids=False)[0]) for name in _ID_FIELDS),
        *(
            ((name, _SUSPECT_MSG, _id_rules(name, suspect_ids=True)[1]) for name in _ID_FIELDS)
            if suspect_ids
            else ()
        ),
        ("strategy", "is required", call_or_outcome & pl.col("strategy").is_null()),
        ("budget_n", "is required", call_or_outcome & pl.col("budget_n").is_null()),
        ("budget_n", "must be >= 0", pl.col("budget_n") < 0),
        ("replicate", "must be >= 0", pl.col("replicate") < 0),
        ("usage.prompt_tokens", "must be >= 0", pl.col("p") < 0),
        ("usage.completion_tokens", "must be >= 0", pl.col("c") < 0),
        ("usage.prompt_tokens", _TOO_MANY_MSG, pl.col("p") > MAX_CALL_TOKENS),
        ("usage.completion_tokens", _TOO_MANY_MSG, pl.col("c") > MAX_CALL_TOKENS),
        (
            "usage.prompt_tokens",
            "is missing while usage.completion_tokens is present",
            (kind == "call") & pl.col("p").is_null() & pl.col("c").is_not_null(),
        ),
        (
            "usage.completion_tokens",
            "is missing while usage.prompt_tokens is present",
            (kind == "call") & pl.col("c").is_null() & pl.col("p").is_not_null(),
        ),
        ("score", "must be between 0 and 1", (pl.col("score") < 0) | (pl.col("score") > 1)),
        ("score", "must be a number", pl.col("score").is_nan()),
        ("winner", "is required for a judgment", (kind == "judgment") & pl.col("winner").is_null()),
        ("winner", _WINNER_MSG, pl.col("winner").is_not_null() & winner.is_null()),
        (
            "arm_a",
            "is required for a judgment (or strategy_a and budget_a)",
            (kind == "judgment")
            & pl.col("arm_a").is_null()
            & (pl.col("strategy_a").is_null() | pl.col("budget_a").is_null()),
        ),
        (
            "arm_b",
            "is required for a judgment (or strategy_b and budget_b)",
            (kind == "judgment")
            & pl.col("arm_b").is_null()
            & (pl.col("strategy_b").is_null() | pl.col("budget_b").is_null()),
        ),
    ]


def _first_problem(checks: list[tuple[str, str, pl.Expr]]) -> tuple[pl.Expr, pl.Expr]:
    """(bad_field, bad_msg) of each row's first failing check, null when every check passes."""
    # One integer per row (index of the first failing check) is far cheaper than two long when-chains.
    first_bad = pl.min_horizontal(
        [pl.when(cond.fill_null(False)).then(pl.lit(i, pl.Int32)) for i, (_, _, cond) in enumerate(checks)]
    )
    bad_field = first_bad.replace_strict(
        {i: f for i, (f, _, _) in enumerate(checks)}, default=None, return_dtype=pl.String
    )
    bad_msg = first_bad.replace_strict(
        {i: m for i, (_, m, _) in enumerate(checks)}, default=None, return_dtype=pl.String
    )
    return bad_field, bad_msg


def _record_columns() -> list[pl.Expr]:
    """The RECORD_SCHEMA columns (in order) from the raw columns plus kind_r, p and c."""
    kind = pl.col("kind_r")
    arm_from = pl.col("strategy") + pl.lit("@") + pl.col("budget_n").cast(pl.String)
    arm_a = pl.coalesce(
        pl.col("arm_a"), pl.col("strategy_a") + pl.lit("@") + pl.col("budget_a").cast(pl.String)
    )
    arm_b = pl.coalesce(
        pl.col("arm_b"), pl.col("strategy_b") + pl.lit("@") + pl.col("budget_b").cast(pl.String)
    )
    return [
        pl.col("file"),
        pl.col("row"),
        kind.alias("kind"),
        pl.col("task_id"),
        pl.col("family"),
        pl.col("strategy"),
        pl.col("budget_n"),
        pl.coalesce(pl.col("arm"), arm_from).alias("arm"),
        pl.col("replicate").fill_null(0),
        pl.col("role"),
        pl.col("p").alias("prompt_tokens"),
        pl.col("c").alias("completion_tokens"),
        # A failed call without usage was not billed: not a missing usage. The explicit flag always counts
        # (e.g. a billed response whose usage was invalid, stored as null).
        (
            (kind == "call")
            & (
                pl.col("usage_missing").fill_null(False)
                | (pl.col("p").is_null() & pl.col("error").struct.field("class").is_null())
            )
        ).alias("usage_missing"),
        pl.col("usage")
        .struct.field("completion_tokens_details")
        .struct.field("reasoning_tokens")
        .alias("reasoning_tokens"),
        pl.coalesce(
            pl.col("usage").struct.field("prompt_tokens_details").struct.field("cached_tokens"),
            pl.col("usage").struct.field("cache_read_input_tokens"),
        ).alias("cached_tokens"),
        pl.col("usage").struct.field("cache_creation_input_tokens").alias("cache_creation_tokens"),
        pl.col("finish_reason"),
        pl.coalesce(pl.col("failure").struct.field("class"), pl.col("error").struct.field("class")).alias(
            "error_class"
        ),
        ((kind == "outcome") & pl.col("failure").struct.field("class").is_not_null()).alias("scored_failure"),
        pl.coalesce(pl.col("score"), pl.col("correct").cast(pl.Float64)).alias("score"),
        _winner().alias("winner"),
        arm_a.alias("arm_a"),
        arm_b.alias("arm_b"),
    ]


def _type_problem(obj: dict[str, Any]) -> tuple[str, str] | None:
    """Same type rules polars applies with RAW_SCHEMA: integer fields take JSON integers only (not 4.0,
    not "4"), number and boolean fields their own JSON type. String fields, like polars, take any JSON
    value and keep its text, so both paths accept exactly the same lines."""
    usage = obj.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return "usage", f"must be an object, got {type(usage).__name__}"
    for name in _ID_FIELDS:
        v = obj.get(name)
        if v is not None and not isinstance(v, str):
            return name, f"{_SUSPECT_MSG}, got {json.dumps(v)[:40]}"
    for name in _INT_FIELDS:
        src = usage if name in ("prompt_tokens", "completion_tokens") and usage and name in usage else obj
        v = src.get(name)
        label = f"usage.{name}" if src is usage else name
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            return label, f"must be an integer, got {json.dumps(v)}"
    s = obj.get("score")
    if s is not None and (isinstance(s, bool) or not isinstance(s, int | float)):
        return "score", f"must be a number between 0 and 1, got {json.dumps(s)}"
    c = obj.get("correct")
    if c is not None and not isinstance(c, bool):
        return "correct", f"must be true or false, got {json.dumps(c)}"
    for name in ("usage_missing",):
        v = obj.get(name)
        if v is not None and not isinstance(v, bool):
            return name, f"must be true or false, got {json.dumps(v)}"
    return None
