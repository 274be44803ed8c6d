"""A worker reads its settings when it starts and hands them down as values (issue 35): the code sandbox
(SandboxSettings), the math grader (MathSettings) and each job's rate-limit store and allow-lists (JobSettings)
obey the environment the worker started with, and a change to the environment after start moves nothing. A
process that configured nothing (a local sweep, a test) still reads the environment when asked, as before."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.errors import InputError
from elo_per_token.worker.graders import mathproc
from elo_per_token.worker.sandbox import settings as sandbox


@pytest.fixture
def unconfigured():
    """Each test starts and ends with nothing configured (the process-wide values other tests expect)."""
    sandbox.configure(None)
    mathproc.configure(None)
    yield
    sandbox.configure(None)
    mathproc.configure(None)


def test_a_started_worker_keeps_the_settings_it_started_with(monkeypatch, unconfigured) -> None:
    from celery.signals import worker_init

    from elo_per_token.worker.celery_app import make_app
    from elo_per_token.worker.sandbox import budget, bwrap

    monkeypatch.setenv("EPT_SANDBOX_CONCURRENCY", "3")
    monkeypatch.setenv("EPT_SANDBOX_PYTHON", "/opt/started/python3")
    monkeypatch.setenv("EPT_MATH_TIMEOUT_S", "7")
    monkeypatch.setenv("EPT_MATH_PROCS", "5")
    assert budget.concurrency() == 3 and mathproc.timeout_s() == 7.0  # unconfigured: the environment, now
    make_app("memory://").close()
    assert (
        budget.concurrency() == 3 and sandbox._configured is None
    )  # building an app (a local sweep) pins nothing
    worker_init.send(
        sender=None
    )  # a Celery worker starts in this process (`ept worker`, `celery -A ... worker`)
    monkeypatch.setenv("EPT_SANDBOX_CONCURRENCY", "9")  # after start: no effect
    monkeypatch.setenv("EPT_SANDBOX_PYTHON", "/opt/later/python3")
    monkeypatch.setenv("EPT_MATH_TIMEOUT_S", "1")
    assert budget.concurrency() == 3 and budget.describe()["concurrent_sandboxes"] == 3
    assert mathproc.timeout_s() == 7.0 and mathproc.current().procs == 5
    bwrap.interpreter.cache_clear()
    try:
        assert bwrap.interpreter() == "/opt/started/python3"
    finally:
        bwrap.interpreter.cache_clear()
    sandbox.configure(None)
    assert budget.concurrency() == 9  # nothing configured: back to reading the environment when asked


def test_the_math_child_is_handed_its_pools_settings_not_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("EPT_MATH_TIMEOUT_S", "99")
    monkeypatch.setenv("EPT_MATH_MEMORY_MB", "4096")
    env = mathproc._child_env(mathproc.MathSettings(timeout_s=2.5, procs=1, memory_mb=300))
    assert env["EPT_MATH_TIMEOUT_S"] == "2.5" and env["EPT_MATH_MEMORY_MB"] == "300"
    assert mathproc.MathSettings.from_env(env) == mathproc.MathSettings(2.5, 2, 300)  # what the child reads
    assert not any(k.endswith("_API_KEY") for k in env)


def test_a_job_is_admitted_by_the_allow_list_the_worker_started_with(tmp_path: Path, monkeypatch) -> None:
    """EPT_WORKER_LEDGERS is read when the app is built: a message naming a ledger added to the environment
    later is still refused (the old code read the variable per job and let it in)."""
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.suites.load import load_builtin_suite
    from elo_per_token.worker.celery_app import make_app

    ok, later = tmp_path / "ok", tmp_path / "later"
    monkeypatch.setenv("EPT_WORKER_LEDGERS", str(ok))
    app = make_app("memory://")
    monkeypatch.setenv("EPT_WORKER_LEDGERS", f"{ok},{later}")
    job = Job("r", load_builtin_suite("code")[0], "greedy", 1, seed=1)
    out = app.tasks["ept.run_job"].run(job.to_dict(), {"ledger": str(later)})
    assert out["status"] == "failed" and out["class"] == "permanent"
    assert "EPT_WORKER_LEDGERS" in out["message"] and str(later) not in out["message"].split("(")[-1]
    assert not later.exists()


def test_job_settings_name_the_rate_limit_store_in_order() -> None:
    from elo_per_token.worker.celery_job import JobSettings, _redis_url

    def task(broker: str) -> SimpleNamespace:  # the shape of a bound Celery task: task.app.conf
        return SimpleNamespace(app=SimpleNamespace(conf={"broker_url": broker}))

    redis_app = task("redis://broker:6379/0")
    assert _redis_url(redis_app, JobSettings("redis://limits:6379/1", None)) == "redis://limits:6379/1"
    assert _redis_url(redis_app, JobSettings(None, "redis://env:6379/0")) == "redis://broker:6379/0"
    assert _redis_url(task("memory://"), JobSettings(None, "redis://env:6379/0")) == "redis://env:6379/0"
    assert JobSettings.from_env({"EPT_RATELIMIT_URL": " redis://x/1 "}).ratelimit_url == "redis://x/1"


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    env=st.dictionaries(
        st.sampled_from(["EPT_SANDBOX_MEMORY_MB", "EPT_SANDBOX_CONCURRENCY", "EPT_SANDBOX_CGROUP",
                         "EPT_SANDBOX_UID_BASE", "EPT_MATH_TIMEOUT_S", "EPT_MATH_PROCS", "EPT_MATH_MEMORY_MB"]),
        st.text(max_size=2000),
    )
)  # fmt: skip
def test_hostile_settings_are_values_or_errors_naming_the_variable(env: dict[str, str]) -> None:
    """Any text in the variables: a settings value, or an InputError naming the variable; fast and small."""
    t0 = time.process_time()
    for build in (sandbox.SandboxSettings.from_env, mathproc.MathSettings.from_env):
        try:
            got = build(env)
        except InputError as e:
            assert any(name in str(e) for name in env) and len(str(e)) < 400
        else:
            assert getattr(got, "concurrency", 1) >= 1 and getattr(got, "procs", 1) >= 1
    assert time.process_time() - t0 < 0.5
