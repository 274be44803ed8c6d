"""No function in any product folder is longer than MAX_LINES: a long function is split into named steps that
take data and return data, so the next change touches one small step. One check for every folder.

Length = the def line to the function's last line (`ast` end_lineno - lineno + 1; decorators not counted,
nested functions counted in their parent too). FOLDERS is read from pyproject.toml's package-dir, so a new stage is
checked as soon as it is packaged.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 80


def _folders() -> list[str]:
    """Every product folder: the package root and the stage folders pyproject.toml maps under it."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return sorted(set(mapping["package-dir"].values()))


FOLDERS = _folders()


def long_functions(
    folder: Path, limit: int = MAX_LINES, root: Path = ROOT
) -> list[tuple[str, int, str, int]]:
    """(file relative to root, def line, qualified name, length) of every function in `folder` over `limit`."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, qualname in _functions(tree):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append((str(path.relative_to(root)), node.lineno, qualname, length))
    return found


def _functions(tree: ast.AST, prefix: str = ""):
    """Every function and method with its dotted name (Class.method, outer.inner)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node, prefix + node.name
            yield from _functions(node, prefix + node.name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")
        else:
            yield from _functions(node, prefix)


def report(offenders: list[tuple[str, int, str, int]], limit: int = MAX_LINES) -> str:
    lines = [f"{file}:{line} {name} is {n} lines (limit {limit})" for file, line, name, n in offenders]
    return "functions over the limit — split them into named steps:\n" + "\n".join(lines)


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_function_over_the_limit(folder: str) -> None:
    path = ROOT / folder
    assert path.is_dir(), f"{folder}/ is not a folder of the checkout"
    assert any(path.rglob("*.py")), f"{folder}/ has no Python file: the check would pass vacuously"
    offenders = long_functions(path)
    if offenders:
        print(report(offenders))
    assert not offenders, report(offenders)


def test_the_scanner_finds_long_functions(tmp_path: Path) -> None:
    """The check can fail: a function, a method and a nested function of limit+1 lines are reported with
    file:line and length; ones of exactly the limit are not."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))  # + the def line = MAX_LINES lines
    inner = "\n".join(f"        y{i} = {i}" for i in range(MAX_LINES - 1))
    src = (
        f"def at_limit():\n{body}\n\n\n"
        f"def over():\n{body}\n    return 1\n\n\n"
        f"class K:\n    def method(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n        return 1\n\n\n"
        f"def outer():\n    def inner():\n{inner}\n        return 1\n    return inner\n"
    )
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text(src)
    found = long_functions(pkg, root=tmp_path)
    by_name = {name: (file, line, n) for file, line, name, n in found}
    assert set(by_name) == {"over", "K.method", "outer", "outer.inner"}
    # at_limit fills lines 1..MAX_LINES, two blank lines follow: `over` starts at MAX_LINES + 3.
    assert by_name["over"] == ("pkg/mod.py", MAX_LINES + 3, MAX_LINES + 1)
    assert by_name["K.method"][2] == MAX_LINES + 1
    assert by_name["outer.inner"][2] == MAX_LINES + 1
    assert f"pkg/mod.py:{MAX_LINES + 3} over is {MAX_LINES + 1} lines" in report(found)
