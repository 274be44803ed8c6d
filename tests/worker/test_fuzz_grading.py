"""Property-based fuzzing of reply -> extraction -> grading -> record, for every grader (issue 23).

Replies are drawn from a hostile corpus: newline and space floods, labels repeated thousands of times,
numbers past CPython's int digit limit and the float range, forged hex floats, LaTeX towers and deep
nesting, unbalanced fences and braces, control and wide characters. For every grader the property is:
grading returns (never raises) a score in 0..1, the ledger record it makes is finite JSON, and the time
and memory it takes are bounded. Sandbox values (the code grader's `checks.decode` / `verdict`), tool-call
arguments (tool, BFCL), the majority vote key of every grader and the judge's verdict parsing are fuzzed
the same way. Fixed seed (derandomize) and a small example budget: this runs in `.ci/run` with the suite.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from bounds import bounded, bounded_pure
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from optional import HAS_BFCL, bfcl_tasks, requires_bfcl

from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.prompts import answer_lines, parse_score, parse_winner
from elo_per_token.contracts.records import JobResult
from elo_per_token.contracts.tasks import validate_task
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.graders import bfcl, final_answer, grader_for
from elo_per_token.worker.job import _grade
from elo_per_token.worker.judge import combine
from elo_per_token.worker.sandbox import checks
from elo_per_token.worker.strategies.base import Candidate, StrategyResult
from elo_per_token.worker.strategies.majority import vote

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TIME_S = 2.0  # per example, CPU of this process (generous: a linear pass over < 1 MB takes milliseconds)
MEMORY_MB = 64  # peak Python allocations per example (inputs are < 1 MB)


def _task(grader: dict[str, Any], reference: Any = "42", **extra: Any) -> dict[str, Any]:
    return validate_task(
        {
            "task_id": f"fz-{grader['type']}",
            "family": "fuzz",
            "prompt": "p",
            "reference": reference,
            "grader": grader,
            **extra,
        }
    )


TASKS = {
    "numeric": load_builtin_suite("math")[0],
    "exact": _task({"type": "exact"}),
    "normalised": _task({"type": "normalised"}),
    "regex": _task({"type": "regex", "pattern": r"4\d"}),
    "choice": _task({"type": "choice", "choices": ["red", "green", "blue"]}, reference="B"),
    "math": _task({"type": "math"}, reference=r"\frac34"),
    "tool": load_builtin_suite("tool_use")[0],
    "none": _task({"type": "none"}, reference=None),
}
# bfcl is optional (bfcl-eval): its grader joins the fuzzed ones where it is installed, and
# test_bfcl_grader_is_fuzzed_where_installed says so when it is not (a failure under EPT_CI=1).
if HAS_BFCL:
    TASKS["bfcl"] = bfcl_tasks()[0]
    bfcl._checker()  # import BFCL's checker once (seconds of CPU) before any example is timed
TOOL_GRADERS = ["tool", "bfcl"] if HAS_BFCL else ["tool"]


@requires_bfcl
def test_bfcl_grader_is_fuzzed_where_installed():
    assert "bfcl" in TASKS and "bfcl" in TOOL_GRADERS


_PIECES = [
    "\n",
    " ",
    "\t",
    "\r",
    "*",
    "**",
    ":",
    "：",
    "Answer:",
    "answer",
    "final answer:",
    "**Answer:**",
    "\\boxed{",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    "$",
    "```",
    "```python\n",
    "/",
    "-",
    ".",
    ",",
    "e",
    "^",
    "\\frac{",
    "9^{",
    "\\binom{",
    "0x1p99999",
    "nan",
    "inf",
    "1e400",
    "Winner:",
    "Score:",
    "A",
    "B",
    "tie",
    "\x00",
    "\u2028",
    "\ufeff",
    "ſ",
    "İ",
    "é",
    "4",
    "42",
    "7",
    "0",
]
_BLOCK = st.one_of(
    st.sampled_from(_PIECES),
    st.text(max_size=40),
    st.integers(min_value=1, max_value=6_000).map(lambda n: "9" * n),  # past 4,300 digits, past 1e308
    st.tuples(st.sampled_from(_PIECES), st.integers(min_value=100, max_value=20_000)).map(
        lambda t: t[0] * t[1]
    ),
)
REPLIES = st.lists(_BLOCK, max_size=8).map("".join)


def _bounded(fn: Any) -> Any:
    """fn(), within this file's CPU and memory bounds per example."""
    return bounded(fn, TIME_S, MEMORY_MB)


def _no_nan(x: str) -> Any:
    raise AssertionError(f"non-finite JSON in a record: {x}")


def _record_is_finite_json(task: dict[str, Any], reply: str | None, tool_calls: list[dict[str, Any]]) -> None:
    job = Job("fuzz", task, "greedy", 1, seed=1)
    cand = Candidate(0, reply, final_answer(task, reply), tool_calls)
    outcome = _bounded(lambda: _grade(job, StrategyResult(cand)))
    if task["grader"]["type"] != "none":
        assert outcome.error is None, outcome.error  # a score, never an unscored task failure
        assert outcome.score is not None and 0.0 <= outcome.score <= 1.0
    for line in JobResult(job, [], outcome).to_jsonl().splitlines():
        json.loads(line, parse_constant=_no_nan)


@FUZZ
@given(reply=REPLIES, grader=st.sampled_from(["numeric", "exact", "normalised", "regex", "choice", "none"]))
def test_reference_graders_score_any_reply(reply, grader):
    _record_is_finite_json(TASKS[grader], reply, [])


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
@settings(FUZZ, max_examples=15)
@given(reply=REPLIES)
def test_math_grader_scores_any_reply(reply):
    # math-verify runs in its killable child: the worker's own CPU stays bounded whatever sympy does.
    _record_is_finite_json(TASKS["math"], reply, [])


_ARGS = st.one_of(
    REPLIES,
    st.integers(min_value=1, max_value=200_000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=1, max_value=200_000).map(lambda n: '{"a": ' * n + "1" + "}" * n),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
        max_leaves=30,
    ).map(lambda v: json.dumps(v)),
    st.none(),
)
_CALLS = st.lists(
    st.fixed_dictionaries({"name": st.sampled_from(["lookup", "calculator", "x", ""]), "arguments": _ARGS}),
    max_size=3,
)


@FUZZ
@given(reply=REPLIES, calls=_CALLS, grader=st.sampled_from(TOOL_GRADERS))
def test_tool_and_bfcl_graders_score_any_calls(reply, calls, grader):
    task = TASKS[grader]
    if grader == "bfcl" and calls:
        calls = [{**c, "name": task["tools"][0]["function"]["name"]} for c in calls]
    _record_is_finite_json(task, reply, calls)


@FUZZ
@given(
    replies=st.lists(REPLIES, min_size=1, max_size=4),
    calls=_CALLS,
    grader=st.sampled_from(["numeric", "exact", "choice", "math", *TOOL_GRADERS]),
)
def test_majority_vote_key_of_any_reply(replies, calls, grader):
    task = TASKS[grader]
    cands = [Candidate(i, r, final_answer(task, r), calls) for i, r in enumerate(replies)]
    key = grader_for(task).vote_key
    for c in cands:
        k = _bounded(lambda c=c: key(task, c))
        assert k is None or isinstance(k, str)
    chosen, details = _bounded(lambda: vote(task, cands))
    assert chosen in cands and details["n_valid"] <= len(cands)


@FUZZ
@given(first=REPLIES, second=REPLIES)
def test_judge_and_verifier_parsing_of_any_reply(first, second):
    v1, v2 = _bounded(lambda: (parse_winner(first), parse_winner(second)))
    assert v1 in (None, "A", "B", "tie") and combine(v1, v2) in ("A", "B", "tie")
    s = _bounded(lambda: parse_score(first))
    assert s is None or 0.0 <= s <= 1.0
    assert all(isinstance(a, str) and "\n" not in a for a in _bounded(lambda: answer_lines(first)))


# ---- values coming back from the sandbox (the code grader's checks.decode / verdict) --------------------

_HEX_INTS = st.one_of(
    st.integers(),
    st.integers(min_value=1, max_value=300_000).map(lambda k: k * (2**61 - 1)),
    st.integers(min_value=0, max_value=300_000).map(lambda b: 2**b),
).map(hex)
_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.text(max_size=20),
    _HEX_INTS.map(lambda h: {"i": h}),
    st.one_of(
        st.floats().map(float.hex), st.sampled_from(["0x1p99999", "-0x1p99999", "nan", "zz", "0x1.8p-1074"])
    ).map(lambda f: {"f": f}),
    st.sampled_from([{"c": ["0x1p99999", "0x0p0"]}, {"b": "zz"}, {"b": "00ff"}, {"q": 1}, {"i": 5}]),
)
_VALUES = st.recursive(
    _LEAF,
    lambda c: st.one_of(
        st.lists(c, max_size=5),
        st.lists(c, max_size=5).map(lambda v: {"t": v}),
        st.lists(c, max_size=5).map(lambda v: {"s": v}),
        st.lists(c, max_size=5).map(lambda v: {"fs": v}),
        st.lists(st.tuples(c, c).map(list), max_size=4).map(lambda v: {"d": v}),
    ),
    max_leaves=40,
)
_FLOODS = st.one_of(
    st.integers(min_value=1, max_value=300_000).map(
        lambda n: {"s": [{"i": hex(k * (2**61 - 1))} for k in range(1, n)]}
    ),
    st.integers(min_value=1, max_value=5_000).map(
        lambda n: {"d": [[{"i": hex(k * (2**61 - 1))}, 0] for k in range(1, n)]}
    ),
    st.integers(min_value=1, max_value=400).map(lambda n: [[[]]] * n if n < 200 else _nest(n)),
)


def _nest(n: int) -> Any:
    v: Any = []
    for _ in range(n):
        v = [v]
    return v


PREP = checks.prepare("assert f(1) == {1, 2}\nassert sorted(f(2)) == [1, 2]\nassert abs(f(3) - 0.5) < 1e-9")


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
@FUZZ
@given(values=st.lists(st.one_of(_VALUES, _FLOODS), min_size=3, max_size=3))
def test_sandbox_values_decode_and_compare_in_bounded_time(values):
    line = {"c": [[k, [{"v": v}]] for k, v in enumerate(values)], "e": None}
    try:
        # Pure and allocation-heavy (300k-item floods): timed untraced, its memory traced (bounds.bounded_pure).
        why = bounded_pure(lambda: checks.verdict(PREP, line), TIME_S, MEMORY_MB)
    except checks.Tampered:
        return  # a run whose channel holds what the harness never writes is graded as failed
    assert why is None or (isinstance(why, str) and len(why) < 1_000)
