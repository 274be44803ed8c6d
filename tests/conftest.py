"""Shared pytest fixtures: the simulator (fixtures_sim) and real services (fixtures_services).

Layout: the tests of each stage in tests/<stage>/ (cross-stage end-to-end, fault, compose and fresh-machine
tests in tests/system/, code-quality checks in tests/meta/), the helpers they share in testkit/ (on the path
through pyproject's `pythonpath`; benchmarks import them too). `.ci/place_tests.py` keeps it so.

CI never skips silently. `.ci/run` installs everything the tests use (PyYAML, chromium, redis-server, weed,
docker-compose) and sets EPT_CI=1; under it a test that would skip (a missing binary, a missing module, an
unavailable kernel feature) FAILS instead, with the skip's reason. A test that may legitimately skip on a CI
machine says so with `@pytest.mark.ci_may_skip("why")`. The summary line prints the skip count either way.
"""

from __future__ import annotations

import os
import sys
import tempfile
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

pytest_plugins = ["fixtures_sim", "fixtures_services", "fixtures_faults"]


def in_ci() -> bool:
    return os.environ.get("EPT_CI", "").strip() not in ("", "0", "false", "no")


TESTS = Path(__file__).resolve().parent
TESTKIT = TESTS.parent / "testkit"
# Where a test's own code or a shared helper lives: code defined here can start a service (uses_services).
TEST_CODE = (str(TESTS), str(TESTKIT))

# Every stage folder on the path, so a test imports another test module's helpers by its bare name wherever
# either lives (`from test_compare import write_ledger_run`), as in the flat layout. Basenames are unique
# across tests/ (.ci/place_tests.py checks), which pytest's default import mode needs anyway.
for _folder in sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py"))):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))

# `ept analyze` and `ept view` keep analyses in the user's cache folder (analysis.runcache): the tests' go to a
# folder of this test session's, never to ~/.cache.
os.environ.setdefault("EPT_VIEW_CACHE", tempfile.mkdtemp(prefix="ept-test-cache-"))

# Property tests: a local run draws new examples every time (so hostile inputs keep being searched for and
# what they find is kept in .hypothesis/); CI replays the same derandomized examples, so a merge is judged by
# the code, not by the draw. A failure found locally is added as an @example or fixed before it lands.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if in_ci():
    hypothesis_settings.load_profile("ci")

# The fixtures that start a real Redis, SeaweedFS or Celery worker (fixtures_services.py), and the helpers a
# test or fixture calls to start one itself (fixtures_services.py, fixtures_faults.py, redis_server_path for a
# hand-started Redis). A test reaching any of them, directly or through a helper or fixture in tests/ or testkit/, is
# marked `services`; `.ci/run` runs those in the second lane.
SERVICE_FIXTURES = frozenset({"redis_server", "s3_server", "s3_env", "s3_bucket"})
SERVICE_HELPERS = frozenset(
    {
        "start_redis", "start_seaweed", "weed_command", "start_celery_workers", "start_workers",
        "start_redis_on", "start_weed_on", "fault_rig", "redis_server_path", "weed_path",
    }
)  # fmt: skip
# A code object holding both constants runs `python -m elo_per_token worker`: a Celery worker process.
WORKER_ARGV = ("elo_per_token", "worker")


def _code_reaches_services(code: types.CodeType, glb: dict[str, Any], seen: set[int]) -> bool:
    if not SERVICE_HELPERS.isdisjoint(code.co_names) or all(a in code.co_consts for a in WORKER_ARGV):
        return True
    for const in code.co_consts:  # nested functions, lambdas, comprehensions
        if isinstance(const, types.CodeType) and _code_reaches_services(const, glb, seen):
            return True
    for name in code.co_names:  # helpers defined in tests/ or testkit/, followed transitively
        target = glb.get(name)
        if isinstance(target, types.FunctionType) and _reaches_services(target, seen):
            return True
    return False


def _reaches_services(func: Callable[..., Any], seen: set[int] | None = None) -> bool:
    """Whether `func` (a test, a fixture or a helper defined in tests/ or testkit/) can start a real service."""
    seen = set() if seen is None else seen
    func = getattr(func, "__wrapped__", func)
    code = getattr(func, "__code__", None)
    if code is None or id(code) in seen or not code.co_filename.startswith(TEST_CODE):
        return False
    seen.add(id(code))
    return _code_reaches_services(code, getattr(func, "__globals__", {}), seen)


def uses_services(item: pytest.Item) -> bool:
    """Whether a collected test uses a service fixture or starts a service through its own code or fixtures."""
    if not SERVICE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())):
        return True
    funcs = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info is not None else ():
        funcs += [d.func for d in defs]
    return any(f is not None and _reaches_services(f) for f in funcs)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("services") is None and uses_services(item):
            item.add_marker(pytest.mark.services)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ci_may_skip(reason): this test's skip is acceptable even under EPT_CI=1"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    rep = outcome.get_result()
    if not (in_ci() and rep.skipped) or hasattr(rep, "wasxfail") or item.get_closest_marker("ci_may_skip"):
        return
    reason = (
        rep.longrepr[2] if isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3 else str(rep.longrepr)
    )
    rep.outcome = "failed"
    rep.longrepr = (
        f"skipped under EPT_CI=1, which CI must not do: {reason}\n"
        "Install what the test needs in .ci/run (or mark it ci_may_skip with the reason it may skip in CI)."
    )


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    skipped = len(terminalreporter.stats.get("skipped", []))
    mode = "EPT_CI=1: skips fail" if in_ci() else "local run: skips allowed (EPT_CI=1 makes them fail)"
    terminalreporter.write_line(f"skipped tests: {skipped} ({mode})")
