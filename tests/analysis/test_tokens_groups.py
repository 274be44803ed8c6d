"""`ept tokens` groups raw rows by their keys in the scan and checks the rules per group (issue 39): the same
lines pass as under the per-row rules, the same numbers come out as from the line-by-line read, and a bad line
still stops the command with the error the line-by-line path gives (file, line, field)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.analysis.io import (
    TOKENS_FIELDS,
    fields_schema,
    read_records,
    read_summary,
    record_groups_checked,
)
from elo_per_token.analysis.io.scan import _scan
from elo_per_token.analysis.io.schema import _normalise
from elo_per_token.analysis.tokens import (
    arm_tokens,
    arm_tokens_from_groups,
    calls_of,
    judge_tokens,
    judge_tokens_from_groups,
    record_groups,
)
from elo_per_token.contracts.errors import InputError
from elo_per_token.ept.cli import main

SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# The largest valid count (contracts.usage.MAX_CALL_TOKENS) and two too large (2**62: four of them wrap a sum).
COUNT = st.sampled_from([None, None, 0, 7, 1200, -1, 10_000_000, 10_000_001, 2**62])
GOOD_COUNT = st.sampled_from([0, 7, 1200, 10_000_000])


def _pair(count: st.SearchStrategy) -> st.SearchStrategy:
    return st.fixed_dictionaries({"prompt_tokens": count, "completion_tokens": count})


# A valid line: ids as written or derived (an arm equal to strategy@budget, or its own), replicates absent or
# not, roles (judge or not), usage nested, flat or missing, outcome lines among the calls.
good_row = st.fixed_dictionaries(
    {
        "task_id": st.sampled_from(["t-1", "t-1", "t-2", "é ü", "id 5"]),
        "strategy": st.sampled_from(["greedy", "best_of_n"]),
        "budget_n": st.sampled_from([1, 4, 0]),
        "usage": st.one_of(_pair(GOOD_COUNT), st.none()),
    },
    optional={
        "kind": st.sampled_from(["call", "call", "outcome"]),
        "arm": st.sampled_from(["greedy@1", "best_of_n@4", "custom"]),
        "replicate": st.sampled_from([None, 0, 1, 2]),
        "role": st.sampled_from([None, "judge", "generator", ""]),
        "usage_missing": st.sampled_from([None, True, False]),
        "error": st.sampled_from([None, {"class": "timeout"}]),
        "score": st.sampled_from([None, 0.5]),
    },
).flatmap(lambda r: st.one_of(st.just(r), _pair(GOOD_COUNT).map(lambda flat: {**r, **flat})))
# Any line: every field `ept tokens` reads, each sometimes absent, null, or breaking a rule.
FIELDS = {
    "kind": st.sampled_from(["call", "call", "outcome", "judgment", "bogus"]),
    "task_id": st.sampled_from(["t-1", "t-2", "t-3", "", " ", "x\x00", "é ü", "5", "{a"]),
    "strategy": st.sampled_from(["greedy", "best_of_n", "best_of_n", "", "true"]),
    "budget_n": st.sampled_from([1, 4, 4, 0, -1]),
    "arm": st.sampled_from(["greedy@1", "best_of_n@4", "custom", "\t"]),
    "replicate": st.sampled_from([None, 0, 1, 2, -3]),
    "role": st.sampled_from([None, "judge", "generator", ""]),
    "usage": st.one_of(st.none(), _pair(COUNT)),
    "prompt_tokens": COUNT,
    "completion_tokens": COUNT,
    "usage_missing": st.sampled_from([None, True, False]),
    "error": st.sampled_from([None, {"class": "timeout"}]),
    "score": st.sampled_from([None, 0.5, 1.5, -0.1]),
    "winner": st.sampled_from([None, "A", "tie", "x"]),
}
any_row = st.fixed_dictionaries({}, optional=FIELDS)
# One field of a line set to any value (faults one at a time, so that each rule gets its turn alone).
one_field = st.sampled_from(sorted(FIELDS)).flatmap(lambda k: FIELDS[k].map(lambda v: {k: v}))
GOOD = {
    "task_id": "t-1",
    "strategy": "greedy",
    "budget_n": 1,
    "usage": {"prompt_tokens": 3, "completion_tokens": 4},
}


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _per_row_verdict(log: str) -> bool:
    """Whether every line passes the per-row rules (the line-by-line path's polars form)."""
    scan = _scan([log], fields_schema(TOKENS_FIELDS))
    return _normalise(scan, categorical=False).select(pl.col("bad_field").is_null().all()).collect().item()


@SETTINGS
@given(st.lists(good_row, min_size=12, max_size=60))
def test_valid_logs_are_answered_by_the_grouped_pass_with_the_line_by_line_numbers(
    tmp_path: Path, rows: list[dict]
) -> None:
    log = _write(tmp_path / "calls.jsonl", rows)
    groups = bounded(
        lambda: record_groups_checked([log], fields_schema(TOKENS_FIELDS)), time_s=2, memory_mb=50
    )
    assert groups is not None  # valid lines: no fallback to the line-by-line read
    got = calls_of(read_summary([log], record_groups, fields=TOKENS_FIELDS).frame)
    want = read_records([log], resolve_families=False).calls
    assert _exact(arm_tokens_from_groups(got)) == _exact(arm_tokens(want))
    assert judge_tokens_from_groups(got).to_dicts() == judge_tokens(want).to_dicts()


def _exact(table: pl.DataFrame) -> list[dict]:
    """The table's rows, the average rounded to 12 significant digits: a mean of floats sums in the group-by's
    order, which varies from run to run in its last bits (with counts near 2**62)."""
    avg = "avg_tokens_per_task"
    return [{**r, avg: None if r[avg] is None else float(f"{r[avg]:.12g}")} for r in table.to_dicts()]


@SETTINGS
@given(
    st.lists(good_row, min_size=1, max_size=30),
    st.lists(st.tuples(st.integers(0, 29), one_field), max_size=3),  # a field of a valid line overwritten
    st.lists(any_row, max_size=2),  # and whole lines of anything
)
def test_the_grouped_check_passes_exactly_the_lines_the_per_row_rules_pass(
    tmp_path: Path, rows: list[dict], edits: list[tuple[int, dict]], lines: list[dict]
) -> None:
    for at, edit in edits:
        rows[at % len(rows)] |= edit
    rows += lines
    log = _write(tmp_path / "calls.jsonl", rows)
    groups = bounded(
        lambda: record_groups_checked([log], fields_schema(TOKENS_FIELDS)), time_s=2, memory_mb=50
    )
    per_row = _per_row_verdict(log)
    if any(r.get("winner") is not None for r in rows):
        # A winner's spelling is left to the line-by-line path: stricter than the rules, never laxer.
        assert per_row or groups is None
    else:
        assert (groups is not None) == per_row


hostile_id = st.one_of(
    st.sampled_from(["", "   ", "\t", "a\x00b", "x\x1f", "\x7f", "é\x1b[31m"]),
    # whitespace only (Unicode spaces too), or holding a control character
    st.text(
        alphabet=st.sampled_from([" ", "\t", "\n", "\u00a0", "\u3000", "\x00", "\x1b", "\x7f"]),
        min_size=1,
        max_size=8,
    ),
    st.builds(lambda n: " " * n + "\x01", st.integers(0, 50_000)),  # huge, bad only at its end
)


BAD_EDITS = st.lists(
    st.tuples(st.integers(0, 299), st.sampled_from(["task_id", "strategy", "arm"]), hostile_id),
    min_size=1,
    max_size=5,
)
ODD_IDS = st.lists(
    st.tuples(st.integers(0, 299), st.text(st.characters(exclude_categories=["Cc", "Cs"]), max_size=20)),
    max_size=5,
)


@SETTINGS
@given(BAD_EDITS, ODD_IDS)
def test_hostile_ids_stop_tokens_with_the_line_by_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: list, valid: list
) -> None:
    rows = [{**GOOD, "task_id": f"t-{i % 40}", "replicate": i % 3} for i in range(300)]
    for line, text in valid:  # odd but valid ids (unicode, any text with a non-space): never an error alone
        rows[line]["task_id"] = "id:" + text
    for line, field, value in bad:
        rows[line][field] = value
    log = _write(tmp_path / "calls.jsonl", rows)
    with pytest.raises(InputError) as per_row:
        read_records([log], resolve_families=False)  # the per-row path names the first bad line
    capsys.readouterr()
    with pytest.raises(SystemExit) as ex:
        bounded(lambda: main(["tokens", log, "--csv", str(tmp_path / "t.csv")]), time_s=10, memory_mb=200)
    assert ex.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    first = min(line for line, _, _ in bad)
    assert (per_row.value.file, per_row.value.line) == (log, first + 1)
    assert f"{log}:{first + 1}: field '{per_row.value.field}'" in err
    assert not (tmp_path / "t.csv").exists()  # nothing half-written
