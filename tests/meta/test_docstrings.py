"""Public functions of the stages other tools call (contracts/, ledger/, analysis/) document their parameters
in a Google-style `Args:` section. Public: no leading underscore, module level or a method of a public
class; with at least one parameter besides self/cls.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("contracts", "ledger", "analysis")
# Implementations of a documented protocol: a method the protocol documents (same name) is not asked to repeat
# its Args (they mean the same).
IMPLEMENTS = {
    "ledger/local.py::LocalStore": "ledger/objects.py::ObjectStore",
    "ledger/s3.py::S3Store": "ledger/objects.py::ObjectStore",
}


def public_functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualname, node) of the module's public functions and the public methods of its public classes."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
            out.append((node.name, node))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            out += [
                (f"{node.name}.{m.name}", m)
                for m in node.body
                if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and not m.name.startswith("_")
            ]
    return out


def _has_parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    a = fn.args
    named = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
    return bool(named or a.vararg or a.kwarg)


def _is_cli_command(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A typer command: its options carry their own help (`--help`), and its docstring is the command's help
    text, where an Args: section would be printed."""
    a = fn.args
    annotations = [ast.unparse(x.annotation) for x in a.posonlyargs + a.args + a.kwonlyargs if x.annotation]
    return any("typer.Option(" in t or "typer.Argument(" in t for t in annotations)


def _missing(root: Path, stages: tuple[str, ...]) -> set[str]:
    out = set()
    for stage in stages:
        for path in sorted((root / stage).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for qualname, fn in public_functions(tree):
                doc = ast.get_docstring(fn) or ""
                if _has_parameters(fn) and not _is_cli_command(fn) and "\nArgs:\n" not in f"\n{doc}":
                    out.add(f"{path.relative_to(root)}::{qualname}")
    return out


def undocumented(root: Path, stages: tuple[str, ...] = STAGES) -> set[str]:
    """`file::qualname` of each public function with parameters whose docstring has no `Args:` section (a
    method of an IMPLEMENTS class is covered by its protocol's documented method of the same name)."""
    out = _missing(root, stages)

    def covered(name: str) -> bool:
        cls, _, method = name.rpartition(".")
        proto = IMPLEMENTS.get(cls)
        if proto is None or not (root / proto.split("::")[0]).is_file():
            return False
        proto_file, proto_cls = proto.split("::")
        tree = ast.parse((root / proto_file).read_text(encoding="utf-8"))
        return any(q == f"{proto_cls}.{method}" for q, _ in public_functions(tree)) and (
            f"{proto}.{method}" not in out
        )

    return {name for name in out if not covered(name)}


def test_public_functions_have_args_sections() -> None:
    missing = sorted(undocumented(ROOT))
    assert not missing, "add an `Args:` section (Google style) to the docstring of:\n" + "\n".join(missing)


def test_the_check_reads_sections(tmp_path: Path) -> None:
    """A function, a method and a nested Args mention are told apart; private ones and ones without
    parameters are not asked for a section."""
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "m.py").write_text(
        "def documented(x):\n"
        '    """Do.\n\n    Args:\n        x: a thing.\n    """\n\n\n'
        "def bare(x):\n"
        '    """Do with `Args:` only mentioned."""\n\n\n'
        "def no_params():\n    pass\n\n\n"
        "def cmd(x: Annotated[int, typer.Option('--x', help='the x')] = 1):\n    pass\n\n\n"
        "def _private(x):\n    pass\n\n\n"
        "class K:\n"
        "    def method(self, y):\n        pass\n\n"
        "    def prop(self):\n        pass\n"
    )
    assert undocumented(tmp_path, ("contracts",)) == {"contracts/m.py::bare", "contracts/m.py::K.method"}


def test_implementations_are_covered_by_their_protocol() -> None:
    """LocalStore.get is covered by ObjectStore.get's Args; a method the protocol lacks is not."""
    found = undocumented(ROOT, ("ledger",))
    assert "ledger/local.py::LocalStore.get" not in found
    assert "ledger/local.py::LocalStore.get" in _missing(ROOT, ("ledger",))
