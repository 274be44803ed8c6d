"""`.ci/run` runs the README's `python3 -m pytest` in two lanes: `-m "not slow and not services"` then
`-m "slow or services"`. Together they must be exactly the whole suite (no test lost, none run twice), and the
fast lane must hold no test that starts a real service (tests/conftest.py marks those `services`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression
from conftest import SERVICE_FIXTURES

REPO = Path(__file__).resolve().parents[2]

# A pytest plugin for a --collect-only run: every collected test's node id, marker names and fixtures.
PROBE = """
import json, os
def pytest_collection_finish(session):
    out = {i.nodeid: {"markers": sorted({m.name for m in i.iter_markers()}),
                      "fixtures": sorted(getattr(i, "fixturenames", ()))} for i in session.items}
    with open(os.environ["EPT_LANE_PROBE_OUT"], "w") as f:
        json.dump(out, f)
"""


def ci_lanes() -> list[str]:
    """The -m expressions of the pytest commands in .ci/run, in order."""
    text = (REPO / ".ci" / "run").read_text()
    return re.findall(r'^python3 -m pytest -m "([^"]+)"(?:\s+--durations=\d+)?\s*$', text, re.M)


def in_lane(expr: str, markers: set[str]) -> bool:
    return Expression.compile(expr).evaluate(lambda name, **_kw: name in markers)


def test_ci_runs_the_fast_lane_first_then_the_rest() -> None:
    assert ci_lanes() == ["not slow and not services", "slow or services"]
    text = (REPO / ".ci" / "run").read_text()
    assert not re.search(r"^python3 -m pytest\s*$", text, re.M), "the whole suite would run a third time"


@pytest.mark.parametrize("markers", [set(), {"slow"}, {"services"}, {"slow", "services"}, {"parametrize"}])
def test_the_two_lanes_split_every_marker_combination(markers: set[str]) -> None:
    hits = [expr for expr in ci_lanes() if in_lane(expr, markers)]
    assert len(hits) == 1, (markers, hits)


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[str]]]:
    tmp = tmp_path_factory.mktemp("probe")
    (tmp / "ept_lane_probe.py").write_text(PROBE)
    out = tmp / "items.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")]),
           "EPT_LANE_PROBE_OUT": str(out)}  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "ept_lane_probe"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    items: dict[str, dict[str, list[str]]] = json.loads(out.read_text())
    return items


@pytest.mark.slow
def test_every_collected_test_is_in_exactly_one_lane(collected: dict[str, dict[str, list[str]]]) -> None:
    assert len(collected) > 1000  # the whole suite, not a slice of it
    assert any(item.endswith("test_every_collected_test_is_in_exactly_one_lane") for item in collected)
    lanes = ci_lanes()
    for nodeid, info in collected.items():
        hits = [expr for expr in lanes if in_lane(expr, set(info["markers"]))]
        assert len(hits) == 1, (nodeid, hits)


@pytest.mark.slow
def test_the_fast_lane_holds_no_test_using_a_service(collected: dict[str, dict[str, list[str]]]) -> None:
    fast = {n: i for n, i in collected.items() if in_lane(ci_lanes()[0], set(i["markers"]))}
    leaked = sorted(n for n, i in fast.items() if not SERVICE_FIXTURES.isdisjoint(i["fixtures"]))
    assert not leaked
    marked = [n for n, i in collected.items() if "services" in i["markers"]]
    # The test files that start Redis, SeaweedFS or Celery workers are all in the services lane.
    for name in ("test_sweep_celery.py", "test_fault_worker_kill.py", "test_fault_s3_outage.py",
                 "test_hostile_celery.py", "test_adaptive_celery.py"):  # fmt: skip
        assert any(f"/{name}::" in n for n in marked), name


def _helper_starting_redis(tmp: Path) -> None:
    from fixtures_services import start_redis

    start_redis(tmp)


def _helper_via_helper(tmp: Path) -> None:
    _helper_starting_redis(tmp)


def _helper_starting_a_worker() -> list[str]:
    return [sys.executable, "-m", "elo_per_token", "worker"]


def _helper_plain(tmp: Path) -> str:
    return str(tmp / "elo_per_token")


def test_the_services_detector_follows_helpers_and_spots_worker_argv() -> None:
    from conftest import _reaches_services

    # The helpers by name: naming them in this function's code would make this test reach them too.
    mod = sys.modules[__name__]
    for name in ("_helper_starting_redis", "_helper_via_helper", "_helper_starting_a_worker"):
        assert _reaches_services(getattr(mod, name)), name
    assert not _reaches_services(_helper_plain)
    assert not _reaches_services(test_the_two_lanes_split_every_marker_combination)


def test_this_files_pure_tests_stay_in_the_fast_lane(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("services") is None
    assert "services" not in {m.name for m in request.node.iter_markers()}
