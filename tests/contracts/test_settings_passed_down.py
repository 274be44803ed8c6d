"""Settings reach the code that uses them as values, not through os.environ (issue 35).

- `ept worker --profiles FILE`: the worker's tasks resolve profile names in FILE (worker.lifecycle.provider_for
  takes it), with no EPT_PROFILES in the environment;
- `ept demo`'s throwaway key rides in its Profile (`inline_key`), which no manifest, repr or profiles file
  can hold, and the demo leaves ept's variables in the environment as it found them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from elo_per_token.contracts.errors import InputError
from elo_per_token.egress.profiles import Profile, load_profiles


def _profiles_file(tmp_path: Path) -> Path:
    path = tmp_path / "worker-profiles.toml"
    path.write_text(
        '[profiles.only-here]\nprotocol = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "EPT_TEST_ONLY_HERE_KEY"\nmodel = "m-only-here"\n'
    )
    return path


def test_the_worker_resolves_profiles_in_the_file_it_was_given(tmp_path: Path, monkeypatch) -> None:
    from elo_per_token.worker.lifecycle import provider_for

    monkeypatch.delenv("EPT_PROFILES", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./profiles.toml either: only the argument names the file
    client = provider_for("only-here", None, None, None, None, profiles=str(_profiles_file(tmp_path)))
    assert client.profile.model == "m-only-here" and client.profile.base_url == "http://127.0.0.1:9/v1"
    assert "EPT_PROFILES" not in os.environ
    with pytest.raises(InputError):  # without the argument the name is unknown: nothing else carried it
        provider_for("only-here", None, None, None, None)


def _demo_profile(key: str) -> Profile:
    return Profile(
        name="simulator",
        protocol="openai",
        base_url="http://127.0.0.1:9/v1",
        api_key_env="EPT_DEMO_API_KEY",
        model="ept-sim-1",
        inline_key=key,
    )


def test_an_inline_key_is_used_and_shown_nowhere(monkeypatch) -> None:
    monkeypatch.delenv("EPT_DEMO_API_KEY", raising=False)
    key = "sk-demo-0123456789abcdef0123456789abcdef"
    prof = _demo_profile(key)
    assert prof.api_key() == key and prof.env_key() is None
    assert (
        "inline_key" not in prof.public_dict()
        and key not in repr(prof)
        and key not in str(prof.public_dict())
    )
    assert prof.with_base_url("http://127.0.0.1:8/v1").api_key() == key
    assert prof == _demo_profile("sk-other") and hash(prof) == hash(_demo_profile("sk-other"))


def test_a_profiles_file_cannot_carry_an_inline_key(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        '[profiles.x]\nbase_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\ninline_key = "sk-literal"\n'
    )
    with pytest.raises(InputError) as e:
        load_profiles(path)
    assert e.value.field is not None and "inline_key" in str(e.value) and "sk-literal" not in str(e.value)


@pytest.mark.slow
def test_the_demo_puts_its_key_in_no_environment_variable(tmp_path: Path, monkeypatch) -> None:
    from elo_per_token.coordinator.demo import run_demo

    monkeypatch.delenv("EPT_DEMO_API_KEY", raising=False)
    before = {k: v for k, v in os.environ.items() if k.startswith("EPT_")}
    result = run_demo(tmp_path / "out", tasks_per_family=1)
    assert result.analysis is not None and (tmp_path / "out" / "report").is_dir()
    # (polars adjusts its allocator's variable itself; ept's variables and the key are what this checks)
    assert {k: v for k, v in os.environ.items() if k.startswith("EPT_")} == before
    assert not any(v.startswith("sk-demo-") for v in os.environ.values())


def test_worker_broker_option_reaches_its_start_failure_report(tmp_path: Path, redis_server) -> None:
    """`ept worker --broker URL` (no EPT_BROKER_URL anywhere) that cannot start leaves its reason on THAT broker:
    the option is passed down as a value, and the worker process's environment is not the channel."""
    import subprocess
    import sys

    from elo_per_token.contracts.jobs import worker_error_key

    queue = "settings-broker-probe"
    r = redis_server.client()
    r.delete(worker_error_key(queue))
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "elo_per_token", "worker", "--queue", queue, "--broker", redis_server.url],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "EPT_WORKER_LEDGERS" in done.stderr
    left = r.get(worker_error_key(queue))
    assert left is not None and b"EPT_WORKER_LEDGERS" in left
    assert redis_server.password not in done.stderr


def test_a_celery_worker_reads_where_code_is_graded_once_when_its_app_is_built(monkeypatch) -> None:
    """EPT_GRADE_QUEUE / EPT_GRADE_TIMEOUT are read when the worker's app is built (its edge) and handed to
    every job, not read from the environment again per job: a change after start moves no job's grading."""
    from celery import Celery

    from elo_per_token.worker.celery_app import grading_route, make_app, route_grading
    from elo_per_token.worker.graders import code

    assert grading_route({"EPT_GRADE_QUEUE": "grade", "EPT_GRADE_TIMEOUT": "30"}) == ("grade", 30.0)
    assert grading_route({}) == (None, 0.0)
    monkeypatch.delenv("EPT_GRADE_QUEUE", raising=False)
    monkeypatch.setattr(code, "_test_runner", None)
    app = make_app("memory://")
    monkeypatch.setenv("EPT_GRADE_QUEUE", "grade")  # after start: the job below still grades locally
    task = app.tasks["ept.run_job"]
    with pytest.raises(TypeError):  # a job dict without fields fails after the routing
        task.run({}, {})
    assert code._test_runner is None
    route_grading(Celery("x", broker="memory://"), ("grade", 5.0))
    assert code._test_runner is not None
    route_grading(app, (None, 0.0))
    assert code._test_runner is None
