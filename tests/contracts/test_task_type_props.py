"""The Task type's promise under hostile task records: whatever a suite file holds, validate_task either refuses
it (InputError) or returns a record with the Task's required keys and types, which the prompt builders read
in bounded time and memory."""

from __future__ import annotations

from typing import Any

import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.prompts import solve_messages, task_text
from elo_per_token.contracts.tasks import Task, validate_task

TIME_S = 2.0
MEMORY_MB = 64
FIELDS = sorted(Task.__annotations__)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=50),
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=10), kids, max_size=5),
    max_leaves=30,
)
# Values right for their field: with them most records get past the checks and some are accepted. Hostile
# values (any JSON, or text with control characters and blanks) replace them at random.
plausible = {
    "task_id": st.from_regex(r"\A[a-z0-9-]{1,12}\Z"),
    "family": st.sampled_from(["math", "code", "tool_use"]),
    "prompt": st.text(max_size=2000).map(lambda t: "Q " + t),
    "messages": st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "assistant"]), "content": st.text(max_size=200)}
        ),
        max_size=3,
    ).map(lambda ms: [*ms, {"role": "user", "content": "Q"}]),
    "grader": st.fixed_dictionaries({"type": st.sampled_from(["exact", "normalised", "regex", "none"])}),
    "reference": st.integers() | st.text(min_size=1, max_size=20),
    "difficulty": st.floats(0, 1),
}
hostile = json_values | st.text(alphabet=" \x00\x7f\n\t", max_size=5)
REQUIRED = ("task_id", "family", "grader")


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly the required keys and one of prompt/messages, with any other fields (and an unknown one) mixed in;
    each value usually plausible for its field, sometimes any JSON at all."""
    keys = [k for k in REQUIRED if draw(st.integers(0, 9)) > 0]
    keys.append(draw(st.sampled_from(["prompt", "messages"])))
    keys += ["reference"] * draw(st.integers(0, 3)).bit_length()  # usually there
    keys += draw(st.lists(st.sampled_from([*FIELDS, "answer"]), unique=True, max_size=3))
    rec = {}
    for k in dict.fromkeys(keys):
        bad = k not in plausible or draw(st.integers(0, 5)) == 0
        rec[k] = draw(hostile if bad else plausible[k])
    return rec


def _bounded(fn: Any) -> Any:
    """fn(), within this file's CPU and memory bounds per example."""
    return bounded(fn, TIME_S, MEMORY_MB)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_a_record_is_refused_or_is_a_task(rec: dict[str, Any]) -> None:
    try:
        task = _bounded(lambda: validate_task(rec, "suite.jsonl", 3))
    except InputError as e:
        assert e.file == "suite.jsonl" and e.line == 3
        return
    assert task is rec  # returned unchanged: the type is a view of the record, not a copy
    assert set(task) <= set(FIELDS)
    assert isinstance(task["task_id"], str) and task["task_id"].strip()
    assert isinstance(task["family"], str) and isinstance(task["grader"], dict)
    assert (task.get("prompt") is None) != (task.get("messages") is None)
    text = _bounded(lambda: task_text(task))
    assert isinstance(text, str) and text.strip()
    msgs = _bounded(lambda: solve_messages(task))
    assert msgs[0]["role"] == "system" and any(m["role"] == "user" for m in msgs)


def test_a_record_with_neither_prompt_nor_messages_is_refused() -> None:
    for rec in ({"task_id": "t", "family": "f", "grader": {"type": "none"}},
                {"task_id": "t", "family": "f", "grader": {"type": "none"}, "prompt": None, "messages": None}):  # fmt: skip
        try:
            validate_task(rec)
        except InputError as e:
            assert e.field == "prompt"
        else:
            raise AssertionError(f"accepted {rec}")
