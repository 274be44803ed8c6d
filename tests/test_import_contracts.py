"""The stages import one way (the design's data flow: coordinator -> queue -> worker -> ledger -> analysis).

Walks every `import` of the product folders with `ast` — including imports inside functions, which is where
cycles hide — and checks:
- no import cycle between modules;
- contracts (the shared schema, not a stage) import no stage;
- analysis imports no coordinator, worker or egress;
- the simulator imports no egress or worker;
- egress imports no stage;
- the ledger (storage) imports no stage but contracts.

A module is named by its dotted path under `elo_per_token` (`analysis.io.runs`); an import of a package counts
as an import of its `__init__`. Fast (parsing only, nothing is imported), so it runs in the normal pytest run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "elo_per_token"
# Folders of the checkout that are stages (or the CLI / viewer on top of them).
STAGES = (
    "analysis",
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
# Stage -> stages it must never import. contracts is the shared schema: everyone may import it.
FORBIDDEN: dict[str, set[str]] = {
    "contracts": set(STAGES) - {"contracts"},
    "analysis": {"coordinator", "worker", "egress"},
    "simulator": {"egress", "worker"},
    "egress": set(STAGES) - {"egress", "contracts"},
    # storage: the coordinator, the worker and analysis use it; it knows only the shared schema.
    "ledger": set(STAGES) - {"ledger", "contracts"},
}

# Modules exempt from the checks: none (the storage layer is one `ledger/` stage).
STORAGE_CYCLE_ALLOWED: frozenset[str] = frozenset()


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


def forbidden_edges(graph: dict[str, set[str]]) -> list[str]:
    """`a -> b` for every import that breaks a stage rule in FORBIDDEN."""
    bad = []
    for module, targets in sorted(graph.items()):
        rule = FORBIDDEN.get(module.split(".")[0], set())
        for target in sorted(targets):
            if target.split(".")[0] in rule:
                bad.append(f"{module} -> {target}")
    return bad


def _allowed(edge_or_module: str) -> bool:
    return any(part in STORAGE_CYCLE_ALLOWED for part in edge_or_module.split(" -> "))


GRAPH = import_graph()


def test_the_walk_sees_every_stage_and_function_level_imports() -> None:
    """The walk is not vacuous: it found the stages and an import that sits inside a function."""
    assert {m.split(".")[0] for m in GRAPH} >= {"analysis", "contracts", "coordinator", "egress", "worker"}
    assert sum(len(t) for t in GRAPH.values()) > 200
    # coordinator/local.py imports the worker only inside run_local's helper: the walk sees it.
    assert "worker.lifecycle" in GRAPH["coordinator.local"]


def test_no_import_cycle() -> None:
    # The storage modules are left out of the graph while STORAGE_CYCLE_ALLOWED stands: their own cycle is
    # the other branch's; any other cycle is found.
    graph = {m: t - STORAGE_CYCLE_ALLOWED for m, t in GRAPH.items() if m not in STORAGE_CYCLE_ALLOWED}
    found = cycles(graph)
    assert not found, (
        "import cycles (break them: pass the dependency in, or move the shared part down):\n"
        + "\n".join(" <-> ".join(c) for c in found)
    )


@pytest.mark.parametrize("stage", sorted(FORBIDDEN))
def test_stage_imports_only_downstream(stage: str) -> None:
    bad = [e for e in forbidden_edges(GRAPH) if e.split(".")[0] == stage and not _allowed(e)]
    assert not bad, f"{stage}/ imports a stage it must not:\n" + "\n".join(bad)


def test_the_checks_can_fail(tmp_path: Path) -> None:
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
    assert "contracts.a -> worker.b" in forbidden_edges(graph)
