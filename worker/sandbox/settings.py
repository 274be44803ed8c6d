"""The code sandbox's settings, read once at the worker's edge and handed to the sandbox as one value.

`ept worker` (and the Celery app built for `celery -A ... worker`) reads them when the process starts and
installs them with `configure`; the sandbox (budget.py, bwrap.py) asks `current()`. A process that never
configured them (a local sweep, a test) reads the environment when asked, as before: the same variables,
the same defaults (contracts/settings.py declares them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from elo_per_token.contracts.settings import Value, read, read_bool, read_int, read_str


@dataclass(frozen=True)
class SandboxSettings:
    """EPT_SANDBOX_MEMORY_MB, _CONCURRENCY, _CGROUP, _PYTHON, _UID_BASE and EPT_BWRAP, as values."""

    memory_mb: int = 2048  # shared by all running sandboxes of this worker (the cgroup's limit)
    concurrency: int = 4  # sandboxes run at once; at least 1
    cgroup: bool = True  # False: per-process limits only
    python: str | None = None  # the interpreter inside the sandbox; None: this one
    bwrap: str = ""  # a path, "PATH" (the one on PATH), or "": the bundled one, else PATH
    uid_base: int | None = None  # first uid a root worker gives its sandboxes; None: from the namespace's map

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SandboxSettings:
        """The settings from `env` (default: the process environment); a bad value is an InputError naming it."""
        return cls(
            memory_mb=read_int("EPT_SANDBOX_MEMORY_MB", env),
            concurrency=max(1, read_int("EPT_SANDBOX_CONCURRENCY", env)),
            cgroup=read_bool("EPT_SANDBOX_CGROUP", env),
            python=read_str("EPT_SANDBOX_PYTHON", env),
            bwrap=read_str("EPT_BWRAP", env) or "",
            uid_base=_optional_int(read("EPT_SANDBOX_UID_BASE", env)),
        )


def _optional_int(value: Value) -> int | None:
    # EPT_SANDBOX_UID_BASE is declared an int with no default: read parsed it (or raised naming it), or unset.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_configured: SandboxSettings | None = None


def configure(settings: SandboxSettings | None) -> None:
    """Install the settings this process's sandboxes use (None: read the environment when asked). Called at
    the worker's start, before the first sandbox, so the cached cgroup, slots and interpreter follow it."""
    global _configured
    _configured = settings


def current() -> SandboxSettings:
    """The configured settings, else the environment's now (a process that configured none)."""
    return _configured if _configured is not None else SandboxSettings.from_env()
