"""Task suites: the built-in suites are complete and reproducible; bad suite files fail with file:line: field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.tasks import validate_task
from elo_per_token.suites.load import builtin_suite_names, load_builtin_suite, load_suite
from elo_per_token.worker.graders.code import run_tests
from elo_per_token.worker.tools import execute_tool

GOOD = {"task_id": "t1", "family": "math", "prompt": "2+2?", "reference": 4, "grader": {"type": "numeric"}}


def test_builtin_suites_have_at_least_100_unique_tasks_each():
    assert {"code", "math", "tool_use"} <= set(
        builtin_suite_names()
    )  # + public suites whose package is installed
    for name in (
        "code",
        "math",
        "tool_use",
    ):  # the generated suites (public ones: tests/suites/test_public_suites.py)
        tasks = load_builtin_suite(name)
        assert len(tasks) >= 100, name
        assert len({t["task_id"] for t in tasks}) == len(tasks)
        assert len({t["prompt"] for t in tasks}) == len(tasks)  # the simulator finds tasks by prompt text
        for t in tasks:
            assert 0 <= t["difficulty"] <= 1
            assert t["distractors"] and all(d != t["reference"] for d in t["distractors"])


def test_committed_suites_match_the_generator():
    out = subprocess.run(
        [sys.executable, "-m", "elo_per_token.suites.generate", "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_generator_is_deterministic(tmp_path):
    from elo_per_token.suites.generate import main

    assert main(["--out", str(tmp_path / "a")]) == 0
    assert main(["--out", str(tmp_path / "b")]) == 0
    for name in ("math", "code", "tool_use"):
        assert (tmp_path / "a" / f"{name}.jsonl").read_bytes() == (
            tmp_path / "b" / f"{name}.jsonl"
        ).read_bytes()


def test_math_references_are_computed_not_copied():
    # Recompute a few references from the prompt text independently of the generator.
    import re

    for t in load_builtin_suite("math"):
        if t["task_id"].startswith("math-series-"):
            a, b = map(int, re.findall(r"from (\d+) to (\d+)", t["prompt"])[0])
            assert t["reference"] == sum(range(a, b + 1))
        if t["task_id"].startswith("math-modpow-"):
            a, k, m = map(int, re.findall(r"(\d+)\^(\d+) is divided by (\d+)", t["prompt"])[0])
            assert t["reference"] == pow(a, k, m)


def test_code_references_pass_and_distractors_fail_in_the_sandbox():
    tasks = load_builtin_suite("code")[::11]  # one per template
    assert len(tasks) == 10
    for t in tasks:
        ok = run_tests(t["reference"], t["tests"], t["entry_point"])
        assert ok["passed"] == ok["total"] == len(t["tests"]), (t["task_id"], ok)
        for bug in t["distractors"]:
            res = run_tests(bug, t["tests"], t["entry_point"])
            assert res["passed"] < res["total"], (t["task_id"], bug)


def test_tool_tasks_expected_calls_work_with_the_suite_tools():
    for t in load_builtin_suite("tool_use"):
        for call in t["grader"]["expect_calls"]:
            if call["name"] == "lookup":
                out = json.loads(execute_tool(t, "lookup", call["arguments"]))
                assert isinstance(out["value"], int | float)
        if t["task_id"].startswith("tool-calc-"):
            expr = t["prompt"].split("exactly:")[1].strip().rstrip(".")
            assert json.loads(execute_tool(t, "calculator", {"expression": expr}))["value"] == t["reference"]


def _write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "suite.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def _line(**over):
    d = {**GOOD, **over}
    return json.dumps({k: v for k, v in d.items() if v is not None})


@pytest.mark.parametrize(
    "bad_line, field",
    [
        ("{not json", None),
        (_line(task_id=None), "task_id"),
        (_line(family=""), "family"),
        (_line(prompt=None), "prompt"),
        (_line(difficulty=1.5), "difficulty"),
        (_line(grader={"type": "telepathy"}), "grader"),
        (_line(reference=None), "reference"),
        (_line(colour="red"), "colour"),
        (_line(grader={"type": "numeric", "abs_tol": -1}), "grader"),
        (_line(grader={"type": "code"}), "entry_point"),
        (_line(grader={"type": "code"}, entry_point="f"), "tests"),
        (_line(tools=[{"type": "function", "function": {"name": "calc"}}]), "tool_impl"),
        (_line(task_id="t0"), "task_id"),  # duplicate of line 1
    ],
)
def test_bad_lines_name_file_line_and_field(tmp_path, bad_line, field):
    p = _write(tmp_path, [_line(task_id="t0"), bad_line])
    with pytest.raises(InputError) as e:
        load_suite(p)
    assert e.value.file == str(p) and e.value.line == 2 and e.value.field == field, str(e.value)
    assert f"{p}:2" in str(e.value)


def test_judge_mode_tasks_may_omit_the_reference(tmp_path):
    p = _write(tmp_path, [_line(reference=None, grader={"type": "none"})])
    assert load_suite(p)[0]["grader"]["type"] == "none"


def test_cli_validate_exit_codes(tmp_path):
    good = _write(tmp_path, [_line()])
    ok = subprocess.run(["ept", "suites", "validate", str(good)], capture_output=True, text=True)
    assert ok.returncode == 0 and "1 tasks OK" in ok.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_line() + "\n" + _line(task_id="t2", difficulty=7) + "\n")
    res = subprocess.run(["ept", "suites", "validate", str(bad)], capture_output=True, text=True)
    assert res.returncode == 2
    err = " ".join(res.stderr.split())
    assert f"{bad}:2" in err and "difficulty" in err


def _task_fields():
    from elo_per_token.contracts.tasks import Task

    # The module postpones annotations, so each is a forward reference to its source text: "NotRequired[...]"
    # marks an optional key (Task.__required_keys__ cannot see that through the string on Python 3.11).
    return {k: getattr(v, "__forward_arg__", str(v)) for k, v in Task.__annotations__.items()}


def test_the_task_type_names_exactly_the_schema_fields():
    from elo_per_token.contracts.tasks import _KNOWN_FIELDS

    fields = _task_fields()
    assert set(fields) == _KNOWN_FIELDS
    assert {k for k, v in fields.items() if not v.startswith("NotRequired")} == {
        "task_id",
        "family",
        "grader",
    }
    # A record with an unknown key is still refused: the Task type did not widen the schema.
    with pytest.raises(InputError) as e:
        validate_task({**GOOD, "answer": 4})
    assert e.value.field == "answer"


def test_every_builtin_task_fits_the_task_type():
    fields = _task_fields()
    required = {k for k, v in fields.items() if not v.startswith("NotRequired")}
    for name in ("code", "math", "tool_use"):
        for t in load_builtin_suite(name):
            assert required <= set(t) <= set(fields), (name, t["task_id"])
            assert (
                isinstance(t["task_id"], str)
                and isinstance(t["family"], str)
                and isinstance(t["grader"], dict)
            )
            assert t.get("prompt") is None or isinstance(t["prompt"], str)
            assert t.get("messages") is None or isinstance(t["messages"], list)
            assert (t.get("prompt") is None) != (t.get("messages") is None)
            if t["grader"]["type"] == "code":
                assert isinstance(t["entry_point"], str)
                assert all(isinstance(x, str) for x in t["tests"] + t.get("visible_tests", []))
