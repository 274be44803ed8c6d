"""A batch message (`ept.run_jobs`, worker.celery_batch) is read from a broker anyone with its password can
write to: whatever its job list holds, each element gets exactly one summary under a bounded key, a message that
is not a list of 1..64 jobs is refused whole, and nothing is run for a job the worker does not trust."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from bounds import bounded
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.jobs import MAX_JOBS_PER_MESSAGE as MAX_JOBS
from elo_per_token.contracts.jobs import Job
from elo_per_token.worker.celery_batch import celery_run_jobs
from elo_per_token.worker.celery_job import JobSettings

# What celery_run_jobs reads of its bound task: the request's id and the app's broker URL (not Redis here: no
# claims, no broker reads; with no allow-lists every well-formed job is refused before anything runs).
_TASK = SimpleNamespace(request=SimpleNamespace(id="t-1", delivery_info={}), app=SimpleNamespace(conf={}))
_CTX = {"ledger": "/nowhere/ledger", "base_url": None, "rpm": None, "tpm": None}
_WORKER = (None, JobSettings())

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=40,
)
_JOB = Job(run_id="r", task={"task_id": "math-1", "family": "math"}, strategy="greedy", budget_n=1).to_dict()


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(
        _JSON | st.just(_JOB) | st.just({**_JOB, "key": "k" * 10_000}), min_size=1, max_size=MAX_JOBS
    )
)
def test_every_element_gets_one_bounded_summary_and_nothing_runs(items):
    out = bounded(lambda: celery_run_jobs(_TASK, items, _CTX, _WORKER, budget_s=60.0), 5.0, 50)
    assert out["deferred"] == 0 and len(out["summaries"]) == len(items)
    for s in out["summaries"]:
        assert s["status"] == "failed" and s["calls"] == 0 and s["tokens"] == 0
        assert isinstance(s["key"], str) and (len(s["key"]) <= 200 or s["key"] == Job.from_dict(_JOB).key)
        assert isinstance(s["message"], str) and len(s["message"]) <= 2000


@pytest.mark.parametrize("jobs", [[], [_JOB] * (MAX_JOBS + 1), {"0": _JOB}, "jobs", None, 3])
def test_a_message_that_is_not_a_list_of_jobs_is_refused_whole(jobs):
    with pytest.raises(ValueError, match=r"ept\.run_jobs message carries a list"):
        celery_run_jobs(_TASK, jobs, _CTX, _WORKER, budget_s=60.0)


def test_a_batch_past_its_time_budget_starts_no_further_job():
    out = celery_run_jobs(_TASK, [_JOB, _JOB, _JOB], _CTX, _WORKER, budget_s=-1.0)
    assert len(out["summaries"]) == 1 and out["deferred"] == 2  # the first job always runs
