"""Every typer option and argument of the CLIs is declared in `Annotated` form (`x: Annotated[int | None,
typer.Option("--x")] = None`), so the annotation carries the precise type (a `None` default is spelled
`T | None`) and the default is a plain Python default that mypy checks against it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _is_typer_param(node: ast.expr | None) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "typer"
        and node.func.attr in ("Option", "Argument")
    )


def old_style_params(path: Path) -> list[str]:
    """`name:line` of every parameter of `path` whose default is a `typer.Option(...)`/`typer.Argument(...)`
    call, and of every `Annotated[T, typer.Option(...)] = None` whose T does not admit None."""
    out = []
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = fn.args
        pos = a.posonlyargs + a.args
        pairs = list(zip(pos[len(pos) - len(a.defaults) :], a.defaults, strict=True))
        pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
        for arg, default in pairs:
            if _is_typer_param(default):
                out.append(f"{arg.arg}:{arg.lineno} (typer call as the default)")
            ann = arg.annotation
            if (
                isinstance(default, ast.Constant)
                and default.value is None
                and isinstance(ann, ast.Subscript)
                and isinstance(ann.slice, ast.Tuple)
                and _is_typer_param(ann.slice.elts[-1])
                and "None" not in ast.unparse(ann.slice.elts[0])
            ):
                out.append(f"{arg.arg}:{arg.lineno} (None default, type without None)")
    return out


def cli_files() -> list[Path]:
    """The product modules that use typer: the stage folders pyproject maps into the package (never a build/
    or venv copy of them)."""
    import tomllib

    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    stages = {Path(d).parts[0] for d in dirs}
    return [
        p
        for p in sorted(ROOT.glob("*/**/*.py"))
        if p.parts[len(ROOT.parts)] in stages and "typer" in p.read_text(encoding="utf-8")
    ]


def test_every_cli_parameter_is_annotated() -> None:
    files = cli_files()
    assert len(files) >= 8, files  # the walk finds the stage CLIs
    bad = {str(p.relative_to(ROOT)): found for p in files if (found := old_style_params(p))}
    assert not bad, f"declare these with Annotated[T, typer.Option(...)] = default: {bad}"


def test_the_check_finds_old_style_and_untyped_none(tmp_path: Path) -> None:
    src = (
        "import typer\nfrom typing import Annotated\n\n"
        "def cmd(a: str = typer.Option(None, '--a'),\n"
        "        b: Annotated[int, typer.Option('--b')] = None,\n"
        "        c: Annotated[int | None, typer.Option('--c')] = None,\n"
        "        d: Annotated[str, typer.Argument()] = 'x') -> None: ...\n"
    )
    (tmp_path / "m.py").write_text(src)
    assert old_style_params(tmp_path / "m.py") == [
        "a:4 (typer call as the default)",
        "b:5 (None default, type without None)",
    ]
