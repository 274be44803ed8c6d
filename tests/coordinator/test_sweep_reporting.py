"""What the sweep and `ept status` say about failures: jobs a new session is retrying are not "failed",
deterministic failures are not suggested for `ept retry`, strategy losses are counted apart, and failed
connection attempts are not calls."""

from __future__ import annotations

import io
import time
from datetime import UTC, datetime

from rich.console import Console

from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.records import CallRecord, JobResult, Outcome
from elo_per_token.coordinator.status import failed_jobs, run_status
from elo_per_token.coordinator.sweep import print_summary
from elo_per_token.coordinator.sweep_tally import SweepOutcome, Tally
from elo_per_token.ledger import open_ledger

TASK = {
    "task_id": "math-001",
    "family": "math",
    "prompt": "1+1",
    "reference": "2",
    "grader": {"type": "numeric"},
}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_status_counts_failures_from_before_the_latest_session_as_retrying(tmp_path):
    led = open_ledger(tmp_path / "ledger")
    jobs = [Job("st", {**TASK, "task_id": f"math-{i:03d}"}, "greedy", 1) for i in range(3)]
    t0 = time.time() - 100
    led.put_failure("st", jobs[0].key, {"job": jobs[0].to_dict(), "class": "unreachable", "message": "refused",
                                        "at": t0})  # fmt: skip
    led.put_manifest("st", {"n_jobs": 3, "sessions": [{"started_at": _iso(t0 - 10)}]})
    st = run_status(led, "st")
    assert st.failed == {"unreachable": 1} and st.retrying == 0  # one session: the failure is current
    # A second session started after that failure: it queued the job again.
    led.put_manifest(
        "st", {"n_jobs": 3, "sessions": [{"started_at": _iso(t0 - 10)}, {"started_at": _iso(t0 + 50)}]}
    )
    st = run_status(led, "st")
    assert st.failed == {} and st.retrying == 1 and st.pending == 3
    assert [j.key for j in failed_jobs(st)] == [jobs[0].key]  # `ept retry` still finds it
    # It failed again in that session: failed once more.
    led.put_failure("st", jobs[0].key, {"job": jobs[0].to_dict(), "class": "unreachable", "message": "refused",
                                        "at": t0 + 60})  # fmt: skip
    st = run_status(led, "st")
    assert st.failed == {"unreachable": 1} and st.retrying == 0


def _summary(tally: Tally) -> str:
    buf = io.StringIO()
    out = SweepOutcome(run_id="r", ledger_url="L", run_url="L/runs/r", n_jobs=tally.total, already_done=0,
                       tally=tally, elapsed_s=1.0, completed=True)  # fmt: skip
    print_summary(out, Console(file=buf, width=300, color_system=None))
    return buf.getvalue()


def test_summary_suggests_retry_only_for_failures_a_retry_can_fix_and_counts_losses_apart():
    t = Tally(total=4)
    t.add({"key": "a", "status": "done", "calls": 2, "tokens": 10, "lost": "context_overflow"})
    t.add({"key": "b", "status": "failed", "class": "permanent", "message": "400 rejected", "calls": 1})
    text = _summary(t)
    assert "1 job(s) failed for a reason of the strategy on the task (context_overflow 1)" in text
    assert (
        "ept retry" not in text.split("permanent failures repeat")[0].split("failed jobs by error class")[-1]
    )
    assert "permanent failures repeat" in text
    t.add({"key": "c", "status": "failed", "class": "rate_limit", "message": "429", "calls": 1})
    text = _summary(t)
    assert "ept retry r --ledger L (rate_limit)" in text


def test_failed_connects_are_attempts_not_calls():
    ok = CallRecord(
        call_index=0,
        role="sample",
        model="m",
        usage={"prompt_tokens": 3, "completion_tokens": 4},
        latency_s=0.1,
        attempts=1,
    )
    refused = CallRecord(
        call_index=1,
        role="sample",
        model=None,
        usage=None,
        latency_s=0.0,
        attempts=4,
        error={"class": "unreachable", "message": "refused"},
    )
    rejected = CallRecord(
        call_index=2,
        role="sample",
        model=None,
        usage=None,
        latency_s=0.0,
        attempts=1,
        error={"class": "permanent", "message": "400"},
    )
    res = JobResult(Job("r", TASK, "majority", 3), [ok, refused, rejected], Outcome(None, None, None))
    assert res.sent_calls == 2 and res.tokens == 7


def test_the_summary_reports_429s_pauses_and_retries_measured_by_the_client(sim):
    """Real HTTP: two 429s (Retry-After 0.3 s) and a 500 before the answer. The client counts them and the
    sweep's summary line says so; a run without any says nothing."""
    from fixtures_sim import SIM_KEY

    from elo_per_token.coordinator.sweep import weather_line
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.worker.ratelimit import Limits, make_rate_limiter

    sim.control.set(retry_after=0.3, script=["429", "429", "500", "ok"])
    lim = make_rate_limiter("sim", Limits())
    client = ProviderClient(sim.profile(), api_key=SIM_KEY, rate_limiter=lim, backoff_base=0.01)
    t0 = time.monotonic()
    assert client.chat([{"role": "user", "content": "1+1"}]).attempts == 4
    assert time.monotonic() - t0 >= 0.55  # both Retry-After pauses were waited out
    w = client.weather()
    assert w["rate_limited"] == 2 and w["retries"] == {"rate_limit": 2, "transient": 1}
    assert w["limiter_wait_s"] >= 0.5
    out = SweepOutcome("r", "l", "u", 1, 0, Tally(total=1, done=1, weather=w), 1.0, True)
    buf = io.StringIO()
    print_summary(out, Console(file=buf, width=200))
    assert "2 answered 429" in buf.getvalue() and "3 retries (rate_limit 2, transient 1" in buf.getvalue()
    assert weather_line(ProviderClient(sim.profile(), api_key=SIM_KEY).weather()) is None
