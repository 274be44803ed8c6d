"""No function in analysis/ is longer than 80 lines (issue 18): def line to the last line of its body."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 80
ANALYSIS = Path(__file__).resolve().parent.parent / "analysis"
# (module or package directly under analysis/, function name): known exceptions. None left: the io split
# shortened `_normalise`.
PENDING: set[tuple[str, str]] = set()


def long_functions(root: Path, limit: int = MAX_LINES) -> list[tuple[str, str, int, int]]:
    """(file, function, first line, length) of every function or method longer than `limit` lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    out.append((str(path.relative_to(root)), node.name, node.lineno, length))
    return out


def test_no_function_in_analysis_is_longer_than_80_lines() -> None:
    found = [f for f in long_functions(ANALYSIS) if (Path(f[0]).with_suffix("").parts[0], f[1]) not in PENDING]
    assert not found, "\n".join(f"analysis/{p}:{line} {name}() is {n} lines (max {MAX_LINES})" for p, name, line, n in found)


def test_the_measure_counts_def_to_last_body_line(tmp_path: Path) -> None:
    """The AST measure itself: def line to last body line; a nested function is measured on its own too."""
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    (tmp_path / "m.py").write_text(
        f"def fits():\n{body}\n\n\ndef too_long():\n{body}\n    x = 1\n\n\n"
        "def outer():\n    def inner():\n        return 1\n    return inner\n",
        encoding="utf-8",
    )
    assert long_functions(tmp_path) == [("m.py", "too_long", 83, 81)]
    assert long_functions(tmp_path, limit=2) == [("m.py", "fits", 1, 80), ("m.py", "too_long", 83, 81),
                                                 ("m.py", "outer", 166, 4)]  # fmt: skip
