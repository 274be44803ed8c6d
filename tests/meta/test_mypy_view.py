"""`.ci/mypy.py` type-checks the package through a view where each stage folder is its subpackage. These
checks keep the view in step with pyproject.toml's package-dir (mypy itself runs in .ci/run, not here)."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("ci_mypy", ROOT / ".ci" / "mypy.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_view_maps_every_stage_folder_to_its_subpackage():
    tool = _tool()
    view = tool.build_view(ROOT)
    pkg = view / "elo_per_token"
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    stages = {k.split(".", 1)[1]: v for k, v in mapping.items() if k.startswith("elo_per_token.")}
    assert set(stages) >= {
        "analysis",
        "contracts",
        "coordinator",
        "egress",
        "ept",
        "simulator",
        "suites",
        "worker",
    }
    for sub, folder in stages.items():
        assert (pkg / sub).resolve() == (ROOT / folder).resolve(), sub
        assert (pkg / sub / "__init__.py").is_file(), sub
    assert (pkg / "__init__.py").resolve() == (ROOT / "elo_per_token" / "__init__.py").resolve()
    # nested packages come with their folder (analysis/io/, worker/sandbox/ …)
    assert (pkg / "analysis" / "io" / "__init__.py").is_file()


def test_errors_name_the_repository_files():
    tool = _tool()
    out = (
        "elo_per_token/analysis/bt.py:12: error: Returning Any  [no-any-return]\n"
        "elo_per_token/__init__.py:3: error: x  [misc]\n"
        "Found 2 errors in 2 files (checked 103 source files)\n"
    )
    got = tool.repo_paths(out, {"analysis": "analysis", "worker": "worker"})
    assert got.splitlines()[0].startswith("analysis/bt.py:12: error")
    assert got.splitlines()[1].startswith("elo_per_token/__init__.py:3")  # the real folder already
    assert got.splitlines()[2] == "Found 2 errors in 2 files (checked 103 source files)"
