"""`# fmt: skip` in product code only where it is listed here: a table whose rows are laid out on purpose (one
entry per line or per group, which ruff format would explode or re-pack). Every other statement is left to
`ruff format`; a function that would grow past tests/meta/test_function_length.py's limit once formatted is split
into named steps, not packed. The counts are exact: a skip that goes takes its allowance with it."""

from __future__ import annotations

import io
import tokenize
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Tables laid out on purpose: stage -> commands (ept --help order), fault -> HTTP error, column specs of the
# HTML tables, label offsets, the Responses API's event stream, sort keys and sample columns.
TABLES: dict[str, int] = {
    "analysis/html.py": 3,
    "analysis/html_sections.py": 1,
    "analysis/svgplot.py": 1,
    "ept/cli.py": 1,
    "simulator/faults.py": 1,
    "simulator/proto_responses.py": 3,
    "viewer/arm_page.py": 1,
    "viewer/compare_page.py": 1,
    "viewer/samples.py": 1,
}


def allowed() -> dict[str, int]:
    return dict(TABLES)


def skips(source: str) -> int:
    """`# fmt: skip` comments of `source` (comments only: the words inside a string do not count)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return sum(1 for t in tokens if t.type == tokenize.COMMENT and t.string.rstrip().endswith("fmt: skip"))


def product_counts(root: Path = ROOT) -> dict[str, int]:
    mapping = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    counts = {}
    for folder in sorted(set(mapping["package-dir"].values())):
        for path in sorted((root / folder).rglob("*.py")):
            n = skips(path.read_text(encoding="utf-8"))
            if n:
                counts[str(path.relative_to(root))] = n
    return counts


def test_fmt_skip_only_where_listed() -> None:
    counts = product_counts()
    limits = allowed()
    over = {path: (n, limits.get(path, 0)) for path, n in counts.items() if n > limits.get(path, 0)}
    assert not over, (
        "`# fmt: skip` beyond the listed (file: (found, allowed)); let ruff format lay the statement out, or list "
        f"a table laid out on purpose in tests/meta/test_fmt_skip.py: {over}"
    )
    # Exact, so that an entry is lowered when its skips go (a stale allowance would let them come back).
    assert counts == limits, f"lower the entries to what is found: {counts}"
    assert sum(limits.values()) == 13


def test_the_count_reads_comments_not_strings() -> None:
    src = 'x = [1,  2]  # fmt: skip\ny = "# fmt: skip"\nz = 3  # why  # fmt: skip\n'
    assert skips(src) == 2
