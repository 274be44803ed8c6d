"""Graders and suite tools on hand-written fixtures."""

from __future__ import annotations

import json

import pytest

from elo_per_token.worker.graders import final_answer, grade
from elo_per_token.worker.graders.basic import (
    grade_choice,
    grade_normalised,
    grade_numeric,
    grade_regex,
    normalise,
)
from elo_per_token.worker.graders.extract import (
    boxed,
    extract_answer,
    extract_code,
    last_number,
    parse_number,
)
from elo_per_token.worker.graders.tool import grade_tool
from elo_per_token.worker.tools import calculate, execute_tool


def test_answer_line_wins_over_other_numbers():
    text = "We had 3 apples and 12 pears.\nAnswer: 15\nThanks, 99"
    assert extract_answer(text) == "15"


def test_boxed_with_nested_braces_and_answer_line_containing_boxed():
    assert boxed(r"so \boxed{\frac{1}{2}} done") == r"\frac{1}{2}"
    assert extract_answer(r"Answer: \boxed{42}") == "42"
    assert extract_answer(r"the result is \boxed{7} and 8 more") == "7"


def test_last_number_fallback_handles_commas_and_signs():
    assert last_number("it costs 1,234.50 then -7") == "-7"
    assert extract_answer("total is 1,234.50") == "1234.50"
    assert parse_number("$1,234.50") == 1234.5
    assert parse_number("3/4") == 0.75
    assert parse_number("no digits") is None
    assert extract_answer("") is None


def test_code_extraction_takes_the_last_python_block():
    text = "first\n```python\ndef f():\n    return 1\n```\nbetter:\n```python\ndef f():\n    return 2\n```\nAnswer: f"
    assert extract_code(text) == "def f():\n    return 2\n"
    assert extract_code("def g(x):\n    return x") == "def g(x):\n    return x\n"
    assert extract_code("no code here") is None


@pytest.mark.parametrize(
    "answer, ok",
    [
        ("42", True),
        ("42.0000001", True),
        ("41.99", False),
        ("$42", True),
        ("about 42 km", True),
        ("x", False),
    ],
)
def test_numeric_tolerance(answer, ok):
    assert grade_numeric(answer, 42, {"abs_tol": 1e-6}).correct is ok


def test_numeric_relative_tolerance():
    assert grade_numeric("101", 100, {"abs_tol": 0, "rel_tol": 0.02}).correct
    assert not grade_numeric("103", 100, {"abs_tol": 0, "rel_tol": 0.02}).correct


def test_normalised_ignores_case_punctuation_articles_and_thousands_separators():
    assert normalise("  The Eiffel-Tower! ") == "eiffel-tower"
    assert grade_normalised("the PARIS.", "Paris", {}).correct
    assert grade_normalised("1,000", "1000", {}).correct
    assert not grade_normalised("Lyon", "Paris", {}).correct
    assert grade_normalised("colour", ["color", "colour"], {}).correct


def test_regex_and_choice():
    assert grade_regex("x = 12", None, {"pattern": r"x\s*=\s*12"}).correct
    assert not grade_regex("x = 13", None, {"pattern": r"x\s*=\s*12"}).correct
    opts = {"choices": ["red", "green", "blue"]}
    assert grade_choice("(B)", "B", opts).correct
    assert grade_choice("green", "B", opts).correct
    assert grade_choice("b) because", "B", opts).correct
    assert not grade_choice("C", "B", opts).correct
    assert not grade_choice("Z", "B", opts).correct


def test_grade_dispatches_on_the_task_grader():
    task = {"task_id": "t", "family": "m", "prompt": "p", "reference": 7, "grader": {"type": "numeric"}}
    r = grade(task, "thinking...\nAnswer: 7")
    assert (r.score, r.correct, r.details["grader"]) == (1.0, True, "numeric")
    assert grade(task, "Answer: 8").score == 0.0
    assert final_answer(task, "Answer: 8") == "8"


TOOL_TASK = {
    "task_id": "tool",
    "family": "tool_use",
    "prompt": "p",
    "reference": 12,
    "grader": {
        "type": "tool",
        "expect_calls": [{"name": "lookup", "arguments": {"table": "parts", "key": "AB-1"}}],
        "answer": {"type": "numeric"},
    },
    "tools": [
        {"type": "function", "function": {"name": "lookup"}},
        {"type": "function", "function": {"name": "calculator"}},
    ],
    "tool_impl": {
        "lookup": {"type": "lookup", "table": {"parts": {"AB-1": 60}}},
        "calculator": {"type": "calculator"},
    },
}


def test_tool_grader_checks_the_call_and_the_answer():
    right_call = [{"name": "lookup", "arguments": json.dumps({"table": "parts", "key": "ab-1"})}]
    wrong_call = [{"name": "lookup", "arguments": json.dumps({"table": "parts", "key": "ZZ-9"})}]
    both = grade_tool("12", TOOL_TASK, right_call)
    assert (both.score, both.correct) == (1.0, True)
    no_call = grade_tool("12", TOOL_TASK, [])
    assert (no_call.score, no_call.correct) == (0.5, False) and "lookup" in no_call.details["reason"]
    assert grade_tool("12", TOOL_TASK, wrong_call).score == 0.5
    wrong_answer = grade_tool("13", TOOL_TASK, right_call)
    assert (wrong_answer.score, wrong_answer.details["reason"]) == (0.5, "wrong final answer")
    assert grade_tool(None, TOOL_TASK, wrong_call).score == 0.0


def test_suite_tools_execute_and_fail_softly():
    assert json.loads(execute_tool(TOOL_TASK, "lookup", '{"table": "parts", "key": "AB-1"}'))["value"] == 60
    assert execute_tool(TOOL_TASK, "lookup", {"table": "parts", "key": "nope"}).startswith("error: no row")
    assert execute_tool(TOOL_TASK, "lookup", {"table": "cities", "key": "x"}).startswith(
        "error: unknown table"
    )
    assert execute_tool(TOOL_TASK, "lookup", "{bad json").startswith("error:")
    assert execute_tool(TOOL_TASK, "teleport", {}).startswith("error: unknown tool")
    assert json.loads(execute_tool(TOOL_TASK, "calculator", {"expression": "60 // 5"}))["value"] == 12


@pytest.mark.parametrize(
    "expr, value", [("2+3*4", 14), ("(2+3)*4", 20), ("7/2", 3.5), ("2^10", 1024), ("-3**2", -9)]
)
def test_calculator_is_exact(expr, value):
    assert calculate(expr) == value


@pytest.mark.parametrize(
    "expr", ["__import__('os').system('true')", "x + 1", "open('/etc/passwd')", "9**9**9", "[1]*3"]
)
def test_calculator_refuses_anything_but_arithmetic(expr):
    with pytest.raises((ValueError, SyntaxError)):
        calculate(expr)


def test_shared_prompt_parsers():
    from elo_per_token.contracts.prompts import (
        final_answer_line,
        parse_score,
        parse_winner,
        prompt_kind,
        solve_messages,
    )

    assert final_answer_line("x\n**Answer:** 12\nmore\nFinal answer: 13") == "13"
    assert final_answer_line("no label here") is None
    assert parse_score("looks fine. Score: 0.85") == 0.85
    assert parse_score("Score: 1") == 1.0 and parse_score("score = .4") == 0.4 and parse_score("none") is None
    assert parse_winner("A is longer but Winner: B") == "B" and parse_winner("Winner: TIE") == "tie"
    assert parse_winner("I cannot decide") is None
    task = {"prompt": "What is 2+2?", "grader": {"type": "numeric"}}
    assert prompt_kind(solve_messages(task)) == "solve"
    assert prompt_kind([{"role": "user", "content": "hi"}]) == "unknown"
    chat_task = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hi?"}]}
    msgs = solve_messages(chat_task)
    assert [m["role"] for m in msgs] == ["system", "user"] and msgs[1]["content"] == "Hi?"
