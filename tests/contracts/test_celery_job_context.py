"""The Celery job context (contracts.jobs.CeleryJobContext): one named type on both sides, the same JSON on the wire.

The coordinator sends `CeleryJobContext.to_dict()` as the task's second argument and the worker reads it back with
`CeleryJobContext.from_dict`; the messages must stay the plain dicts they were before the type existed.
"""

from __future__ import annotations

import json

import pytest

from elo_per_token.contracts.jobs import CeleryJobContext


def test_an_ordinary_job_sends_the_four_keys_it_always_did():
    ctx = CeleryJobContext(ledger="s3://b/l", base_url="http://127.0.0.1:9/v1", rpm=600, tpm=None)
    wire = ctx.to_dict()
    assert wire == {"ledger": "s3://b/l", "base_url": "http://127.0.0.1:9/v1", "rpm": 600, "tpm": None}
    assert list(wire) == ["ledger", "base_url", "rpm", "tpm"]  # the same JSON text, key for key
    assert json.loads(json.dumps(wire)) == wire


def test_clear_failure_and_max_attempts_appear_only_when_set():
    wire = CeleryJobContext(ledger="l", clear_failure=True).to_dict()
    assert wire == {"ledger": "l", "base_url": None, "rpm": None, "tpm": None, "clear_failure": True}
    assert CeleryJobContext(ledger="l", max_attempts=5).to_dict()["max_attempts"] == 5
    assert "max_attempts" not in CeleryJobContext(ledger="l").to_dict()


@pytest.mark.parametrize(
    "ctx",
    [
        CeleryJobContext(ledger="./x"),
        CeleryJobContext(
            ledger="s3://b/p", base_url="http://h/v1", rpm=1, tpm=2, clear_failure=True, max_attempts=7
        ),
    ],
)
def test_the_worker_reads_back_what_the_coordinator_sent(ctx):
    assert CeleryJobContext.from_dict(json.loads(json.dumps(ctx.to_dict()))) == ctx


def test_the_worker_reads_a_minimal_message_as_before():
    """Absent optional keys take the worker's old defaults; unknown keys are ignored; no ledger is an error."""
    ctx = CeleryJobContext.from_dict({"ledger": "l", "extra": 1})
    assert ctx == CeleryJobContext(
        ledger="l", base_url=None, rpm=None, tpm=None, clear_failure=False, max_attempts=3
    )
    with pytest.raises(KeyError):
        CeleryJobContext.from_dict({"base_url": None})


def test_the_context_is_immutable():
    ctx = CeleryJobContext(ledger="l")
    with pytest.raises(AttributeError):
        ctx.ledger = "other"  # type: ignore[misc]
