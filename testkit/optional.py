"""Optional suites in tests: whether each is installed, and the skip that names the install command.

No test module may load an optional suite at import time (collection would fail on a machine without it,
and the README's test command must collect everything there). Tests that need one take `requires_bfcl`;
under EPT_CI=1 (tests/conftest.py) its skip is a failure, so CI, which installs it, still runs them.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from elo_per_token.suites.load import builtin_suite_names, load_builtin_suite

# The pin .ci/run installs (tests/ept/test_first_hour.py checks the two agree).
BFCL_INSTALL = "python3 -m pip install --no-deps 'bfcl-eval==2026.3.23'"
HAS_BFCL = "bfcl" in builtin_suite_names()
requires_bfcl = pytest.mark.skipif(not HAS_BFCL, reason=f"bfcl-eval is not installed: {BFCL_INSTALL}")


@functools.cache
def bfcl_tasks() -> list[dict[str, Any]]:
    """The bfcl suite's tasks, loaded on first use (a test that calls this carries requires_bfcl)."""
    if not HAS_BFCL:
        pytest.skip(f"bfcl-eval is not installed: {BFCL_INSTALL}")
    return load_builtin_suite("bfcl")
