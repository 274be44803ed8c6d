"""Loading task suites: a JSONL or Parquet file, or a built-in suite by name (generated ones in suites/data,
public benchmarks read from their packages). Every task is checked against the schema of contracts/tasks.py.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.tasks import Task, validate_task


def load_suite(path: str | Path) -> list[Task]:
    """Read and validate a JSONL (or Parquet) suite; the whole file is checked before anything is returned."""
    p = Path(path)
    file = str(path)
    if not p.is_file():
        raise InputError("no such suite file", file=file)
    if p.suffix == ".parquet":
        from elo_per_token.suites.userfile import load_parquet_suite

        return load_parquet_suite(p)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    with p.open("rb") as fh:
        for lineno, raw_bytes in enumerate(fh, start=1):
            try:
                raw = raw_bytes.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"not valid UTF-8 (byte {e.start + 1})", file=file, line=lineno) from None
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError as e:
                raise InputError(
                    f"not valid JSON ({e.msg} at column {e.colno})", file=file, line=lineno
                ) from None
            except RecursionError:
                raise InputError("not valid here: JSON nested too deeply", file=file, line=lineno) from None
            validate_task(rec, file, lineno)
            if rec["task_id"] in seen:
                raise InputError(
                    f"duplicate task_id (first on line {seen[rec['task_id']]})", file, lineno, "task_id"
                )
            seen[rec["task_id"]] = lineno
            tasks.append(rec)
    if not tasks:
        raise InputError("suite has no tasks", file=file)
    return tasks


def _builtin_dir() -> Path:
    spec = importlib.util.find_spec("elo_per_token.suites")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the built-in suites package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def builtin_suite_names() -> list[str]:
    """Generated suites (suites/data/*.jsonl) and the public-benchmark suites whose package is installed."""
    from elo_per_token.suites.public import available

    return sorted({p.stem for p in _builtin_dir().glob("*.jsonl")} | set(available()))


def builtin_suite_path(name: str) -> Path:
    names = builtin_suite_names()
    if name not in names:
        raise InputError(f"unknown built-in suite '{name}' (known: {', '.join(names)})", field="suite")
    path = _builtin_dir() / f"{name}.jsonl"
    if not path.is_file():
        from elo_per_token.suites.public import source_path

        return source_path(name)
    return path


def load_builtin_suite(name: str) -> list[Task]:
    path = builtin_suite_path(name)
    if path != _builtin_dir() / f"{name}.jsonl":  # a public-benchmark suite, read from its package
        from elo_per_token.suites.public import load

        return load(name)
    return load_suite(path)


def load_suite_ref(ref: str) -> list[Task]:
    """A suite by built-in name or by file path. A name that is neither says what is known and the nearest
    one; a public suite whose package is missing says how to install it."""
    if not ref.endswith((".jsonl", ".parquet")) and ref in builtin_suite_names():
        return load_builtin_suite(ref)
    if not ref.endswith((".jsonl", ".parquet")) and "/" not in ref and not Path(ref).exists():
        raise unknown_suite(ref)
    return load_suite(ref)


def unknown_suite(ref: str) -> InputError:
    """The error for a suite name that is not built in: install hint, or the known names and the nearest."""
    import difflib

    from elo_per_token.suites.public import INSTALL, PUBLIC_SUITES, not_installed

    if ref in PUBLIC_SUITES and ref in not_installed():
        return InputError(
            f"suite {ref!r} reads a public benchmark whose package is not installed: "
            f"{INSTALL.get(ref, 'install its package')}",
            field="suites",
        )
    known = sorted({*builtin_suite_names(), *PUBLIC_SUITES})
    near = difflib.get_close_matches(ref, known, n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return InputError(
        f"unknown suite {ref!r}: not a built-in suite nor a file (built-in: {', '.join(known)}; "
        f"or a .jsonl/.parquet path){hint}",
        field="suites",
    )
