"""Every billed call is recorded, whatever happens to its job (issue 23 item 11, issue 26 item 2).

A job object holds the calls of the attempt that succeeded; every other attempt's calls (failed and retried,
failed and resumed, a duplicate copy) are in write-once spent objects (contracts.spent). The tests count the
requests the simulator answered and compare them with the calls the ledger holds, both kinds together.
"""

from __future__ import annotations

import json
import resource
import time

import pytest
from bounds import bounded
from fixtures_faults import FAULT_KEY, fault_rig
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.spent import SPENT_DIR, parse_spent, spent_bytes, spent_usage_totals


def ledger_calls(led, run_id: str) -> tuple[int, dict[str, int]]:
    """(requests the ledger's call records account for, tokens of spent calls by arm)."""
    requests = 0
    for k in led.list_jobs(run_id):
        for raw in led.get_job(run_id, k).decode().splitlines():
            x = json.loads(raw)
            if x["kind"] == "call":
                requests += int(x.get("attempts") or 1)
    spent_lines = []
    for name in led.list_blobs(run_id, SPENT_DIR):
        spent_lines += parse_spent(led.get_blob(run_id, name), name)
    requests += sum(int(x.get("attempts") or 1) for x in spent_lines)
    return requests, {a: t["tokens"] for a, t in spent_usage_totals(spent_lines).items()}


@pytest.mark.services
@pytest.mark.slow
def test_failed_attempts_are_recorded_across_retries_and_resume(tmp_path, make_sim, monkeypatch):
    """5xx mid-job with no client retries: the worker's own retries and a resumed sweep re-run jobs; every
    request the simulator answered is a call in the ledger, and the report adds the failed attempts' tokens."""
    from elo_per_token.analysis.pipeline import AnalysisOptions, analyze
    from elo_per_token.coordinator.sweep import execute
    from elo_per_token.egress.profiles import get_profile

    sim = make_sim(api_key=FAULT_KEY, seed=5, rate_500=0.3)
    rig = fault_rig(tmp_path, sim.url, name="spent", ledger=str(tmp_path / "ledger"), executor="local",
                    per_family=4, max_retries=0, patience=0)  # no client retries, not even an outage's  # fmt: skip
    rig.use_in_process(monkeypatch)
    monkeypatch.setenv("EPT_STOP_GRACE_S", "5")
    prof = get_profile("fault-sim")
    first = execute(rig.plan, rig.jobs, profile=prof, analyze=False)
    led = rig.open_ledger()
    assert led.list_blobs("spent", SPENT_DIR), "no failed attempt at a 30% 5xx rate: the test proves nothing"
    # Resume with a healthy server: the jobs that failed run again; their first attempts stay recorded.
    sim.control.set(rate_500=0.0)
    second = execute(rig.plan, rig.jobs, profile=prof, analyze=False)
    assert second.ok, (dict(second.tally.failures), second.tally.messages)
    stats = sim.control.stats()
    recorded, spent_tokens = ledger_calls(led, "spent")
    assert stats["completion_requests"] == recorded, (
        stats["completion_requests"],
        recorded,
        first.tally.failed,
    )
    # The sweeps' own tallies count every attempt's calls too, and say how many went to failed attempts.
    assert first.tally.calls + second.tally.calls == recorded
    spent_calls = sum(
        len(parse_spent(led.get_blob("spent", n), n)) for n in led.list_blobs("spent", SPENT_DIR)
    )
    assert first.tally.spent_calls + second.tally.spent_calls == spent_calls > 0
    assert sum(spent_tokens.values()) > 0
    # The report's totals: the failed attempts' tokens by arm, exactly those of the spent objects.
    res = analyze([led.run_url("spent")], AnalysisOptions(rounds=0, prices="in=1,out=2"))
    rows = {r["arm"]: r for r in res.spent_on_failed_attempts}
    assert {a: r["failed_attempt_tokens"] for a, r in rows.items()} == spent_tokens
    assert all(r["failed_attempt_usd"] > 0 for r in rows.values() if r["failed_attempt_tokens"])
    assert "Spent on failed attempts" in __import__(
        "elo_per_token.analysis.report_markdown", fromlist=["markdown"]
    ).markdown(res)


def _call(arm: str, usage: object) -> dict:
    return {
        "kind": "call",
        "job_key": "f/t/a/r0",
        "arm": arm,
        "role": "solve",
        "usage": usage,
        "call_index": 0,
    }


usage_values = st.one_of(st.none(), st.integers(-10**30, 10**30), st.floats(allow_nan=True), st.text(max_size=5),
                         st.booleans())  # fmt: skip


usage_dicts = st.dictionaries(
    st.sampled_from(["prompt_tokens", "completion_tokens", "x"]), usage_values, max_size=3
)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    arms=st.lists(st.text(max_size=30), min_size=0, max_size=20),
    usages=st.lists(usage_dicts | st.none() | st.integers(), max_size=20),
)
def test_spent_objects_round_trip_hostile_usage_in_bounded_time(arms, usages):
    """Provider usage of any shape (NaN, huge, negative, strings): the object is valid JSON; it reads back with
    finite non-negative integer totals, or, when a count is past any real bill (contracts.spent.
    implausible_usage), it is refused naming the line and field; fast and small."""
    from elo_per_token.contracts.spent import implausible_usage

    lines = [_call(a, u) for a, u in zip(arms, usages, strict=False)]
    t0, rss0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    data = spent_bytes(lines, reason="failed", error_class="transient", attempt=1, at=1.0)
    if any(implausible_usage(x["usage"]) for x in lines):
        with pytest.raises(ValueError, match=r"spent object:\d+: field 'usage': \w+_tokens absurd"):
            parse_spent(data)
        return
    back = parse_spent(data)
    totals = spent_usage_totals(back)
    assert len(back) == len(lines)
    assert all(isinstance(v, int) and v >= 0 for t in totals.values() for v in t.values())
    assert sum(t["calls"] + t["unsent"] for t in totals.values()) == len(lines)
    assert time.perf_counter() - t0 < 2.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 200_000  # KiB


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.binary(max_size=2000))
def test_a_malformed_spent_object_is_refused_by_name_never_misread(data):
    try:
        out = parse_spent(data, "runs/r/spent/x.jsonl")
    except ValueError as e:
        assert "runs/r/spent/x.jsonl" in str(e)
    else:
        assert all(x["kind"] == "call" for x in out)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.none() | st.text(max_size=20) | st.integers() | st.dictionaries(
    st.sampled_from(["class", "message"]), st.none() | st.text(max_size=20) | st.sampled_from(["unreachable"]),
), max_size=50))  # fmt: skip
def test_any_error_field_splits_calls_into_sent_and_unsent_in_bounded_time(errors):
    lines = [{**_call("a", {"prompt_tokens": 1}), "error": e} for e in errors]
    totals = bounded(lambda: spent_usage_totals(parse_spent(spent_bytes(
        lines, reason="failed", error_class="unreachable", attempt=1, at=1.0))), 2.0, 32)  # fmt: skip
    unsent = sum(1 for e in errors if isinstance(e, dict) and e.get("class") == "unreachable")
    got = totals.get("a", {"calls": 0, "unsent": 0})
    assert (got["calls"], got["unsent"]) == (len(errors) - unsent, unsent)


def test_the_spent_table_counts_answered_calls_apart_from_refused_connects(make_sim):
    """Real calls: a job whose provider refuses every connect (a closed port) and a job answered with 500s.
    Only the answered one's call is a call in the spent table; the refused one is an attempt not sent."""
    import socket

    from elo_per_token.analysis.report_rows import spent_table_rows
    from elo_per_token.analysis.spent import spent_rows
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.suites.load import load_builtin_suite
    from elo_per_token.worker.job import run_job

    with socket.socket() as s:  # a port nobody listens on: every connect is refused
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    sim = make_sim(api_key=FAULT_KEY, rate_500=1.0)
    task = load_builtin_suite("math")[0]
    lines = []
    for url in (f"http://127.0.0.1:{dead}/v1", sim.url):
        prof = sim.profile(base_url=url, max_retries=1)
        client = ProviderClient(prof, api_key=FAULT_KEY, backoff_base=0.01)
        result = run_job(Job("r", task, "greedy", 1, seed=1), client)
        assert result.outcome.error is not None
        lines += parse_spent(spent_bytes(result.to_lines(), reason="failed", error_class=result.outcome.error["class"],
                                         attempt=1, at=1.0))  # fmt: skip
    (row,) = spent_rows(lines)
    assert (row["failed_attempt_calls"], row["failed_attempt_unsent"]) == (1, 1)
    assert sim.control.stats()["by_status"] == {"500": 2}  # the one call the provider answered (twice)

    from types import SimpleNamespace

    header, rows = spent_table_rows(SimpleNamespace(spent_on_failed_attempts=[row]))  # type: ignore[arg-type]
    assert header[:3] == ["arm", "calls", "not sent (unreachable)"] and rows[0][1:3] == ["1", "1"]
