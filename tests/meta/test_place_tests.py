"""`.ci/place_tests.py` keeps the tests laid out by stage: the repository passes it, and each misplacement
it is there for (a flat test file, a helper among the tests, a test among the helpers, an unknown folder, a
file name twice) fails it, named."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("place_tests", REPO / ".ci" / "place_tests.py")
assert _spec is not None and _spec.loader is not None
place_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(place_tests)


def test_the_repository_is_laid_out_by_stage() -> None:
    assert place_tests.problems(REPO) == []
    assert "analysis" in place_tests.stage_folders(REPO) and "worker" in place_tests.stage_folders(REPO)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A minimal laid-out repository: pyproject's package-dir, a conftest, one test per folder, a helper."""
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    for rel in ("tests/conftest.py", "tests/analysis/test_a.py", "tests/system/test_s.py", "testkit/bounds.py",
                "tests/fixtures/table/make.py"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert place_tests.problems(tmp_path) == []
    assert place_tests.main(["place_tests", str(tmp_path)]) == 0
    return tmp_path


IDS = [
    "flat-test",
    "flat-helper",
    "helper-in-stage",
    "unknown-folder",
    "nested",
    "same-name",
    "in-testkit",
    "tests.x",
]


@pytest.mark.parametrize(
    ("rel", "named"),
    [
        ("tests/test_flat.py", "tests/test_flat.py: directly in tests/"),
        ("tests/fixtures_new.py", "tests/fixtures_new.py: directly in tests/; move it to testkit/"),
        ("tests/worker/helper.py", "tests/worker/helper.py: not a test file"),
        ("tests/nowhere/test_x.py", "tests/nowhere/test_x.py: tests live in tests/<folder>/"),
        ("tests/worker/deep/test_x.py", "tests/worker/deep/test_x.py: tests live in tests/<folder>/"),
        ("tests/worker/test_a.py", "test_a.py: the same test file name in tests/analysis/test_a.py"),
        ("testkit/test_helper.py", "testkit/test_helper.py: a test file in testkit/"),
        (
            "tests/worker/test_b.py",
            "tests/worker/test_b.py:2: imports tests.bounds; import it by its bare name",
        ),
    ],
    ids=IDS,
)
def test_each_misplacement_fails_named(tree: Path, rel: str, named: str) -> None:
    (tree / rel).parent.mkdir(parents=True, exist_ok=True)
    (tree / rel).write_text(
        "import os\nfrom tests.bounds import bounded\n" if rel.endswith("test_b.py") else ""
    )
    found = place_tests.problems(tree)
    assert len(found) == 1 and found[0].startswith(named), found
    assert place_tests.main(["place_tests", str(tree)]) == 1
