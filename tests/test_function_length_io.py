"""No function in the analysis.io package is longer than 80 lines (a function that long does several jobs).

Length is measured on the AST: end_lineno - lineno + 1 of every def (methods and nested defs included), so
docstrings and comments count, decorators do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 80
PACKAGE = Path(__file__).resolve().parent.parent / "analysis" / "io"


def function_lengths(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function and method in `source`."""
    return [
        (node.name, node.lineno, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None
    ]


def test_the_measure_counts_every_line_of_a_def() -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_LINES))
    src = f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body}\n"
    assert function_lengths(src) == [("short", 1, 2), ("long", 6, MAX_LINES + 1)]


def test_no_function_in_analysis_io_is_over_80_lines() -> None:
    files = sorted(PACKAGE.glob("*.py"))
    assert PACKAGE.joinpath("__init__.py") in files and len(files) > 1  # the package, not a lone io.py
    too_long = [
        f"{path.relative_to(PACKAGE.parent.parent)}:{line} {name} is {n} lines"
        for path in files
        for name, line, n in function_lengths(path.read_text(encoding="utf-8"))
        if n > MAX_LINES
    ]
    assert not too_long, f"functions over {MAX_LINES} lines (split them into named steps):\n" + "\n".join(too_long)
