"""Outages waited out (egress.outage), over real HTTP: a simulator stopped and restarted on the same port, or
answering 500 for a few seconds, in the middle of a local sweep — 0 failed jobs, one `execute`, the progress
line saying "provider unreachable since …, waiting (patience …)" and the summary counting the time down; with a
patience shorter than the outage, the jobs fail with their class and a message naming the patience. The
profile field `patience` is validated like the others."""

from __future__ import annotations

import io
import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from bounds import bounded
from cli_runner import run_ept
from fixtures_sim import SIM_KEY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sweep_local import _jobs, _plan, tiny_run

from elo_per_token.contracts.errors import InputError
from elo_per_token.coordinator.status import last_weather
from elo_per_token.coordinator.sweep import execute, print_summary, weather_line
from elo_per_token.egress.errors import ProviderError
from elo_per_token.egress.outage import Outage, format_patience
from elo_per_token.egress.profiles import DEFAULT_PATIENCE_S, load_profiles
from elo_per_token.simulator.control import start_in_thread

pytestmark = pytest.mark.slow


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("EPT_SIM_API_KEY", SIM_KEY)


def _console() -> tuple[Any, io.StringIO]:
    from rich.console import Console

    buf = io.StringIO()
    return Console(file=buf, force_terminal=True, width=250, color_system=None), buf


def _when_done(sim: Any, n_calls: int, then: Any) -> threading.Thread:
    """A thread that waits for the simulator to have served n_calls chat calls, then runs then()."""

    def watch() -> None:
        while sum(sim.control.stats()["by_job"].values()) < n_calls:
            time.sleep(0.05)
        then()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_a_server_stopped_mid_sweep_is_waited_out_and_the_sweep_finishes(tmp_path, make_sim, key_env):
    sim = make_sim(latency_ms=30)
    plan = _plan(tmp_path, name="outage")
    jobs = _jobs(plan, n=6)  # 36 jobs, 66 calls
    restarted: list[Any] = []

    def outage() -> None:
        sim.stop()  # connection refused from now on
        time.sleep(4)
        restarted.append(start_in_thread({"latency_ms": 30}, port=sim.port))

    watcher = _when_done(sim, 15, outage)
    console, buf = _console()
    try:
        out = execute(
            plan, jobs, profile=sim.profile(patience=60), run=tiny_run, analyze=False, console=console
        )
        watcher.join(10)
    finally:
        for s in restarted:
            s.stop()
    assert restarted, "the outage never happened"
    assert out.completed and out.tally.failed == 0, (out.tally.failures, out.tally.messages)
    assert out.tally.done == len(jobs)
    w = out.tally.weather or {}
    assert w["outages"] >= 1 and 3.5 <= w["outage_s"] < 15, w
    # The progress line said so while it lasted (rich's live refreshes, in the console's output).
    assert "provider unreachable since " in buf.getvalue() and "waiting (patience 60 s)" in buf.getvalue()
    summary, sbuf = _console()
    print_summary(out, summary)
    assert "outage(s)" in sbuf.getvalue() and "with the provider down" in sbuf.getvalue(), sbuf.getvalue()
    # `ept status RUN` shows the same weather line, recorded in the session's manifest entry.
    r = run_ept("status", plan.run_id, "--ledger", str(tmp_path / "ledger"), columns=300)
    assert r.returncode == 0, r.stderr
    shown = " ".join(r.stdout.split())
    assert "last session: provider weather:" in shown and f"{w['outages']} outage(s)" in shown, r.stdout
    assert weather_line(out.tally.weather).split(" · ")[-1][:12] in shown


def test_a_server_answering_500_for_a_while_is_waited_out(tmp_path, make_sim, key_env):
    sim = make_sim(latency_ms=30)
    plan = _plan(tmp_path, name="fivexx")
    jobs = _jobs(plan, n=6)

    def outage() -> None:
        sim.control.set(rate_500=1.0)
        time.sleep(4)
        sim.control.set(rate_500=0.0)

    watcher = _when_done(sim, 15, outage)
    # max_retries=1: without the wait, a job's calls would give up after two 500s.
    out = execute(plan, jobs, profile=sim.profile(patience=60, max_retries=1), run=tiny_run, analyze=False)
    watcher.join(10)
    assert out.completed and out.tally.failed == 0, (out.tally.failures, out.tally.messages)
    w = out.tally.weather or {}
    assert w["outages"] >= 1 and w["outage_s"] >= 3, w
    assert sim.control.stats()["by_status"].get("500", 0) >= 1


def test_an_outage_longer_than_the_patience_fails_the_jobs_naming_it(tmp_path, make_sim, key_env):
    sim = make_sim(latency_ms=30)
    plan = _plan(tmp_path, name="fivexx-long")
    jobs = _jobs(plan, n=6)
    watcher = _when_done(sim, 15, lambda: sim.control.set(rate_500=1.0))  # and never back
    t0 = time.monotonic()
    out = execute(plan, jobs, profile=sim.profile(patience=2, max_retries=1), run=tiny_run, analyze=False)
    watcher.join(10)
    assert out.tally.failed > 0 and set(out.tally.failures) == {"transient"}, out.tally.failures
    msg = out.tally.messages["transient"]
    assert "patience (2 s" in msg and "500" in msg and "down since" in msg, msg
    assert time.monotonic() - t0 < 60  # after the patience, jobs fail fast (no 10-minute default)


def test_a_refused_endpoint_past_the_patience_fails_as_unreachable_and_stops_the_sweep(
    tmp_path, make_sim, key_env
):
    sim = make_sim(latency_ms=30)
    plan = _plan(tmp_path, name="refused-long")
    jobs = _jobs(plan, n=6)
    watcher = _when_done(sim, 15, sim.stop)
    out = execute(plan, jobs, profile=sim.profile(patience=1.5), run=tiny_run, analyze=False)
    watcher.join(10)
    assert "unreachable" in out.tally.failures, out.tally.failures
    assert "patience (1.5 s" in out.tally.messages["unreachable"], out.tally.messages
    assert out.stopped_for_egress  # the egress guard still stops the sweep once the patience is spent


def test_a_client_waits_through_a_restart_and_its_call_does_not_spend_retries(make_sim):
    from elo_per_token.egress.client import ProviderClient

    sim = make_sim()
    c = ProviderClient(sim.profile(patience=30, max_retries=0), api_key=SIM_KEY)
    msgs = [{"role": "user", "content": "hi"}]
    assert c.chat(msgs).attempts == 1
    assert c.outage.describe() is None
    sim.stop()
    with pytest.raises(ProviderError) as ei:  # the outage's first failure: max_retries=0 ends this call
        c.chat(msgs)
    assert ei.value.error_class == "unreachable"
    seen: list[str | None] = []
    box: list[Any] = []

    def restart() -> None:
        time.sleep(2)
        seen.append(c.outage.describe())
        box.append(start_in_thread({}, port=sim.port))

    threading.Thread(target=restart, daemon=True).start()
    try:
        r = c.chat(msgs)  # max_retries=0, yet it rides out the outage
    finally:
        for s in box:
            s.stop()
    assert r.attempts >= 2 and r.choices
    assert seen[0] and seen[0].startswith("provider unreachable since ") and "patience 30 s" in seen[0]
    assert c.outage.describe() is None and c.weather()["outages"] == 1


def test_an_endpoint_never_reached_still_fails_fast(make_sim):
    """A wrong port from the start is a setup problem: no patience, the circuit fails it as before."""
    from elo_per_token.egress.client import ProviderClient

    sim = make_sim()
    sim.stop()
    c = ProviderClient(sim.profile(patience=600, max_retries=1), api_key=SIM_KEY, backoff_base=0.01)
    t0 = time.monotonic()
    with pytest.raises(ProviderError) as ei:
        c.chat([{"role": "user", "content": "hi"}])
    assert ei.value.error_class == "unreachable" and time.monotonic() - t0 < 5
    assert c.weather()["outages"] == 0


def _profile_text(value: str) -> str:
    return f'[profiles.x]\nbase_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\npatience = {value}\n'


@pytest.mark.parametrize("value", ["-1", "nan", "inf", '"ten minutes"', "true", "1e9"])
def test_a_bad_patience_names_file_line_and_field(tmp_path: Path, value: str) -> None:
    p = tmp_path / "profiles.toml"
    p.write_text(_profile_text(value))
    with pytest.raises(InputError) as ei:
        load_profiles(p)
    assert ei.value.field == "profiles.x.patience" and ei.value.line == 5 and ei.value.file == str(p)


def test_patience_defaults_and_is_read(tmp_path: Path) -> None:
    p = tmp_path / "profiles.toml"
    p.write_text(_profile_text("45"))
    assert load_profiles(p)["x"].patience == 45.0
    p.write_text(_profile_text("0").replace("patience = 0\n", ""))
    assert load_profiles(p)["x"].patience == DEFAULT_PATIENCE_S == 600.0
    assert format_patience(600) == "10 min" and format_patience(45) == "45 s"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
        st.booleans(),
    )
)
def test_any_patience_is_accepted_in_range_or_refused_naming_the_field(tmp_path: Path, value: Any) -> None:
    import json

    shown = (
        (
            "nan"
            if math.isnan(value)
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
        if isinstance(value, float)
        else json.dumps(value, ensure_ascii=False)
    )
    p = tmp_path / "profiles.toml"
    p.write_text(_profile_text(shown))
    try:
        prof = bounded(lambda: load_profiles(p)["x"], time_s=2.0, memory_mb=20)
    except InputError as e:
        # A value TOML itself refuses (a raw control character) is named by file and line instead.
        assert e.field == "profiles.x.patience" or (e.line == 5 and "invalid TOML" in e.message), e
        return
    assert isinstance(value, int | float) and not isinstance(value, bool)
    assert 0 <= prof.patience <= 7 * 86400 and prof.patience == float(value)


@settings(max_examples=80, deadline=None)
@given(
    events=st.lists(
        st.sampled_from(["ok", "refused", "500", "429", "timeout"]),
        max_size=200,
    )
)
def test_any_sequence_of_outcomes_keeps_the_outage_state_consistent(events: list[str]) -> None:
    """Hostile orders of outcomes: an outage only begins after a success, any answer ends it, time down only
    grows, and `admit` never blocks once a stop is set."""

    def err(kind: str) -> ProviderError | None:
        return {
            "ok": None,
            "refused": ProviderError("unreachable", "refused"),
            "500": ProviderError("transient", "boom", status=500),
            "429": ProviderError("rate_limit", "slow down", status=429),
            "timeout": ProviderError("transient", "timed out"),
        }[kind]

    def run() -> None:
        o = Outage(patience=1e-9, profile="p")
        stop = threading.Event()
        stop.set()
        reached, last_down, streak = False, 0.0, 0
        for kind in events:
            e = err(kind)
            was_down = o.down()
            o.note(e, probe=False)
            reached = reached or e is None
            streak = 0 if kind in ("ok", "429") else streak + (kind in ("refused", "500") and reached)
            if not reached or kind in ("ok", "429"):
                assert not o.down()
            if (kind == "refused" and reached) or (kind == "500" and streak >= 2):
                assert o.down() and o.describe()
            if kind == "500" and streak == 1:  # one 5xx is a hiccup
                assert o.down() == was_down
            down = o.waited_s()
            assert down >= last_down
            last_down = down
            try:
                o.admit(stop, 1)
            except ProviderError as pe:
                assert o.down() and pe.error_class in ("unreachable", "transient")

    bounded(run, time_s=2.0, memory_mb=10)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=12), kids, max_size=5),
    max_leaves=40,
)
WEATHER_KEYS = ["rate_limited", "pauses", "limiter_wait_s", "retries", "retry_wait_s", "outages", "outage_s"]


@settings(max_examples=150, deadline=None)
@given(
    weather=st.dictionaries(st.sampled_from(WEATHER_KEYS) | st.text(max_size=8), JSONISH, max_size=8),
    extra=st.lists(JSONISH, max_size=3),
)
def test_any_recorded_weather_prints_one_safe_line_or_none(weather: dict[str, Any], extra: list[Any]) -> None:
    """`ept status` reads the weather back from a manifest anyone could have written: any shape gives one line
    (no markup or control characters from the file) or None, never an exception, quickly."""
    manifest = {"sessions": [*extra, {"started_at": "x", "weather": weather}]}

    def show() -> str | None:
        return last_weather(manifest)

    line = bounded(show, time_s=2.0, memory_mb=10)
    assert line is None or (line.startswith("provider weather: ") and "\n" not in line and "\x1b" not in line)
    assert last_weather({"sessions": "nope"}) is None and last_weather(None) is None
