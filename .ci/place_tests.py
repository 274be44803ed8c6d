"""Tests are laid out by stage; this fails CI (exit 1, each offender named with where it belongs) when not.

- tests/<folder>/test_*.py only: a folder per stage (the folders pyproject.toml's package-dir maps under
  elo_per_token) plus tests/system/ (end-to-end across stages: faults, compose, a fresh machine, the README)
  and tests/meta/ (checks of the code itself: sizes, imports, environment reads, the CI lanes). No test file
  directly in tests/, none nested deeper, none in another folder.
- The helpers tests share (and benchmarks import) live in testkit/, never in tests/: tests/ holds test files,
  tests/conftest.py and the data folder tests/fixtures/ only; testkit/ holds no test file.
- No test file name twice: pytest's default import mode imports a test module by its file name.
- Helpers are imported by their bare module names (`from bounds import bounded`: testkit/ is on pytest's
  `pythonpath`), never as `tests.x`, which names a folder, not a package.

Usage: python3 .ci/place_tests.py [REPO]   (REPO defaults to the checkout this file is in)
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

EXTRA_FOLDERS = ("system", "meta")  # beyond one per stage
DATA_FOLDER = "fixtures"  # test data (files read by tests), not code
TESTS_IMPORT = re.compile(r"^\s*(?:from|import)\s+tests\.(\w+)", re.M)


def stage_folders(repo: Path) -> list[str]:
    """The stage folders: every folder pyproject.toml maps as a subpackage of elo_per_token."""
    config = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    mapped = config["tool"]["setuptools"]["package-dir"]
    return sorted(folder for name, folder in mapped.items() if name.startswith("elo_per_token."))


def problems(repo: Path) -> list[str]:
    """Every misplaced file under tests/ and testkit/, one line each, naming the file and the fix."""
    tests, allowed = repo / "tests", {*stage_folders(repo), *EXTRA_FOLDERS}
    out: list[str] = []
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(repo)
        parts = path.relative_to(tests).parts
        if parts[0] == DATA_FOLDER:
            continue
        if len(parts) == 1:
            if path.name != "conftest.py":
                where = "tests/<stage>/" if path.name.startswith("test_") else "testkit/ (shared helpers)"
                out.append(f"{rel}: directly in tests/; move it to {where} (`git mv`)")
            continue
        if not path.name.startswith("test_"):
            out.append(f"{rel}: not a test file; shared helpers live in testkit/ (`git mv {rel} testkit/`)")
        elif len(parts) > 2 or parts[0] not in allowed:
            out.append(
                f"{rel}: tests live in tests/<folder>/ with <folder> one of {', '.join(sorted(allowed))}"
            )
        by_name[path.name].append(str(rel))
        text = path.read_text(encoding="utf-8")
        for m in TESTS_IMPORT.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append(
                f"{rel}:{line}: imports tests.{m[1]}; import it by its bare name ({m[1]}, on pythonpath)"
            )
    for name, paths in sorted(by_name.items()):
        if len(paths) > 1:
            out.append(f"{name}: the same test file name in {', '.join(paths)}; rename all but one")
    kit = repo / "testkit"
    out += [
        f"{p.relative_to(repo)}: a test file in testkit/; move it to tests/<stage>/"
        for p in sorted(kit.glob("test_*.py"))
    ]
    return out


def main(argv: list[str]) -> int:
    repo = Path(argv[1]).resolve() if len(argv) > 1 else Path(__file__).resolve().parents[1]
    found = problems(repo)
    for line in found:
        print(f"place_tests: {line}", file=sys.stderr)
    if found:
        return 1
    counts = {
        p.name: len(list(p.glob("test_*.py"))) for p in sorted((repo / "tests").iterdir()) if p.is_dir()
    }
    layout = ", ".join(f"{name} {n}" for name, n in counts.items() if n)
    print(f"place_tests: every test file in its stage folder ({layout})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
