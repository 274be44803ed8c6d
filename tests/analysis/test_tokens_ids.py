"""`ept tokens` checks ids on their distinct values (issue 39), with the verdict of the per-row rules: the same
lines pass, a bad id still stops the command naming its file, line and field, and nothing is written."""

from __future__ import annotations

import json
import random
from pathlib import Path

import polars as pl
import pytest
from bounds import bounded
from cli_runner import run_ept
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.analysis.io import TOKENS_FIELDS, fields_schema, record_groups_checked
from elo_per_token.analysis.io.scan import _scan
from elo_per_token.analysis.io.schema import _normalise

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
ID_FIELDS = ("task_id", "strategy", "arm")  # the id fields `ept tokens` parses (family is not among them)

# Values that look like ids but break a rule, and ones that only look suspicious on the fast path.
hostile = st.one_of(
    st.sampled_from(
        ["", " ", "\t", "a\x00b", "x\x1f", "\x7f", "5", "-1e3", "true", "null", "{a", "[1", "é ü"]
    ),
    st.text(max_size=12),
)


def _rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    arms = [("greedy", 1), ("best_of_n", 4), ("majority", 8)]
    out = []
    for _ in range(n):
        s, b = rng.choice(arms)
        out.append({"task_id": f"t-{rng.randrange(30)}", "strategy": s, "budget_n": b, "replicate": rng.randrange(3),
                    "usage": {"prompt_tokens": rng.randrange(1, 900), "completion_tokens": rng.randrange(50)}})  # fmt: skip
    return out


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@SETTINGS
@given(
    st.lists(st.tuples(st.integers(0, 199), st.sampled_from(ID_FIELDS), hostile), max_size=4),
    st.integers(0, 10_000),
)
def test_distinct_value_check_agrees_with_the_per_row_rules(tmp_path: Path, edits: list, seed: int) -> None:
    rows = _rows(200, seed)
    for line, field, value in edits:
        rows[line][field] = value
    log = str(_write(tmp_path / "calls.jsonl", rows))
    scan = _scan([log], fields_schema(TOKENS_FIELDS))

    def fast() -> bool:  # what `ept tokens` checks in its one pass
        return record_groups_checked([log], fields_schema(TOKENS_FIELDS)) is not None

    passes = bounded(fast, time_s=2, memory_mb=50)
    per_row = _normalise(scan, categorical=False).select(pl.col("bad_field").is_null().all()).collect().item()
    assert passes == per_row


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
@SETTINGS
@given(
    st.integers(0, 399), st.sampled_from(ID_FIELDS), st.sampled_from(["", "  ", "a\x00", "\x1b[31m", "\x7f"])
)
def test_a_bad_id_stops_tokens_naming_file_line_and_field(
    tmp_path: Path, at: int, field: str, value: str
) -> None:
    rows = _rows(400, at)
    rows[at][field] = value
    log = _write(tmp_path / "calls.jsonl", rows)
    out = tmp_path / "t.csv"
    r = bounded(lambda: run_ept("tokens", str(log), "--csv", str(out), columns=400), time_s=10, memory_mb=200)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{log}:{at + 1}: field '{field}'" in r.stderr.replace("\n", "")
    assert not out.exists()  # nothing half-written


def test_ids_that_only_look_like_numbers_are_read_like_any_other(tmp_path: Path) -> None:
    # "5" as a JSON string is an id; the distinct-value check sends the file to the line-by-line path, which
    # sees the JSON type and accepts it: the table is the one read_records gives.
    rows = _rows(300, 1)
    for r in rows[::7]:
        r["task_id"] = "5"
    log = _write(tmp_path / "calls.jsonl", rows)
    r = run_ept("tokens", str(log), "--json", str(tmp_path / "t.json"))
    assert r.returncode == 0, r.stderr
    from elo_per_token.analysis.io import read_records
    from elo_per_token.analysis.tokens import arm_tokens

    assert (
        json.loads((tmp_path / "t.json").read_text())["arms"]
        == arm_tokens(read_records([str(log)]).calls).to_dicts()
    )
    rows[10]["task_id"] = 5  # a JSON number: named
    _write(log, rows)
    r = run_ept("tokens", str(log), columns=400)
    assert r.returncode == 2 and f"{log}:11: field 'task_id': must be a string" in r.stderr.replace("\n", "")


def test_an_id_the_summary_does_not_keep_is_checked_on_every_row(tmp_path: Path) -> None:
    import pytest

    from elo_per_token.analysis.io import read_summary
    from elo_per_token.analysis.tokens import record_groups
    from elo_per_token.contracts.errors import InputError

    rows = _rows(50, 2)
    rows[17]["family"] = " \x01"  # parsed when every field is (fields=None), not a key of record_groups
    log = _write(tmp_path / "calls.jsonl", rows)
    with pytest.raises(InputError) as ex:
        read_summary([str(log)], record_groups)
    assert (ex.value.file, ex.value.line, ex.value.field) == (str(log), 18, "family")
