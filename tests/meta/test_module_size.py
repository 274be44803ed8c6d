"""No product module is longer than MAX_LINES: a module that grows past it is split into modules named for
what they do (as analysis/pipeline.py was split into result, stages, record_checks, result_warnings and
pipeline_tables), so a reader finds one concern per file.

Length = the file's line count. The product folders are read from pyproject.toml's package-dir (the same
list tests/meta/test_function_length.py reads), so a new stage is checked as soon as it is packaged; tests/ and
benchmarks/ are not product code and are not checked.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 600


def _folders(root: Path = ROOT) -> list[str]:
    """Every product folder: the package root and the stage folders pyproject.toml maps under it."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return sorted(set(mapping["package-dir"].values()))


FOLDERS = _folders()


def long_modules(folder: Path, limit: int = MAX_LINES, root: Path = ROOT) -> list[tuple[str, int]]:
    """(file relative to root, line count) of every .py file under `folder` longer than `limit` lines."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        with path.open("rb") as f:
            n = sum(1 for _ in f)
        if n > limit:
            found.append((str(path.relative_to(root)), n))
    return found


def report(offenders: list[tuple[str, int]], limit: int = MAX_LINES) -> str:
    lines = [f"{file} is {n} lines (limit {limit})" for file, n in offenders]
    return "modules over the limit — split them into modules named for what they do:\n" + "\n".join(lines)


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_module_over_the_limit(folder: str) -> None:
    path = ROOT / folder
    assert path.is_dir(), f"{folder}/ is not a folder of the checkout"
    assert any(path.rglob("*.py")), f"{folder}/ has no Python file: the check would pass vacuously"
    offenders = long_modules(path)
    assert not offenders, report(offenders)


def test_the_scanner_finds_long_modules(tmp_path: Path) -> None:
    """The check can fail: a module of limit+1 lines (also in a subfolder) is reported with its length; one of
    exactly the limit, with or without a final newline, is not."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "at_limit.py").write_text("x = 1\n" * MAX_LINES)
    (pkg / "at_limit_no_newline.py").write_text("x = 1\n" * (MAX_LINES - 1) + "x = 1")
    (pkg / "over.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (pkg / "sub" / "deep.py").write_text("x = 1\n" * (MAX_LINES + 5))
    found = long_modules(pkg, root=tmp_path)
    assert found == [("pkg/over.py", MAX_LINES + 1), ("pkg/sub/deep.py", MAX_LINES + 5)]
    assert f"pkg/over.py is {MAX_LINES + 1} lines (limit {MAX_LINES})" in report(found)
