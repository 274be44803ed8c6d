"""Per-job transcripts (worker.transcript, contracts.transcripts): a HumanEval job's transcript shows the
candidate code, the failed assert and the sandbox's output; stored beside the job object (which stays as it
was), bounded, scrubbed, compressed, and switchable off; hostile input stays within time and memory bounds."""

from __future__ import annotations

import gzip
import json
import os
import time
import tracemalloc
from pathlib import Path

import pytest
from fixtures_sim import SIM_KEY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.contracts import transcripts as tr
from elo_per_token.contracts.jobs import Job
from elo_per_token.egress.client import ProviderClient
from elo_per_token.ledger import FileLedger
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.lifecycle import perform_job

HE = load_builtin_suite("humaneval")


def _client(sim) -> ProviderClient:
    return ProviderClient(sim.profile(supports_n=False), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)


def test_humaneval_transcript_shows_code_failed_assert_and_sandbox_output(sim, tmp_path: Path) -> None:
    """Greedy HumanEval jobs until one fails its hidden check: its transcript has the prompt, the candidate
    code, the failed assert and the sandbox's output; the job object is the same as without transcripts."""
    from elo_per_token.viewer.job_page import job_page

    led = FileLedger(tmp_path / "ledger")
    client = _client(sim)
    for task in HE[:60]:
        job = Job("he", task, "greedy", 1, seed=3)
        s = perform_job(job, led, client, transcripts=True)
        assert s["status"] == "done"
        lines = [json.loads(x) for x in led.get_job("he", job.key).decode().splitlines()]
        outcome = lines[-1]
        assert (
            "sandbox_output" not in outcome["grader"]
        )  # transcript-only evidence stays out of the job object
        if outcome["score"] < 1.0 and outcome["grader"].get("failures"):
            break
    else:
        pytest.fail("no failing HumanEval job among the first 60 tasks")
    t = tr.read_transcript(led, "he", job.key)
    assert t is not None and t["schema"] == 1
    call = t["calls"][0]
    assert task["entry_point"] in call["messages"][-1]["content"]  # the prompt
    assert f"def {task['entry_point']}" in str(call["completion"])  # the candidate code
    ev = t["grader"]["evidence"]
    assert ev["failures"][0]["error"] and "sandbox_output" in ev
    assert t["grader"]["verdict"]["score"] == outcome["score"]
    page = job_page("he", job.key, lines, t)
    assert "failed assert" in page and "sandbox output" in page and f"def {task['entry_point']}" in page


def test_sandbox_output_is_kept_for_the_transcript() -> None:
    from elo_per_token.worker.graders.code import grade_code
    from elo_per_token.worker.transcript import Recorder, take_evidence

    task = HE[0]
    code = (
        f"import os\ndef {task['entry_point']}(*a, **k):\n    os.write(1, b'hello from the candidate\\n')\n"
        "    return None\n"
    )
    g = grade_code(code, task)
    assert not g.correct and "hello from the candidate" in g.details["sandbox_output"]

    from types import SimpleNamespace

    outcome = SimpleNamespace(grader=dict(g.details), score=g.score, correct=g.correct, error=None, failure=None,
                              answer=code)  # fmt: skip
    rec = Recorder()
    take_evidence(outcome, rec)
    assert "sandbox_output" not in outcome.grader
    assert "hello from the candidate" in rec.document("k", outcome)["grader"]["evidence"]["sandbox_output"]


def test_transcripts_off_writes_nothing_beside_the_job(sim, tmp_path: Path) -> None:
    led = FileLedger(tmp_path / "ledger")
    job = Job("off", HE[1], "greedy", 1, seed=3)
    assert perform_job(job, led, _client(sim), transcripts=False)["status"] == "done"
    assert tr.read_transcript(led, "off", job.key) is None
    assert not (tmp_path / "ledger" / "runs" / "off" / tr.TRANSCRIPTS_DIR).exists()


def test_plan_switch(tmp_path: Path) -> None:
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.plan import plan_from_raw

    base = {
        "name": "p",
        "profile": "simulator",
        "suites": ["math"],
        "arms": [{"strategy": "greedy", "budgets": [1]}],
    }
    assert plan_from_raw(base, "p.toml").transcripts is True
    assert plan_from_raw({**base, "transcripts": False}, "p.toml").transcripts is False
    with pytest.raises(InputError) as e:
        plan_from_raw({**base, "transcripts": "no"}, "p.toml")
    assert "transcripts" in str(e.value)


CANARY = "sk-canary-0123456789abcdefWXYZ"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.text(max_size=300), st.integers(0, 40_000), st.booleans()), min_size=0, max_size=8),
    st.text(max_size=200),
)
def test_hostile_calls_are_bounded_and_scrubbed(calls: list, evidence: str) -> None:
    """The process's key (here in a *_API_KEY variable, as a profile reads it) never appears, whatever text
    surrounds it; every call's text stays within its bound; quick and small."""
    doc = {"job_key": "f/t/a/r0", "calls": [
        {"call_index": i, "role": "sample",
         "messages": [{"role": "user", "content": text + (CANARY if leak else "")}],
         "completion": "x" * size + (f"Bearer {CANARY}" if leak else ""), "tool_calls": [{"arguments": text}]}
        for i, (text, size, leak) in enumerate(calls)],
        "grader": {"evidence": {"out": evidence * 50 + CANARY}}}  # fmt: skip
    os.environ["EPT_TEST_CANARY_API_KEY"] = CANARY
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        data = tr.encode(doc)
        back = tr.decode(data)
    finally:
        del os.environ["EPT_TEST_CANARY_API_KEY"]
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 5 and peak < 60e6
    raw = json.dumps(back, ensure_ascii=False)
    assert CANARY not in raw and "sk-…WXYZ" in raw  # masked, never in full
    mark = "[truncated by ept"
    for c in back["calls"]:
        text = sum(len(s) for s in _strings(c))
        assert text <= tr.MAX_CALL_CHARS + 400 * (
            1 + len(c["messages"]) + 4
        )  # the cap, plus marks and minimums
    big = any(size > tr.MAX_FIELD_CHARS for _, size, _ in calls)
    assert not big or (back["truncated"] and mark in raw)


def test_key_shaped_tokens_are_masked_without_knowing_the_key() -> None:
    other = "sk-proj-AbCdEf0123456789xyzQ"
    out = tr.scrub_text(f"key {other} and 0{other} and task-math-change-004 and ghp_{'a' * 30}")
    assert other not in out and out.count("…") == 3
    assert "task-math-change-004" in out


def _strings(x) -> list[str]:
    if isinstance(x, str):
        return [x]
    if isinstance(x, dict):
        return [s for v in x.values() for s in _strings(v)]
    if isinstance(x, list):
        return [s for v in x for s in _strings(v)]
    return []


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=5000))
def test_damaged_blobs_are_reported_not_raised(data: bytes) -> None:
    class Led:
        def get_blob(self, run_id: str, name: str) -> bytes:
            return data

    t0 = time.perf_counter()
    doc = tr.read_transcript(Led(), "r", "k")
    assert time.perf_counter() - t0 < 2
    assert doc is not None and ("error" in doc or isinstance(doc.get("calls"), list))


def test_gzip_bomb_stops_at_its_bound() -> None:
    bomb = gzip.compress(b"[" + b" " * (tr.MAX_BLOB_BYTES * 25) + b"]", compresslevel=9)
    assert len(bomb) < tr.MAX_BLOB_BYTES
    tracemalloc.start()
    with pytest.raises(ValueError):
        tr.decode(bomb)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < tr.MAX_BLOB_BYTES * 20 * 3
