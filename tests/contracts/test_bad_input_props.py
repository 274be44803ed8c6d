"""Bad input, property-based: every input either parses or fails with a clear error naming file/line/field,
exit code 2 — never a traceback, a hang or a half-written output.

The generators start from VALID inputs (the hand-computed fixture run, a working plan, a working profile file,
a working suite) and corrupt exactly one place: a field set to a value of a random type, a field dropped, a
line replaced by junk text or bytes. Because everything else stays valid, an error must point at that place.
The CLI runs in-process (elo_per_token.ept.cli.main) so 50-100 examples per property stay cheap.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import signal
import textwrap
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "table3x2"
SETTINGS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
HANG_S = 30


class Hang(Exception):
    pass


def run_cli(argv: list[str]) -> tuple[int, str]:
    """Run `ept ARGV` in this process; returns (exit code, stdout+stderr). A hang past HANG_S fails the test."""
    import elo_per_token.ept.cli as ept_cli

    # main() registers every stage's commands on each call; in one process, register once and reuse the app
    # (otherwise each call adds another copy of every command and the runs slow down quadratically).
    if not getattr(run_cli, "registered", False):
        ept_cli._register()
        run_cli.registered = True  # type: ignore[attr-defined]
    buf_out, buf_err = io.StringIO(), io.StringIO()

    def _alarm(_s: int, _f: Any) -> None:
        raise Hang(f"ept {' '.join(argv)} ran longer than {HANG_S}s")

    prev = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    code: int | None = 0
    try:
        with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
            try:
                with mock.patch.object(ept_cli, "_register", lambda: None):
                    ept_cli.main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, prev)
    return int(code or 0), buf_out.getvalue() + buf_err.getvalue()


def assert_clean_error(code: int, text: str) -> None:
    assert code in (0, 2), f"exit {code}:\n{text[-3000:]}"
    assert "Traceback" not in text, text[-3000:]
    if code == 2:
        assert "error" in text.lower(), text[-2000:]


# ---- values of every JSON type, to put where a field should be ----------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip
junk_lines = st.one_of(
    st.text(max_size=40).filter(lambda s: "\n" not in s and "\r" not in s),
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" ")),
    st.sampled_from(["{", "[]", "null", '"x"', "1", '{"task_id": }', "{'a': 1}", "\x00\x01", "NaN"]),
)


def _mutate_record(rec: dict[str, Any], data: st.DataObject) -> tuple[dict[str, Any], str]:
    """Set or drop one (possibly nested) field of a record; returns the new record and the field's path."""
    rec = json.loads(json.dumps(rec))
    paths = (
        [k for k in rec if k != "usage"]
        + [f"usage.{k}" for k in rec.get("usage", {})]
        + ["usage", "kind", "extra"]
    )
    path = data.draw(st.sampled_from(paths), label="field")
    drop = data.draw(st.booleans(), label="drop")
    parent, key = (rec["usage"], path.split(".")[1]) if path.startswith("usage.") else (rec, path)
    if drop:
        parent.pop(key, None)
    else:
        parent[key] = data.draw(json_values, label="value")
    return rec, path


def _write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(x + b"\n" for x in lines))


def _mutated_log(tmp: Path, name: str, data: st.DataObject) -> tuple[Path, int, str | None]:
    """A copy of a fixture log with one line replaced: (file, 1-based line, field or None for junk)."""
    src = (FIXTURE / name).read_bytes().splitlines()
    i = data.draw(st.integers(0, len(src) - 1), label="line")
    if data.draw(st.booleans(), label="junk"):
        bad = data.draw(junk_lines, label="junk line")
        raw = bad if isinstance(bad, bytes) else bad.encode("utf-8", "surrogatepass")
        fieldname = None
    else:
        rec, fieldname = _mutate_record(json.loads(src[i]), data)
        raw = json.dumps(rec).encode()
    lines = list(src)
    lines[i] = raw
    out = tmp / name
    _write_lines(out, lines)
    return out, i + 1, fieldname


def _check_named(text: str, file: Path, line: int) -> None:
    """A line-level error names this file and line (and, from the reader, usually a field)."""
    flat = re.sub(r"\s+", "", text)  # rich wraps long paths across lines
    assert f"{file}:{line}".replace(" ", "") in flat, f"expected {file}:{line} in:\n{text}"


# ---- call logs, outcome records, judgments through `ept analyze` ----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("which", ["calls.jsonl", "outcomes.jsonl"])
@SETTINGS
@given(data=st.data())
def test_analyze_on_one_corrupted_line_parses_or_names_file_line_field(tmp_path_factory, which, data):
    tmp = tmp_path_factory.mktemp("bad")
    bad, line, fieldname = _mutated_log(tmp, which, data)
    other = FIXTURE / ("outcomes.jsonl" if which == "calls.jsonl" else "calls.jsonl")
    out_dir = tmp / "out"
    code, text = run_cli(
        ["analyze", str(bad), str(other), "--rounds", "0", "--no-plots", "--out", str(out_dir)]
    )
    assert_clean_error(code, text)
    if code == 2:
        # Nothing half-written: the error comes before any output file.
        assert not out_dir.exists() or not any(out_dir.iterdir()), sorted(out_dir.iterdir())
        if re.search(rf"{re.escape(bad.name)}:\d+", re.sub(r"\s+", "", text)):
            _check_named(text, bad, line)
            if fieldname is not None and "JSON" not in text:
                assert "field" in text, text
    else:
        assert {"report.md", "arms.csv", "report.json"} <= {p.name for p in out_dir.iterdir()}


JUDGMENT = {"task_id": "math-001", "arm_a": "greedy@1", "arm_b": "best_of_n@4", "winner": "B"}


def _judgments() -> list[dict[str, Any]]:
    """Judgments between the fixture's arms on the fixture's tasks (the arms must exist in the call log)."""
    arms = ["greedy@1", "best_of_n@4", "best_of_n@16"]
    tasks = ["code-001", "code-002", "math-001", "math-002"]
    return [
        {**JUDGMENT, "task_id": t, "arm_a": arms[i % 3], "arm_b": arms[(i + 1) % 3], "winner": "AB"[i % 2]}
        for i, t in enumerate(tasks * 2)
    ]


@pytest.mark.slow
@SETTINGS
@given(data=st.data())
def test_judgment_files_parse_or_name_file_line_field(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("judg")
    recs = _judgments()
    i = data.draw(st.integers(0, len(recs) - 1), label="line")
    paths = [*list(JUDGMENT), "strategy_a", "budget_a", "kind"]
    fieldname = data.draw(st.sampled_from(paths), label="field")
    if data.draw(st.booleans(), label="drop"):
        recs[i].pop(fieldname, None)
    else:
        recs[i][fieldname] = data.draw(json_values, label="value")
    f = tmp / "judgments.jsonl"
    _write_lines(f, [json.dumps(r).encode() for r in recs])
    out_dir = tmp / "out"
    argv = [
        "analyze",
        str(FIXTURE / "calls.jsonl"),
        str(f),
        "--rounds",
        "0",
        "--no-plots",
        "--out",
        str(out_dir),
    ]
    code, text = run_cli(argv)
    assert_clean_error(code, text)
    if code == 2:
        assert not out_dir.exists() or not any(out_dir.iterdir())
        if re.search(rf"{re.escape(f.name)}:\d+", re.sub(r"\s+", "", text)):
            _check_named(text, f, i + 1)


# ---- plan files through `ept status PLAN.toml` (loads and validates the plan, runs nothing) --------------------

PLAN = {
    "name": "props",
    "profile": "simulator",
    "suites": ["math"],
    "tasks_per_family": 3,
    "seed": 7,
    "replicates": 1,
    "executor": "local",
    "concurrency": 2,
    "batch_size": 10,
    "bootstrap_rounds": 0,
}
ARMS = [{"strategy": "greedy", "budgets": [1]}, {"strategy": "majority", "budgets": [2, 4]}]


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v) if not isinstance(v, float) or v == v else "nan"
    if isinstance(v, str):
        return json.dumps(v)  # JSON string escapes are valid TOML basic-string escapes for these
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


toml_values = st.recursive(
    st.one_of(st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False), st.text(max_size=10)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(min_size=1, max_size=5), inner, max_size=2),
    max_leaves=5,
)  # fmt: skip


def _plan_text(top: dict[str, Any], arms: list[dict[str, Any]]) -> str:
    body = "".join(f"{k} = {_toml_value(v)}\n" for k, v in top.items() if v is not None)
    for a in arms:
        body += "\n[[arms]]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in a.items() if v is not None)
    return body


@SETTINGS
@given(data=st.data())
def test_plan_files_parse_or_name_file_and_field(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("plan")
    top, arms = dict(PLAN), [dict(a) for a in ARMS]
    mode = data.draw(st.sampled_from(["top", "arm", "junk"]), label="mode")
    fieldname: str | None = None
    if mode == "top":
        fieldname = data.draw(
            st.sampled_from([*PLAN, "weights", "ledger", "anchor", "unknown_field"]), label="field"
        )
        top[fieldname] = (
            None if data.draw(st.booleans(), label="drop") else data.draw(toml_values, label="value")
        )
        text = _plan_text(top, arms)
    elif mode == "arm":
        fieldname = data.draw(st.sampled_from(["strategy", "budgets", "params", "other"]), label="field")
        arms[1][fieldname] = (
            None if data.draw(st.booleans(), label="drop") else data.draw(toml_values, label="value")
        )
        text = _plan_text(top, arms)
    else:
        lines = _plan_text(top, arms).splitlines()
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        lines[i] = data.draw(junk_lines.filter(lambda x: isinstance(x, str)), label="junk")
        text = "\n".join(lines) + "\n"
    f = tmp / "plan.toml"
    f.write_text(text, encoding="utf-8")
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.plan import load_plan

    try:
        plan = load_plan(f)
    except InputError as e:
        assert e.file == str(f), str(e)
        # Junk text is a TOML error with a line; a bad value names its field.
        assert e.field or e.line, str(e)
        if fieldname and mode != "junk" and "TOML" not in e.message:
            assert e.field, str(e)
        # The CLI maps the same error to exit 2 with the file named, and creates nothing.
        ledger = tmp / "ledger"
        code, out = run_cli(["status", str(f), "--ledger", str(ledger), "--json"])
        assert code == 2 and "Traceback" not in out and "plan.toml" in re.sub(r"\s+", "", out), out
        assert not ledger.exists(), "a rejected plan must not create the ledger"
    else:
        assert plan.run_id == top.get("name")


# ---- profile files through `ept profiles list --profiles FILE` ------------------------------------------------

PROFILE = {
    "protocol": "openai",
    "base_url": "http://127.0.0.1:9/v1",
    "api_key_env": "EPT_PROPS_KEY",
    "model": "m-1",
    "timeout": 30,
    "max_retries": 2,
    "rpm": 60,
    "supports_n": True,
}


@SETTINGS
@given(data=st.data())
def test_profile_files_parse_or_name_file_and_field(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("prof")
    prof = dict(PROFILE)
    fieldname = data.draw(
        st.sampled_from([*PROFILE, "headers", "price_in_per_1m", "small_fast_model", "api_key", "bogus"]),
        label="field",
    )
    prof[fieldname] = (
        None if data.draw(st.booleans(), label="drop") else data.draw(toml_values, label="value")
    )
    body = "[profiles.p1]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in prof.items() if v is not None)
    if data.draw(st.booleans(), label="junk line"):
        lines = body.splitlines()
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        lines[i] = data.draw(junk_lines.filter(lambda x: isinstance(x, str)), label="junk")
        body = "\n".join(lines) + "\n"
    f = tmp / "profiles.toml"
    f.write_text(body, encoding="utf-8")
    code, out = run_cli(["profiles", "list", "--profiles", str(f)])
    assert_clean_error(code, out)
    if code == 2:
        assert "profiles.toml" in re.sub(r"\s+", "", out), out


def test_profile_with_literal_key_is_rejected_and_masked(tmp_path):
    key = "sk-props-literal-0123456789abcdef"
    f = tmp_path / "profiles.toml"
    f.write_text(
        textwrap.dedent(
            f"""\
            [profiles.p1]
            protocol = "openai"
            base_url = "http://127.0.0.1:9/v1"
            api_key_env = "EPT_PROPS_KEY"
            model = "m"
            api_key = "{key}"
            """
        )
    )
    code, out = run_cli(["profiles", "list", "--profiles", str(f)])
    assert code == 2 and "api_key_env" in out and key not in out and "cdef" in out


# ---- task suites: suites.load.load_suite, and through `ept sweep` (nothing written on error) -------------


def _valid_tasks(n: int = 5) -> list[dict[str, Any]]:
    return [
        {"task_id": f"t{i}", "family": "math", "prompt": f"What is {i} + 1?", "reference": str(i + 1),
         "grader": {"type": "numeric"}, "difficulty": 0.5}
        for i in range(n)
    ]  # fmt: skip


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_suites_load_or_name_file_line_field(tmp_path_factory, data):
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.suites.load import load_suite

    tmp = tmp_path_factory.mktemp("suite")
    tasks = _valid_tasks()
    i = data.draw(st.integers(0, len(tasks) - 1), label="line")
    lines = [json.dumps(t).encode() for t in tasks]
    if data.draw(st.booleans(), label="junk"):
        bad = data.draw(junk_lines, label="junk line")
        lines[i] = bad if isinstance(bad, bytes) else bad.encode("utf-8", "surrogatepass")
        # A blank line (Unicode whitespace only, e.g. "\x1f") is legitimately skipped.
        assume(lines[i].decode("utf-8", "replace").strip())
    else:
        fieldname = data.draw(
            st.sampled_from([*tasks[i], "messages", "tools", "tests", "bogus"]), label="field"
        )
        if data.draw(st.booleans(), label="drop"):
            tasks[i].pop(fieldname, None)
        else:
            tasks[i][fieldname] = data.draw(json_values, label="value")
        lines[i] = json.dumps(tasks[i]).encode()
    f = tmp / "suite.jsonl"
    _write_lines(f, lines)
    try:
        loaded = load_suite(f)
    except InputError as e:
        assert e.file == str(f) and e.line == i + 1, (str(e), i + 1)
    else:
        assert len(loaded) == len(tasks)


def test_bad_suite_through_sweep_exits_2_and_writes_nothing(tmp_path, monkeypatch):
    suite = tmp_path / "s.jsonl"
    tasks = _valid_tasks()
    tasks[2]["grader"] = {"type": "telepathy"}
    _write_lines(suite, [json.dumps(t).encode() for t in tasks])
    prof = tmp_path / "profiles.toml"
    prof.write_text(
        '[profiles.p]\nprotocol = "openai"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "EPT_PROPS_KEY"\nmodel = "m"\n'
    )
    monkeypatch.setenv("EPT_PROPS_KEY", "sk-props-0000000000000000")
    plan = tmp_path / "plan.toml"
    ledger = tmp_path / "ledger"
    plan.write_text(_plan_text({**PLAN, "profile": "p", "suites": [str(suite)], "ledger": str(ledger)}, ARMS))
    code, out = run_cli(["sweep", str(plan), "--profiles", str(prof), "--no-analysis"])
    assert code == 2, out
    assert f"{suite}:3" in re.sub(r"\s+", "", out) and "grader" in out, out
    assert not ledger.exists()


@pytest.mark.parametrize("sep", ["\x85", "\u2028", "\r", "\x0c"])
def test_unicode_line_separators_inside_a_line_do_not_shift_line_numbers(tmp_path, sep):
    """Found by the property above: JSONL lines end at \\n only, so the error names the line the user sees."""
    lines = (FIXTURE / "calls.jsonl").read_bytes().splitlines()
    lines[0] = f"junk{sep}0".encode()
    bad = tmp_path / "calls.jsonl"
    _write_lines(bad, lines)
    code, text = run_cli(
        ["analyze", str(bad), str(FIXTURE / "outcomes.jsonl"), "--rounds", "0", "--no-plots"]
    )
    assert code == 2
    _check_named(text, bad, 1)
