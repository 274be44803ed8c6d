"""contracts/settings.py declares every `EPT_*` variable once; docs/configuration.md is generated from it.

- product code names no `EPT_*` variable the table lacks (and the table lists none the code never names);
- docs/configuration.md equals the generated text;
- `read` parses each declared type, treats blank as unset and names the variable on a bad value.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from bounds import bounded
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.contracts import settings as settings_mod
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.settings import BY_NAME, DOC, SETTINGS, markdown, read

ROOT = Path(__file__).resolve().parents[2]
VAR = re.compile(r"\bEPT_[A-Z0-9_]*[A-Z0-9]\b")


def product_folders() -> list[Path]:
    """The package root and every stage folder (pyproject.toml's package-dir)."""
    import tomllib

    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return [ROOT / folder for folder in sorted(set(mapping.values()))]


def mentioned(folders: list[Path], root: Path = ROOT) -> dict[str, str]:
    """Every EPT_* name in the .py files of `folders` -> the first file:line (relative to root) naming it."""
    out: dict[str, str] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                for name in VAR.findall(line):
                    out.setdefault(name, f"{path.relative_to(root)}:{n}")
    return out


def undeclared(found: dict[str, str]) -> list[str]:
    return [f"{where}: {name}" for name, where in sorted(found.items()) if name not in BY_NAME]


def test_every_variable_the_code_names_is_declared() -> None:
    found = mentioned(product_folders())
    assert len(found) >= 25  # the walk is not vacuous
    bad = undeclared(found)
    assert not bad, "declare these in contracts/settings.py (SETTINGS):\n" + "\n".join(bad)
    stale = sorted(set(BY_NAME) - set(found))
    assert not stale, f"declared but named by no product code: {stale}"


def test_the_check_fails_on_an_undeclared_variable(tmp_path: Path) -> None:
    """A made-up variable read in a product-like folder is reported with its file and line."""
    (tmp_path / "stage").mkdir()
    (tmp_path / "stage" / "m.py").write_text(
        'import os\n\nX = os.environ.get("EPT_MADE_UP_KNOB", "EPT_PROFILES")\n'
    )
    assert undeclared(mentioned([tmp_path / "stage"], root=tmp_path)) == ["stage/m.py:3: EPT_MADE_UP_KNOB"]


def test_each_name_is_declared_once_with_a_known_type() -> None:
    assert len(BY_NAME) == len(SETTINGS)
    for s in SETTINGS:
        assert s.type in {"str", "int", "float", "bool", "secret"}, s.name
        assert s.doc.endswith(".") and s.stage, s.name
        if s.default is not None and s.type != "bool":
            assert read(s.name, {s.name: str(s.default)}) == s.default, s.name


def test_the_configuration_doc_is_the_generated_table() -> None:
    assert DOC.read_text(encoding="utf-8") == markdown(), (
        "docs/configuration.md is stale: python -m elo_per_token.contracts.settings --write"
    )
    for s in SETTINGS:
        assert f"| `{s.name}` |" in DOC.read_text(encoding="utf-8")


def test_the_check_command_passes_on_the_committed_doc() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "elo_per_token.contracts.settings", "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0 and "up to date" in ok.stdout, ok.stdout + ok.stderr


def test_read_parses_types_and_blank_is_the_default() -> None:
    assert read("EPT_MATH_PROCS", {}) == 2
    assert read("EPT_MATH_PROCS", {"EPT_MATH_PROCS": "  "}) == 2
    assert read("EPT_MATH_PROCS", {"EPT_MATH_PROCS": "7"}) == 7
    assert read("EPT_MATH_TIMEOUT_S", {"EPT_MATH_TIMEOUT_S": "2.5"}) == 2.5
    assert read("EPT_VERIFY_JOBS", {"EPT_VERIFY_JOBS": "Yes"}) is True
    assert read("EPT_SANDBOX_CGROUP", {"EPT_SANDBOX_CGROUP": "0"}) is False
    with pytest.raises(InputError) as e:
        read("EPT_MATH_PROCS", {"EPT_MATH_PROCS": "two"})
    assert e.value.field == "EPT_MATH_PROCS" and "two" in str(e.value)
    with pytest.raises(KeyError):
        read("EPT_NOT_DECLARED", {})


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(BY_NAME)), raw=st.text(max_size=10_000))
def test_read_of_any_text_is_a_typed_value_or_an_error_naming_the_variable(name: str, raw: str) -> None:
    try:
        value = bounded(lambda: read(name, {name: raw}), time_s=1, memory_mb=16)
    except InputError as e:
        assert e.field == name and len(str(e)) < 400
        return
    kind = BY_NAME[name].type
    expected = {"int": int, "float": float, "bool": bool, "str": str, "secret": str}[kind]
    assert value is None or isinstance(value, expected) or value == BY_NAME[name].default


def test_is_set_read_str_and_read_bool() -> None:
    assert settings_mod.is_set("EPT_BROKER_URL", {}) is False  # a declared default is not "set"
    assert settings_mod.is_set("EPT_BROKER_URL", {"EPT_BROKER_URL": "  "}) is False
    assert settings_mod.is_set("EPT_BROKER_URL", {"EPT_BROKER_URL": "redis://h:1/0"}) is True
    assert settings_mod.read_str("EPT_GRADE_QUEUE", {}) is None
    assert settings_mod.read_str("EPT_GRADE_QUEUE", {"EPT_GRADE_QUEUE": " grade "}) == "grade"
    assert settings_mod.read_bool("EPT_SANDBOX_CGROUP", {}) is True
    assert settings_mod.read_bool("EPT_LEDGER_FSYNC", {"EPT_LEDGER_FSYNC": "off"}) is False
    with pytest.raises(InputError) as e:
        settings_mod.read_bool("EPT_LEDGER_FSYNC", {"EPT_LEDGER_FSYNC": "false-ish"})
    assert e.value.field == "EPT_LEDGER_FSYNC"
    with pytest.raises(TypeError):
        settings_mod.read_bool("EPT_MATH_PROCS", {})  # an int is not read as a bool
    with pytest.raises(KeyError):
        settings_mod.is_set("EPT_NOT_DECLARED", {})


def test_a_command_line_value_wins_for_one_command_and_touches_no_environment() -> None:
    """`ept --verify-jobs` gives EPT_VERIFY_JOBS for the command (what ledger.keyspace reads) without writing
    os.environ, and the value is gone when the command ends."""
    import os

    from elo_per_token.ledger.keyspace import verify_requested

    before = dict(os.environ)
    assert verify_requested() is False
    settings_mod.set_from_cli("EPT_VERIFY_JOBS", True)
    try:
        assert verify_requested() is True and settings_mod.read_bool("EPT_VERIFY_JOBS") is True
        assert settings_mod.read_bool("EPT_VERIFY_JOBS", {}) is False  # an explicit env is read as given
        assert dict(os.environ) == before
    finally:
        settings_mod.clear_cli()
    assert verify_requested() is False
    with pytest.raises(TypeError):
        settings_mod.set_from_cli("EPT_VERIFY_JOBS", "1")  # typed: the option gives a bool


def test_ept_verify_jobs_leaves_the_environment_and_later_commands_alone(tmp_path: Path) -> None:
    import os

    from cli_runner import run_ept

    from elo_per_token.ept.cli import main

    before = dict(os.environ)
    with pytest.raises(SystemExit) as e:
        main(["--verify-jobs", "version"])
    assert e.value.code in (0, None)
    assert dict(os.environ) == before and "EPT_VERIFY_JOBS" not in os.environ
    assert settings_mod._from_cli == {}  # cleared when the command ended
    assert run_ept("version", cwd=tmp_path).returncode == 0


@settings(max_examples=200, deadline=None)
@given(
    raw=st.text(max_size=10_000)
    | st.from_regex(r"-?[0-9]{1,12}(\.[0-9]{0,6})?(e-?[0-9]{1,3})?", fullmatch=True)
)
def test_read_seconds_is_in_range_or_an_error_naming_the_variable(raw: str) -> None:
    try:
        value = bounded(
            lambda: settings_mod.read_seconds("EPT_RUN_LEASE_TTL", 1, 86400, {"EPT_RUN_LEASE_TTL": raw}),
            time_s=1,
            memory_mb=16,
        )
    except InputError as e:
        assert e.field == "EPT_RUN_LEASE_TTL" and len(str(e)) < 400
        return
    assert 1 <= value <= 86400
