"""Users' own suites: Parquet suites validated like JSONL, and `ept suites import` for qa and code tables."""

from __future__ import annotations

import functools
import json

import polars as pl
import pytest
from cli_runner import run_ept

from elo_per_token.contracts.errors import InputError
from elo_per_token.coordinator.suite_import import clean_answer, convert
from elo_per_token.suites.load import load_builtin_suite, load_suite, load_suite_ref
from elo_per_token.suites.public.humaneval import read_problems
from elo_per_token.worker.graders import grade

_cli = functools.partial(run_ept, columns=200)  # the CLI in this process (testkit/cli_runner.py)

MIXED = load_builtin_suite("math")[:4] + load_builtin_suite("tool_use")[:2] + load_builtin_suite("code")[:2]


def test_parquet_suite_with_struct_columns_loads_like_the_jsonl(tmp_path):
    path = tmp_path / "mine.parquet"
    pl.DataFrame(MIXED).write_parquet(path)
    got = load_suite_ref(str(path))
    assert [t["task_id"] for t in got] == [t["task_id"] for t in MIXED]
    # One Parquet column has one type: mixed int/code references come back as text; graders still agree.
    assert str(got[0]["reference"]) == str(MIXED[0]["reference"]) and got[0]["grader"]["type"] == "numeric"
    assert grade(got[0], f"Answer: {MIXED[0]['reference']}").correct
    tool = next(t for t in got if t["family"] == "tool_use")
    assert grade(tool, f"Answer: {tool['reference']}", tool["grader"]["expect_calls"]).details["answer_ok"]


def test_parquet_suite_with_json_text_columns_loads(tmp_path):
    rows = [{k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in t.items()} for t in MIXED]
    path = tmp_path / "text.parquet"
    pl.DataFrame(rows).write_parquet(path)
    assert load_suite(path)[-1]["tests"] == MIXED[-1]["tests"]


def test_bad_parquet_row_names_file_row_and_field_and_exits_2(tmp_path):
    rows = [dict(t) for t in load_builtin_suite("math")[:5]]
    rows[2]["difficulty"] = 7.5
    path = tmp_path / "bad.parquet"
    pl.DataFrame(rows).write_parquet(path)
    out = _cli("suites", "validate", str(path))
    assert out.returncode == 2
    assert f"{path}:3: field 'difficulty'" in out.stderr.replace("\n", "")
    rows[2]["difficulty"] = 0.5
    rows[4]["grader"] = "{not json"
    pl.DataFrame(
        [
            {**r, "grader": json.dumps(r["grader"]) if isinstance(r["grader"], dict) else r["grader"]}
            for r in rows
        ]
    ).write_parquet(path)
    with pytest.raises(InputError) as e:
        load_suite(path)
    assert (e.value.line, e.value.field) == (5, "grader")


QA = [
    {"id": "gsm-1", "question": "Tom has 3 bags of 4 apples. How many apples?", "answer": "3*4=12\n#### 12"},
    {"id": "gsm-2", "question": "A big sum?", "answer": "#### 1,234"},
    {"id": "math-1", "problem": "x", "question": "Solve x^2 < 4.", "answer": r"The set is \boxed{(-2, 2)}."},
    {"id": "trivia-1", "question": "Capital of France?", "answer": "Paris"},
]


def test_answer_cleaning_for_gsm8k_and_math_solutions():
    assert clean_answer("so 3*4=12\n#### 12") == 12
    assert clean_answer("#### 1,234") == 1234
    assert clean_answer(r"hence \boxed{\frac{1}{2}}.") == r"\frac{1}{2}"
    assert clean_answer("2.50") == 2.5 and clean_answer(" Paris ") == "Paris"


def test_qa_import_writes_a_valid_suite_with_graders_per_answer(tmp_path):
    src = tmp_path / "qa.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in QA))
    out = _cli("suites", "import", str(src), "--out", str(tmp_path / "s" / "mine.jsonl"), "--family", "mixed")
    assert out.returncode == 0, out.stderr
    assert "4 tasks" in out.stdout
    tasks = load_suite(tmp_path / "s" / "mine.jsonl")
    assert [t["grader"]["type"] for t in tasks] == ["numeric", "numeric", "math", "normalised"]
    assert [t["reference"] for t in tasks] == [12, 1234, "(-2, 2)", "Paris"]
    assert {t["family"] for t in tasks} == {"mixed"}
    assert grade(tasks[2], r"Answer: $(-2,2)$").correct and not grade(tasks[2], "Answer: [-2, 2]").correct
    assert grade(tasks[0], "Work.\nAnswer: 12").correct


def test_dry_run_prints_the_first_tasks_and_writes_nothing(tmp_path):
    src = tmp_path / "qa.csv"
    pl.DataFrame(QA).drop("problem").write_csv(src)
    out = _cli("suites", "import", str(src), "--dry-run", "--show", "2", "--out", str(tmp_path / "x.jsonl"))
    assert out.returncode == 0, out.stderr
    assert '"task_id": "gsm-1"' in out.stdout and '"task_id": "gsm-2"' in out.stdout
    assert "math-1" not in out.stdout and "4 tasks valid" in out.stdout
    assert not (tmp_path / "x.jsonl").exists()


def test_bad_row_names_file_line_and_column_and_nothing_is_written(tmp_path):
    src = tmp_path / "qa.jsonl"
    rows = [
        *QA,
        {"id": "bad", "question": "  ", "answer": "1"},
        {"id": "later", "question": "q", "answer": "2"},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    dest = tmp_path / "out.jsonl"
    out = _cli("suites", "import", str(src), "--out", str(dest))
    assert out.returncode == 2
    assert f"{src}:5: field 'question'" in out.stderr.replace("\n", "")
    assert not dest.exists() and list(tmp_path.iterdir()) == [src]
    no_answer = tmp_path / "noans.jsonl"
    no_answer.write_text(json.dumps({"question": "q", "reply": "1"}) + "\n")
    out = _cli("suites", "import", str(no_answer), "--out", str(dest))
    assert out.returncode == 2 and "cannot tell the table's shape" in out.stderr
    with pytest.raises(InputError) as e:
        convert(no_answer, shape="qa")
    assert (e.value.line, e.value.field) == (1, "answer")
    with pytest.raises(InputError) as e:
        convert(src, shape="qa", grader="numeric")  # 'Paris' is not a number
    assert (e.value.line, e.value.field) == (3, "answer")


def test_code_import_from_a_humaneval_style_parquet_table(tmp_path):
    problems = read_problems()[:3]
    src = tmp_path / "code.parquet"
    pl.DataFrame(problems).write_parquet(src)
    shape, tasks = convert(src)
    assert shape == "code" and len(tasks) == 3
    assert tasks[0]["task_id"] == "HumanEval-0" and tasks[0]["visible_tests"]
    for t in tasks:
        assert grade(t, f"```python\n{t['reference']}```").correct
    for t, p in zip(tasks, problems, strict=True):
        assert not grade(t, "```python\n" + p["prompt"] + "    return None\n```").correct
    broken = [dict(p) for p in problems]
    del broken[1]["test"]
    pl.DataFrame(broken).write_parquet(src)
    with pytest.raises(InputError) as e:
        convert(src, shape="code")
    assert (e.value.line, e.value.field) == (2, "test")
