"""Ledger records (contracts.records): the identity every line carries, keyword-only call records, round trips."""

from __future__ import annotations

import json

import pytest

from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.records import LINE_IDENTITY_KEYS, CallRecord, JobResult, Outcome


def _result() -> JobResult:
    job = Job(run_id="r1", task={"task_id": "t1", "family": "fam"}, strategy="best_of_n", budget_n=2)
    calls = [
        CallRecord(call_index=0, role="sample", model="m", usage={"prompt_tokens": 50, "completion_tokens": 5},
                   latency_s=0.1, attempts=1, seed=7, n_requested=2, n_returned=2, finish_reason="stop",
                   gen={"temperature": 0.7}, finish_reasons=["stop", "length"]),
        CallRecord(call_index=1, role="verifier", model=None, usage=None, latency_s=0.0, attempts=3,
                   error={"class": "transient", "message": "500"}, usage_missing=True),
    ]  # fmt: skip
    outcome = Outcome(answer="4", score=1.0, correct=True, grader={"grader": "exact"})
    return JobResult(job, calls, outcome, 1.0, 2.0, judgments=[{"winner": "a", "loser": "b"}])


def test_every_line_carries_exactly_the_identity_keys() -> None:
    res = _result()
    assert set(res.identity()) | {"kind"} == LINE_IDENTITY_KEYS
    lines = res.to_lines()
    assert [ln["kind"] for ln in lines] == ["call", "call", "outcome", "judgment"]
    for ln in lines:
        assert LINE_IDENTITY_KEYS.issubset(ln)
    # A judgment line read back holds only its own fields, not the identity it was written with.
    assert JobResult.from_lines(lines, res.job).judgments == [{"winner": "a", "loser": "b"}]


def test_call_records_are_keyword_only_and_round_trip() -> None:
    with pytest.raises(TypeError):
        CallRecord(0, "sample", "m", None, 0.0, 1)  # type: ignore[misc]
    res = _result()
    back = JobResult.from_lines([json.loads(x) for x in res.to_jsonl().decode().splitlines()], res.job)
    assert back.calls == res.calls and back.outcome == res.outcome
    assert back.to_jsonl() == res.to_jsonl()
    # `gen` is left out when empty (Parquet cannot store a struct without fields), kept otherwise.
    assert "gen" in res.calls[0].to_dict() and "gen" not in res.calls[1].to_dict()
