"""A run has a lease (issue 36 item 8): two sweeps growing the same run paid for every job twice (24 requests
for 12 jobs). Now the second session is refused naming the holder, a dead holder's lease is taken over after
its TTL, `ept retry` takes the lease too, and whatever a lease object holds is decided fast.

The sweeps are real `ept sweep` processes (local executor) against the simulator over HTTP."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from bounds import bounded
from fixtures_faults import FAULT_KEY, REPO, fault_rig, sweep_proc, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.errors import InputError
from elo_per_token.coordinator.runlease import LEASE_DIR, RunLease, _name
from elo_per_token.ledger import FileLedger


def test_a_held_lease_refuses_a_second_session_naming_the_holder(tmp_path):
    led = FileLedger(tmp_path / "ledger")
    led.put_manifest("r", {"run_id": "r"})
    first = RunLease(led, "r", ttl_s=30).acquire()
    try:
        with pytest.raises(InputError) as e:
            RunLease(led, "r", ttl_s=30).acquire()
        msg = str(e.value)
        assert (
            f"host {socket.gethostname()}, pid {os.getpid()}" in msg and "being run by another session" in msg
        )
        assert "\n" not in msg
    finally:
        first.release()
    # Released: the next session takes the next generation, and the older one is tidied away.
    with RunLease(led, "r", ttl_s=30) as second:
        assert second.gen == 2 and led.list_blobs("r", LEASE_DIR) == [_name(2)]


def test_a_session_refused_before_it_wrote_a_manifest_leaves_no_run_behind(tmp_path):
    led = FileLedger(tmp_path / "ledger")
    with RunLease(led, "new", ttl_s=30):
        assert led.list_runs() == ["new"]
    assert led.list_runs() == [] and not led.run_exists("new")


def test_a_dead_holders_lease_is_taken_over_after_its_ttl_and_the_old_holder_learns_it(tmp_path):
    led = FileLedger(tmp_path / "ledger")
    led.put_manifest("r", {"run_id": "r"})
    stale = RunLease(led, "r", ttl_s=0.6).acquire()
    stale._stop.set()  # its heartbeat stops, as a crashed or hung sweep's does
    stale._thread.join(5)
    with pytest.raises(InputError):
        RunLease(led, "r", ttl_s=0.6).acquire()  # not yet expired
    time.sleep(0.7)
    taker = RunLease(led, "r", ttl_s=0.6).acquire()
    try:
        assert taker.gen == 2
        stale._stop.clear()
        stale._start_heartbeat()  # the hung sweep wakes up: it sees the newer generation and stops
        wait_until(stale.lost.is_set, 5, "the old holder to see it lost the lease", poll=0.05)
    finally:
        stale.release()
        taker.release()


def test_of_sessions_racing_for_a_free_lease_exactly_one_wins(tmp_path):
    led = FileLedger(tmp_path / "ledger")
    led.put_manifest("r", {"run_id": "r"})
    won, refused = [], []
    go = threading.Barrier(8)

    def take() -> None:
        go.wait()
        try:
            won.append(RunLease(led, "r", ttl_s=30).acquire())
        except InputError as e:
            refused.append(str(e))

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(won) == 1 and len(refused) == 7, (won, refused)
    won[0].release()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=2000) | st.builds(lambda v: json.dumps(v).encode(), st.dictionaries(
    st.sampled_from(["holder", "heartbeat", "ttl", "released"]),
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=30) | st.integers(),
    max_size=4)))  # fmt: skip
def test_whatever_a_lease_object_holds_the_session_takes_it_or_names_a_holder(tmp_path_factory, raw):
    """A hostile or truncated lease object: taken over (it names no live holder) or refused with an InputError,
    in bounded time and memory; never a traceback."""
    led = FileLedger(tmp_path_factory.mktemp("lease"))
    led.put_manifest("r", {"run_id": "r"})
    led.create_object("r", _name(1), raw)

    def attempt() -> str:
        try:
            lease = RunLease(led, "r", ttl_s=30).acquire()
        except InputError as e:
            assert "being run by another session" in str(e) and len(str(e)) < 1000
            return "refused"
        lease.release()
        return "taken"

    assert bounded(attempt, 2.0, 20) in ("taken", "refused")


def _ept(*args: str, env: dict[str, str], cwd) -> subprocess.CompletedProcess:
    full = {**os.environ, **env, "PYTHONPATH": str(REPO), "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "elo_per_token", *args], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=300)  # fmt: skip


def test_two_concurrent_sweeps_of_one_run_pay_each_job_once(tmp_path, make_sim):
    sim = make_sim(api_key=FAULT_KEY, seed=5, latency_ms=250)
    rig = fault_rig(tmp_path, sim.url, name="leased", ledger=str(tmp_path / "ledger"), executor="local",
                    per_family=2, concurrency=2)  # fmt: skip
    lease_dir = tmp_path / "ledger" / "runs" / rig.run_id / "lease"
    first = sweep_proc(rig.plan_path, rig.env(), tmp_path / "first.log")
    try:
        wait_until(lambda: lease_dir.is_dir() and any(lease_dir.iterdir()), 60, "the first sweep's lease")
        second = _ept("sweep", str(rig.plan_path), "--no-analysis", env=rig.env(), cwd=tmp_path)
        assert first.poll() is None, "the first sweep finished before the second started: raise the latency"
        assert first.wait(240) == 0, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    out = second.stdout + second.stderr
    assert second.returncode == 2, out
    assert f"pid {first.pid}" in out and f"host {socket.gethostname()}" in out and "being run by" in out, out
    assert len([ln for ln in out.splitlines() if ln.strip()]) == 1, out
    # Every job once: the calls the simulator answered are exactly the calls recorded in the job objects.
    led = rig.open_ledger()
    assert led.list_jobs(rig.run_id) == rig.keys
    recorded = sum(
        sum(1 for ln in led.get_job(rig.run_id, k).splitlines() if json.loads(ln)["kind"] == "call")
        for k in rig.keys
    )
    assert sim.control.stats()["completion_requests"] == recorded
    assert not led.list_blobs(rig.run_id, "spent/")  # no duplicate copy was paid for

    # `ept retry` takes the lease as well: with a session holding it, retry is refused naming it.
    with RunLease(led, rig.run_id, ttl_s=60):
        again = _ept("retry", rig.run_id, "--ledger", rig.ledger, env=rig.env(), cwd=tmp_path)
    assert again.returncode == 2 and f"pid {os.getpid()}" in again.stdout + again.stderr, again.stderr


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(note=st.one_of(st.none(), st.text(max_size=400)))
def test_status_shows_a_running_session_and_its_note_as_text(tmp_path, note):
    """coordinator.runlease.running_line: a held lease's note (the progress line's outage note) reaches `ept status`
    at once (not at the next heartbeat), as text — markup and control characters escaped — and cut short; a
    released lease shows nothing."""
    from rich.console import Console

    from elo_per_token.coordinator.runlease import running_line

    led = FileLedger(tmp_path / f"l{time.monotonic_ns()}")
    with RunLease(led, "r1", ttl_s=600) as lease:
        lease.set_note(note)
        expect = note or None
        wait_until(
            lambda: json.loads(led.get_blob("r1", _name(lease.gen)) or b"{}").get("note") == expect,
            10,
            "note",
        )
        line = bounded(lambda: running_line(led, "r1"), 2.0, 10)
        assert line is not None and line.startswith("running now (host ")
        rendered = Console(width=10_000, color_system=None, file=io.StringIO()).render_str(line).plain
        assert "\x1b" not in rendered and len(rendered) < 700
        if note and note.isalnum():
            assert rendered.endswith(f": {note[:300]}")
    assert running_line(led, "r1") is None  # released
