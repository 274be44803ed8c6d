"""Shared pytest fixtures: the simulator (fixtures_sim) and real services (fixtures_services).

CI never skips silently. `.ci/run` installs everything the tests use (PyYAML, chromium, redis-server, weed,
docker-compose) and sets EPT_CI=1; under it a test that would skip (a missing binary, a missing module, an
unavailable kernel feature) FAILS instead, with the skip's reason. A test that may legitimately skip on a CI
machine says so with `@pytest.mark.ci_may_skip("why")`. The summary line prints the skip count either way.
"""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["fixtures_sim", "fixtures_services", "fixtures_faults"]


def in_ci() -> bool:
    return os.environ.get("EPT_CI", "").strip() not in ("", "0", "false", "no")


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
