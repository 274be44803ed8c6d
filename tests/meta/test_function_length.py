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

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 60

# Listed exceptions: functions that were over MAX_LINES when the limit came down from 80 and read best as one
# sequence of steps for now (a CLI command's option handling, a classifier's ordered rules). Each may not grow
# past the length written here; one that shrinks to the limit must leave the list (test_exceptions_are_live).
# Regenerate with `python3 tests/meta/test_function_length.py`.
# fmt: off
EXCEPTIONS: dict[tuple[str, str], int] = {
    ('analysis/bootstrap.py', 'bootstrap'): 77,
    ('analysis/compare.py', 'compare_runs'): 69,
    ('analysis/imports/batch.py', 'import_batch'): 78,
    ('analysis/imports/inspect_log.py', 'import_inspect'): 62,
    ('analysis/io/recovery.py', '_slow_read'): 61,
    ('analysis/pipeline.py', 'build_comparisons'): 63,
    ('analysis/plots.py', 'per_family_figure'): 75,
    ('analysis/returns.py', 'family_heterogeneity'): 62,
    ('coordinator/adaptive/cli.py', 'replay_adaptive_cmd'): 77,
    ('coordinator/adaptive/core.py', 'run_adaptive'): 80,
    ('coordinator/adaptive/sweep.py', 'run_adaptive_sweep'): 61,
    ('egress/client.py', 'ProviderClient.chat'): 71,
    ('egress/errors.py', 'classify'): 80,
    ('suites/generate_tools.py', '_tool_templates'): 61,
    ('worker/sandbox/bwrap.py', 'argv'): 65,
    ('worker/sandbox/harness.py', 'main'): 74,
}
# fmt: on


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
    offenders = [
        found for found in long_functions(path) if found[3] > EXCEPTIONS.get((found[0], found[2]), MAX_LINES)
    ]
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


def test_exceptions_are_live() -> None:
    """Every listed exception names a function that exists and is still over the limit: a stale entry would
    let a new function of that name grow unchecked."""
    over = {(file, name) for folder in FOLDERS for file, _, name, _ in long_functions(ROOT / folder)}
    stale = sorted(set(EXCEPTIONS) - over)
    assert not stale, f"no longer over {MAX_LINES} lines (or gone): drop them from EXCEPTIONS: {stale}"


if __name__ == "__main__":
    rows = sorted((file, name, n) for folder in FOLDERS for file, _, name, n in long_functions(ROOT / folder))
    print("\n".join(f"    ({file!r}, {name!r}): {n}," for file, name, n in rows))
