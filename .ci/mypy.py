#!/usr/bin/env python3
"""Type-check the import package `elo_per_token` with mypy (settings: [tool.mypy] in pyproject.toml).

The stage folders (analysis/, contracts/, …) sit at the top of the repository and become
`elo_per_token.<stage>` only through setuptools' package-dir (installed) or elo_per_token/__init__.py
extending `__path__` (a source checkout). mypy follows neither, and checking the folders under their own
names would not resolve the `elo_per_token.*` imports. So mypy runs on a view: .mypy_cache/view/elo_per_token/
holds symlinks to elo_per_token/*.py and to every folder named in [tool.setuptools.package-dir]. Errors are
printed with the repository's paths (`analysis/bt.py:12: …`).

Usage: python3 .ci/mypy.py [more mypy arguments]; exit status is mypy's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "elo_per_token"


def stage_dirs(pyproject: Path) -> dict[str, str]:
    """Subpackage name -> its folder in the repository, from [tool.setuptools.package-dir]."""
    mapping = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    prefix = PACKAGE + "."
    return {name[len(prefix) :]: folder for name, folder in mapping.items() if name.startswith(prefix)}


def build_view(root: Path) -> Path:
    """A fresh view of the package under root/.mypy_cache/view (rebuilt each run: cheap, never stale)."""
    view = root / ".mypy_cache" / "view"
    shutil.rmtree(view, ignore_errors=True)
    pkg = view / PACKAGE
    pkg.mkdir(parents=True)
    for f in (root / PACKAGE).glob("*.py"):
        (pkg / f.name).symlink_to(f)
    for sub, folder in stage_dirs(root / "pyproject.toml").items():
        (pkg / sub).symlink_to(root / folder, target_is_directory=True)
    return view


def repo_paths(text: str, dirs: dict[str, str]) -> str:
    """mypy's output with view paths turned into repository paths (elo_per_token/analysis/bt.py ->
    analysis/bt.py) at the start of each line, where mypy names the file."""
    folders = {f"{PACKAGE}/{sub}/": f"{folder}/" for sub, folder in dirs.items()}
    pattern = re.compile("^(" + "|".join(map(re.escape, folders)) + ")", re.M)
    return pattern.sub(lambda m: folders[m.group(1)], text)


def main(argv: list[str]) -> int:
    view = build_view(ROOT)
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(ROOT / ".mypy_cache"),
        "-p",
        PACKAGE,
        *argv,
    ]
    proc = subprocess.run(cmd, cwd=view, capture_output=True, text=True)
    sys.stdout.write(repo_paths(proc.stdout, stage_dirs(ROOT / "pyproject.toml")))
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
