"""The installed distribution is safe in a shared environment (issue 15, item 9).

The stages stay top-level folders in the repository, but the wheel ships them under one import package,
`elo_per_token`. These tests build the real wheel, check nothing else reaches site-packages, and run the
installed tool next to foreign packages called `analysis`, `worker`, `contracts`, … to show neither side
shadows the other.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STAGES = (
    "analysis",
    "common",
    "contracts",
    "coordinator",
    "egress",
    "ept",
    "ledger",
    "simulator",
    "suites",
    "viewer",
    "worker",
)


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _source_packages() -> set[str]:
    """Every folder with an __init__.py under the stage folders, as its installed dotted name."""
    found = {"elo_per_token"}
    for stage in STAGES:
        for init in (REPO / stage).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO).parts
            found.add(".".join(("elo_per_token", *rel)))
    return found


def test_package_list_matches_the_folders():
    cfg = _pyproject()["tool"]["setuptools"]
    assert set(cfg["packages"]) == _source_packages(), "pyproject.toml [tool.setuptools] packages is stale"
    mapped = {k.removeprefix("elo_per_token.") for k in cfg["package-dir"] if k != "elo_per_token"}
    assert mapped == set(STAGES)
    assert all(
        v == k.removeprefix("elo_per_token.") for k, v in cfg["package-dir"].items() if k != "elo_per_token"
    )


def test_dockerfile_copies_every_mapped_folder():
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    copied = set(re.findall(r"^COPY (\S+) \1$", dockerfile, flags=re.M))
    assert set(_pyproject()["tool"]["setuptools"]["package-dir"].values()) <= copied


def _imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def test_no_code_imports_a_bare_stage_package():
    """`import analysis` would work in a checkout and break (or pick up a stranger's package) once installed."""
    bad = []
    for folder in (*STAGES, "elo_per_token", "tests", "testkit", "benchmarks", "docs"):
        for path in (REPO / folder).rglob("*.py"):
            bad += [
                f"{path.relative_to(REPO)}:{line}: {mod}"
                for line, mod in _imports_of(path)
                if mod.split(".")[0] in STAGES
            ]
    assert not bad, "imports outside elo_per_token:\n" + "\n".join(bad)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (whl,) = out.glob("elo_per_token-*.whl")
    return whl


def test_wheel_has_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"elo_per_token", next(t for t in tops if t.endswith(".dist-info"))}, tops
    # Data the tool reads at run time travels with it.
    for needed in (
        "elo_per_token/suites/data/math.jsonl",
        "elo_per_token/coordinator/demo_plan.toml",
        "elo_per_token/suites/public/humaneval_visible.json",
        "elo_per_token/worker/sandbox/harness.py",
    ):
        assert needed in names
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "ept = elo_per_token.ept.cli:main" in entry


def test_wheel_declares_its_license_as_an_spdx_expression(wheel):
    # `project.license` as a table is deprecated by setuptools (unsupported from February 2027); an SPDX string
    # needs setuptools >= 77, and the build requirement has an upper bound so a future major cannot break it.
    assert _pyproject()["project"]["license"] == "Apache-2.0"
    (req,) = _pyproject()["build-system"]["requires"]
    assert re.fullmatch(r"setuptools>=(\d+),<(\d+)", req) and int(req.split(">=")[1].split(",")[0]) >= 77, req
    meta = zipfile.ZipFile(wheel).read(
        next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("METADATA"))
    )
    assert b"License-Expression: Apache-2.0" in meta


_FOREIGN = "MARK = 'foreign'\n"

_PROBE = """
import sys
import analysis, common, worker, contracts, coordinator, suites, simulator, egress, ept, ledger  # the other project's packages
from elo_per_token.ept.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, f"ept exited {e.code}"
mods = {n: m for n, m in sys.modules.items() if n.split(".")[0] in
        ("analysis", "common", "worker", "contracts", "coordinator", "suites", "simulator", "egress", "ept", "ledger")}
assert all(getattr(sys.modules[n], "MARK", None) == "foreign" for n in
           ("analysis", "common", "worker", "contracts", "coordinator", "suites", "simulator", "egress", "ept", "ledger"))
assert set(mods) == {"analysis", "common", "worker", "contracts", "coordinator", "suites", "simulator", "egress", "ept", "ledger"}, \\
    sorted(mods)
ours = [m.__file__ for n, m in sys.modules.items() if n.startswith("elo_per_token") and getattr(m, "__file__", None)]
site = sys.argv[0] if False else __import__("os").environ["EPT_WHEEL_SITE"]
assert ours and all(f.startswith(site) for f in ours), [f for f in ours if not f.startswith(site)][:3]
print("PROBE-OK", len(ours))
"""


@pytest.mark.slow
def test_installed_wheel_runs_next_to_foreign_packages(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert sorted(
        p.name for p in site.iterdir() if not p.name.endswith(".dist-info") and p.name != "bin"
    ) == ["elo_per_token"]
    foreign = tmp_path / "other-project"
    for stage in STAGES:
        (foreign / stage).mkdir(parents=True)
        (foreign / stage / "__init__.py").write_text(_FOREIGN, encoding="utf-8")
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    # The other project comes first on the path, as if installed earlier; the checkout is nowhere on it.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(foreign), str(site)]),
        "EPT_WHEEL_SITE": str(site),
        "COLUMNS": "200",
    }
    p = subprocess.run(
        [sys.executable, str(probe), "demo", "--tasks-per-family", "1", "--out", str(work / "out")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    assert "PROBE-OK" in p.stdout
    assert (work / "out" / "report" / "arms.csv").is_file()


def test_polars_allocator_returns_freed_memory_sooner():
    """The package sets jemalloc's decay for polars before polars is imported (elo_per_token/__init__.py; the
    peak-RSS effect is measured in benchmarks/bench_scale.py), and never overrides a user's setting."""
    code = ("import os, sys, elo_per_token; assert 'polars' not in sys.modules; import polars; "
            "print(os.environ.get('_RJEM_MALLOC_CONF'))")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    # polars puts its own defaults in front when it loads; jemalloc applies the options in order, so ours,
    # last, are the ones in force.
    assert out.stdout.strip().endswith("dirty_decay_ms:250,muzzy_decay_ms:0")
    mine = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**env, "_RJEM_MALLOC_CONF": "narenas:2"})  # fmt: skip
    assert mine.stdout.strip().endswith("narenas:2") and "dirty_decay_ms:250" not in mine.stdout
    # A parent that imported polars (a benchmark, a driver script) passes polars' default on: not the user's.
    before = subprocess.run([sys.executable, "-c", "import os, polars; print(os.environ['_RJEM_MALLOC_CONF'])"],
                            capture_output=True, text=True, check=True, env=env).stdout.strip()  # fmt: skip
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**env, "_RJEM_MALLOC_CONF": before})  # fmt: skip
    assert before and child.stdout.strip().endswith("dirty_decay_ms:250,muzzy_decay_ms:0")


def test_wheel_ships_the_viewers_assets(wheel):
    """`ept view` serves every asset from the package (no CDN): they must be in the wheel."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"elo_per_token/viewer/static/view.js", "elo_per_token/viewer/static/view.css"} <= names
