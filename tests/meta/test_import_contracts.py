"""Every stage imports only the stages on its allow-list (docs/architecture.md, "Import allow-list").

Walks every `import` of the product folders with `ast` — including imports inside functions, which is where
cycles hide — and checks:
- no import cycle between modules;
- each stage imports only itself, the stages ALLOWED names for it, and the package root `elo_per_token`
  (its `__version__`); never `tests` or `benchmarks`.

The stages are read from pyproject.toml's [tool.setuptools.package-dir] (the one list of them); ALLOWED must
name each exactly once. A module is named by its dotted path under `elo_per_token` (`analysis.io.runs`); an
import of a package counts as an import of its `__init__`. Fast (parsing only, nothing is imported), so it
runs in the normal pytest run (the fast lane).
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "elo_per_token"


def stage_folders(root: Path = ROOT) -> tuple[str, ...]:
    """The stage folders, as pyproject.toml maps them under the package (setuptools' package-dir)."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return tuple(sorted(v for k, v in mapping["package-dir"].items() if k != PACKAGE))


STAGES = stage_folders()
# Folders of the repository no product module may import (test helpers belong to the tests).
NOT_PRODUCT = ("benchmarks", "tests", "testkit")
# Stage -> the other stages it may import: the design's data flow (coordinator -> queue -> worker -> ledger ->
# analysis) plus the CLI on top. docs/architecture.md shows the same table; tests check both agree.
ALLOWED: dict[str, frozenset[str]] = {
    # utilities that know no project data: atomic writes, backoff, TOML lines
    "common": frozenset(),
    # the schemas that cross stage boundaries
    "contracts": frozenset({"common"}),
    # storage over an ObjectStore; knows only the record schemas
    "ledger": frozenset({"common", "contracts"}),
    # the provider HTTP clients and profiles
    "egress": frozenset({"common", "contracts"}),
    # task data: built-in and public suites, their loaders (no worker, simulator or egress)
    "suites": frozenset({"common", "contracts"}),
    # the stand-in provider: answers the suites' tasks, so it reads them
    "simulator": frozenset({"common", "contracts", "suites"}),
    # runs one job: strategies, graders, sandbox; calls providers, writes the ledger
    "worker": frozenset({"common", "contracts", "egress", "ledger"}),
    # reads the ledger, computes every number
    "analysis": frozenset({"common", "contracts", "ledger"}),
    # the browser view over analysis' numbers
    "viewer": frozenset({"analysis", "common", "contracts", "ledger", "suites"}),
    # plans, sweeps, the demo, suite tools: drives workers (in process or over the queue), then analysis
    "coordinator": frozenset(
        {"analysis", "common", "contracts", "egress", "ledger", "simulator", "suites", "worker"}
    ),
    # the `ept` command: wires every stage's commands
    "ept": frozenset(set(STAGES) - {"ept"}),
}


def modules(root: Path = ROOT, stages: Iterable[str] = STAGES) -> dict[str, Path]:
    """Dotted module name (under the package) -> file, for every .py file of the stage folders present."""
    out: dict[str, Path] = {}
    for stage in stages:
        folder = root / stage
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The known module an absolute dotted name points at (longest known prefix), or None if outside."""
    if name.split(".")[0] in NOT_PRODUCT:
        return name.split(".")[0]
    if name.startswith(PACKAGE + "."):
        name = name[len(PACKAGE) + 1 :]
    elif name.split(".")[0] not in STAGES:
        return None
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every known module `module` imports anywhere in its file (top level, functions, TYPE_CHECKING)."""
    is_package = path.name == "__init__.py"
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                stem = ".".join([PACKAGE, *base, *([node.module] if node.module else [])])
            else:
                stem = node.module or ""
            # `from pkg import name` imports the submodule pkg.name when there is one, else pkg itself
            # (grimp's and import-linter's reading).
            for alias in node.names:
                sub = f"{stem}.{alias.name}"
                names.append(sub if _resolve(sub, known) == _strip(sub) else stem)
        for name in names:
            target = _resolve(name, known)
            if target is not None and target != module:
                found.add(target)
    return found


def _strip(name: str) -> str:
    return name[len(PACKAGE) + 1 :] if name.startswith(PACKAGE + ".") else name


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the known modules it imports."""
    known = modules(root)
    return {module: imports_of(module, path, known) for module, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        # iterative Tarjan: (node, iterator over its successors)
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def violations(graph: dict[str, set[str]]) -> list[str]:
    """`a -> b` for every import of a stage (or of tests/benchmarks) that a's stage is not allowed."""
    bad = []
    for module, targets in sorted(graph.items()):
        stage = module.split(".")[0]
        may = ALLOWED.get(stage, frozenset()) | {stage}
        bad += [f"{module} -> {t}" for t in sorted(targets) if t.split(".")[0] not in may]
    return bad


GRAPH = import_graph()


def test_the_walk_sees_every_stage_and_function_level_imports() -> None:
    """The walk is not vacuous: it found the stages and an import that sits inside a function."""
    assert {m.split(".")[0] for m in GRAPH} >= {"analysis", "contracts", "coordinator", "egress", "worker"}
    assert sum(len(t) for t in GRAPH.values()) > 200
    # coordinator/local.py imports the worker only inside run_local's helper: the walk sees it.
    assert "worker.lifecycle" in GRAPH["coordinator.local"]


def test_no_import_cycle() -> None:
    found = cycles(GRAPH)
    assert not found, (
        "import cycles (break them: pass the dependency in, or move the shared part down):\n"
        + "\n".join(" <-> ".join(c) for c in found)
    )


def test_the_allow_list_names_every_stage_once() -> None:
    assert set(ALLOWED) == set(STAGES), sorted(set(ALLOWED) ^ set(STAGES))
    for stage, may in ALLOWED.items():
        assert stage not in may and may <= set(STAGES), stage


@pytest.mark.parametrize("stage", STAGES)
def test_stage_imports_only_what_its_allow_list_names(stage: str) -> None:
    bad = [e for e in violations(GRAPH) if e.split(".")[0] == stage]
    assert not bad, (
        f"{stage}/ imports what ALLOWED[{stage!r}] does not name (move the code, or pass the dependency in):\n"
        + "\n".join(bad)
    )


def _tree(root: Path) -> None:
    """An empty package folder for every stage, each with one clean module importing what it may."""
    for stage in STAGES:
        (root / stage).mkdir()
        (root / stage / "__init__.py").write_text("")
        lines = [f"from elo_per_token.{other} import mod as {other}_mod" for other in sorted(ALLOWED[stage])]
        (root / stage / "mod.py").write_text("\n".join(["import elo_per_token", *lines, ""]))


def _forbidden_target(stage: str) -> str:
    """A module `stage` must not import: the first stage not on its list, else (the CLI) a test helper."""
    others = [s for s in STAGES if s != stage and s not in ALLOWED[stage]]
    return f"elo_per_token.{others[0]}.mod" if others else "testkit.bounds"


@pytest.mark.parametrize("stage", STAGES)
def test_an_injected_forbidden_import_is_found_in_each_stage(tmp_path: Path, stage: str) -> None:
    """The allow-list check is not vacuous for any stage: a clean tree passes, and one forbidden import,
    hidden inside a function, fails it and is named."""
    _tree(tmp_path)
    assert violations(import_graph(tmp_path)) == []
    target = _forbidden_target(stage)
    (tmp_path / stage / "sneaky.py").write_text(f"def f():\n    import {target}\n")
    found = violations(import_graph(tmp_path))
    named = target.removeprefix("elo_per_token.") if target.startswith("elo_per_token.") else "testkit"
    assert found == [f"{stage}.sneaky -> {named}"]


def test_the_cycle_check_can_fail(tmp_path: Path) -> None:
    """A cycle made of function-level and relative imports, and a contracts -> worker import, are found."""
    (tmp_path / "contracts").mkdir()
    (tmp_path / "worker").mkdir()
    (tmp_path / "contracts" / "__init__.py").write_text("")
    (tmp_path / "worker" / "__init__.py").write_text("")
    (tmp_path / "contracts" / "a.py").write_text("def f():\n    from elo_per_token.worker import b\n")
    (tmp_path / "worker" / "b.py").write_text("from . import c\n")
    (tmp_path / "worker" / "c.py").write_text("def g():\n    import elo_per_token.contracts.a\n")
    graph = import_graph(tmp_path)
    assert graph["contracts.a"] == {"worker.b"}
    assert graph["worker.b"] == {"worker.c"}
    assert ["contracts.a", "worker.b", "worker.c"] in cycles(graph)
    assert "contracts.a -> worker.b" in violations(graph)


def _doc_table() -> dict[str, frozenset[str]]:
    """The allow-list table of docs/architecture.md: `| stage | may import |` rows."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Import allow-list", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] in STAGES:
            out[cells[0]] = frozenset(c.strip().strip("`") for c in cells[1].split(",") if c.strip("` —-"))
    return out


def test_the_architecture_doc_shows_the_same_allow_list() -> None:
    assert _doc_table() == ALLOWED
