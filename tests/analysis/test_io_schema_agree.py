"""The polars checks (analysis.io.schema._normalise, the fast path) and their Python mirror
(analysis.io.schema._type_problem, used line by line by analysis.io.recovery) must agree: accept the same
records, reject the same records, and name the same field.

Records are generated: a valid record of each kind with one (or a few) fields set to a value of any JSON
type, or removed. With one change everything else stays valid, so a rejection must name that change's field.

What the mirror leaves to polars: the usage breakdown objects, `error`/`failure` objects, integers beyond
64 bits and a top-level token count that the usage object overrides. polars refuses a wrong type there, and
the line-by-line path then names the line (`unreadable line: …`) but no field (mirror_leaves_to_polars).
Any other field polars refuses must be named by the mirror, so a new typed field in RAW_SCHEMA without a
Python rule fails here.
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.analysis.io.recovery import _slow_read
from elo_per_token.analysis.io.scan import _fast
from elo_per_token.analysis.io.schema import (
    _ID_FIELDS,
    _SUSPECT_MSG,
    RAW_SCHEMA,
    RECORD_SCHEMA,
    _type_problem,
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

USAGE = {"prompt_tokens": 10, "completion_tokens": 5}
BASES: list[dict[str, Any]] = [
    {"kind": "call", "task_id": "math-1", "strategy": "greedy", "budget_n": 1, "replicate": 0, "role": "solver",
     "usage": USAGE, "finish_reason": "stop"},
    {"task_id": "math-1", "strategy": "greedy", "budget_n": 1, "usage": USAGE},  # a call without `kind`
    {"kind": "call", "task_id": "code-2", "strategy": "best_of_n", "budget_n": 4, "usage_missing": True,
     "error": {"class": "timeout"}},
    {"kind": "outcome", "task_id": "math-1", "strategy": "greedy", "budget_n": 1, "score": 0.5},
    {"task_id": "math-1", "arm": "greedy@1", "strategy": "greedy", "budget_n": 1, "correct": True},
    {"kind": "outcome", "task_id": "code-2", "strategy": "majority", "budget_n": 4, "correct": False,
     "failure": {"class": "no_answer"}},
    {"kind": "judgment", "task_id": "math-1", "winner": "A", "arm_a": "greedy@1", "arm_b": "majority@4"},
    {"task_id": "math-1", "winner": "tie", "strategy_a": "greedy", "budget_a": 1, "strategy_b": "majority",
     "budget_b": 4},
]  # fmt: skip

USAGE_FIELDS = [
    "usage.prompt_tokens", "usage.completion_tokens", "usage.prompt_tokens_details",
    "usage.completion_tokens_details", "usage.cache_read_input_tokens", "usage.cache_creation_input_tokens",
]  # fmt: skip
FIELDS = [*RAW_SCHEMA, *USAGE_FIELDS]
MIRROR_GAPS = {
    "error", "failure", "usage.prompt_tokens_details", "usage.completion_tokens_details",
    "usage.cache_read_input_tokens", "usage.cache_creation_input_tokens",
}  # fmt: skip
DELETE = object()  # the change "remove the field"

STRINGS = ["", " ", "x", "A", "b", "TIE", "C", "call", "judgment", "5", "-1", "0.5", "1e3", "true", "null",
           "{}", "[1]", "a\x00b", "tab\there", "greedy@1", "math-1"]  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 5),
    st.sampled_from([2**63, -(2**63) - 1]),  # one past the 64-bit range on either side
    st.floats(-2, 2, allow_nan=False, allow_infinity=False),
    st.sampled_from(STRINGS),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=2),
    st.dictionaries(
        st.sampled_from(["class", "cached_tokens", "reasoning_tokens", "a"]), SCALARS, max_size=2
    ),
)
CHANGE = st.tuples(st.sampled_from(FIELDS), st.one_of(VALUES, st.just(DELETE)))


def changed(base: dict[str, Any], changes: list[tuple[str, Any]]) -> dict[str, Any]:
    rec = json.loads(json.dumps(base))
    for name, value in changes:
        top, _, sub = name.partition(".")
        target = rec
        if sub:
            if not isinstance(rec.get("usage"), dict):
                rec["usage"] = {}
            target, top = rec["usage"], sub
        if value is DELETE:
            target.pop(top, None)
        else:
            target[top] = value
    return rec


def at(rec: dict[str, Any], name: str) -> Any:
    top, _, sub = name.partition(".")
    return rec.get("usage", {}).get(sub) if sub else rec.get(top)


def mirror_leaves_to_polars(rec: dict[str, Any], name: str) -> bool:
    """The places the Python rules do not check (polars refuses a wrong type there; the line is named, the
    field is not): MIRROR_GAPS, integers beyond 64 bits, and a top-level prompt_tokens/completion_tokens
    when the usage object holds that count (the rules check the count that is used: usage's)."""
    v = at(rec, name)
    beyond_64_bits = isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63
    shadowed = name in ("prompt_tokens", "completion_tokens") and name in (rec.get("usage") or {})
    return name in MIRROR_GAPS or beyond_64_bits or shadowed


def polars_reads(line: str) -> bool:
    """Does polars parse the line with RAW_SCHEMA (the fast path's parse)?"""
    try:
        pl.read_ndjson(io.BytesIO((line + "\n").encode()), schema=RAW_SCHEMA)
    except pl.exceptions.PolarsError:
        return False
    return True


def both_paths(rec: dict[str, Any]) -> tuple[pl.DataFrame | None, pl.DataFrame, list]:
    """(fast-path frame or None if polars refused the file, line-by-line good rows, line-by-line bad lines)."""
    with tempfile.TemporaryDirectory() as d:
        f = str(Path(d) / "one.jsonl")
        Path(f).write_text(json.dumps(rec) + "\n", encoding="utf-8")
        fast = _fast([f])
        good, bad = _slow_read(f, skip_bad=True)
    return fast, good, bad


def same_rows(fast: pl.DataFrame, good: pl.DataFrame) -> bool:
    cols = [c for c in RECORD_SCHEMA if c != "file"]
    return good.select(cols).equals(fast.select(cols))


@SETTINGS
@given(base=st.sampled_from(BASES), change=CHANGE)
def test_python_type_rules_mirror_the_polars_parse(base: dict[str, Any], change: tuple[str, Any]) -> None:
    """One change: the Python rule rejects a typed field exactly when polars refuses the line; an id of the
    wrong JSON type, which polars reads as its text, is flagged by polars' own check on the same field."""
    rec = changed(base, [change])
    name = change[0]
    problem = _type_problem(rec)
    reads = polars_reads(json.dumps(rec))
    if problem is None:
        assert reads or mirror_leaves_to_polars(rec, name), (
            f"polars refuses {name}={at(rec, name)!r} but the Python rules accept it"
        )
        return
    field, _ = problem
    assert field == name, (problem, change)
    if field in _ID_FIELDS:
        assert reads  # polars keeps any JSON value's text in a String column ...
        fast, _, _ = both_paths(rec)
        assert fast is not None
        # ... and flags it: as not a string, or, when that text holds a NUL/control character (e.g. the list
        # ["a\x00b"]), by the control-character rule checked first on the same field. Either names the field.
        assert fast["bad_field"][0] == field, (fast["bad_field"][0], change)
        assert fast["bad_msg"][0] in (_SUSPECT_MSG, "must not be empty or hold NUL/control characters"), (
            change
        )
    else:
        assert not reads, f"the Python rules reject {problem} but polars reads the line"


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
@SETTINGS
@given(base=st.sampled_from(BASES), change=CHANGE)
def test_one_change_both_paths_accept_or_reject_alike_and_name_the_same_field(
    base: dict[str, Any], change: tuple[str, Any]
) -> None:
    rec = changed(base, [change])
    fast, good, bad = both_paths(rec)
    if fast is None:  # polars refused the line: the line-by-line path rejects it and names the field it can
        assert len(bad) == 1 and bad[0].line == 1
        problem = _type_problem(rec)
        assert bad[0].field == (problem[0] if problem else None), (bad, change)
        return
    field, msg = fast["bad_field"][0], fast["bad_msg"][0]
    if field is None:
        assert bad == [] and same_rows(fast, good), (bad, change)
    elif msg == _SUSPECT_MSG and isinstance(at(rec, field), str):
        # An id that only looks like a number or literal: polars sends the file to the line-by-line path,
        # which sees a JSON string and keeps the line as polars read it.
        assert bad == [] and same_rows(fast, good), (bad, change)
    else:
        assert [b.field for b in bad] == [field], (bad, field, msg, change)


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
@SETTINGS
@given(base=st.sampled_from(BASES), changes=st.lists(CHANGE, min_size=2, max_size=4))
def test_several_changes_both_paths_accept_or_reject_alike(
    base: dict[str, Any], changes: list[tuple[str, Any]]
) -> None:
    """With several problems each path may name a different one first; they still agree on the verdict."""
    rec = changed(base, changes)
    fast, good, bad = both_paths(rec)
    if fast is None:
        assert len(bad) == 1
    elif fast["bad_field"][0] is None:
        assert bad == [] and same_rows(fast, good)
    elif bad == []:
        # Only an escalation: polars flagged ids that may not be strings, the JSON shows they are.
        assert fast["bad_msg"][0] == _SUSPECT_MSG and same_rows(fast, good)
    else:
        assert len(bad) == 1 and good.height == 0
