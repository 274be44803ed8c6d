"""A plan's arms, suites, name, weights and generation are checked by models (coordinator.plan's PlanFile, ArmTable,
contracts.generation.Generation, common.checked), like its run settings.

Hostile plans (wrong types, huge integers, NaN and infinities, unicode names, duplicate arms, empty tables,
nesting) either load or fail with an InputError naming the file, the line and the field, in bounded CPU time and
memory; a refused value is shown only when short (never a pasted key). The hand checks these models replaced let
a huge integer weight through as an OverflowError and echoed a secret put in a generation setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toml_gen import toml_value

from elo_per_token.contracts.errors import InputError
from elo_per_token.coordinator.plan import load_plan, parse_plan

SECRET = "sk-secret-ABCDEFGH1234"
HEAD = 'name = "x"\nsuites = ["math"]\n'
ARM = '[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n'


# Keys as a user might write them: unicode letters, no quotes, backslashes or control characters (whose escapes
# the best-effort line lookup cannot match back to the key).
_keys = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters='"\\'),
    min_size=1,
    max_size=6,
)
_scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([10**400, -(10**30), 0, 1, 4097, 2**70]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=8),
    st.sampled_from(["", "  ", "math", "greedy", "majority", "low", "high", "auto", SECRET]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=3)),
    max_leaves=10,
)
_gen_keys = st.sampled_from(
    [
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "reasoning_effort",
        "thinking_budget",
        "extra_body",
        "bogus",
    ]
)
_arm = st.dictionaries(
    st.one_of(st.sampled_from(["strategy", "budgets", "budget", "params"]), _gen_keys, _keys),
    _values,
    max_size=5,
)
_good_arm = st.fixed_dictionaries(
    {
        "strategy": st.sampled_from(["greedy", "majority", "tree_search", "best_of_n"]),
        "budgets": st.lists(st.integers(1, 8), min_size=1, max_size=3),
    }
)


def _arms_text(arms: list[dict[str, Any]]) -> str:
    return "".join(
        "[[arms]]\n" + "".join(f"{toml_value(k)} = {toml_value(x)}\n" for k, x in a.items()) for a in arms
    )


def _check(path: Path, text: str) -> None:
    """The plan loads, or an InputError names this file, a field the file holds (with its line, unless the field is
    missing) and shows no secret."""
    path.write_text(text, encoding="utf-8")
    try:
        bounded(lambda: load_plan(path), time_s=3, memory_mb=64)
    except InputError as e:
        assert e.file == str(path), e
        assert e.field, e
        if not e.message.startswith("missing required field"):
            assert e.line is not None, e
        assert SECRET not in str(e) and len(str(e)) < 2000, e


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.one_of(_keys, _values),
    suites=_values,
    weights=st.one_of(st.dictionaries(_keys, _values, max_size=4), _values),
    generation=st.one_of(st.dictionaries(_gen_keys, _values, max_size=4), _values),
    arms=st.lists(st.one_of(_arm, _good_arm), max_size=3),
    dup=st.booleans(),
)
def test_hostile_plans_load_or_name_file_line_and_field_in_bounded_time_and_memory(
    tmp_path_factory: pytest.TempPathFactory,
    name: Any,
    suites: Any,
    weights: Any,
    generation: Any,
    arms: list[dict[str, Any]],
    dup: bool,
) -> None:
    tmp = tmp_path_factory.mktemp("plan")
    arms = arms + arms[:1] if dup else arms  # a duplicate arm
    top = f"name = {toml_value(name)}\nsuites = {toml_value(suites)}\n"
    tables = "".join(
        f"[{t}]\n" + "".join(f"{toml_value(k)} = {toml_value(x)}\n" for k, x in val.items())
        if isinstance(val, dict)
        else ""
        for t, val in (("weights", weights), ("generation", generation))
    )
    inline = "".join(
        f"{t} = {toml_value(val)}\n"
        for t, val in (("weights", weights), ("generation", generation))
        if not isinstance(val, dict)
    )
    _check(tmp / "plan.toml", top + inline + _arms_text(arms) + tables)
    # The same pieces one at a time on a valid plan, so each is reached (not hidden behind an earlier mistake).
    _check(tmp / "name.toml", f"name = {toml_value(name)}\n" + HEAD.split("\n", 1)[1] + ARM)
    _check(tmp / "suites.toml", f'name = "x"\nsuites = {toml_value(suites)}\n' + ARM)
    _check(tmp / "arms.toml", HEAD + _arms_text(arms or [{}]))
    _check(tmp / "tables.toml", HEAD + inline + ARM + tables)


@pytest.mark.parametrize(
    ("text", "field", "line", "words"),
    [
        # The hand check called math.isfinite on the integer: OverflowError, no file, no line.
        (
            HEAD + "[weights]\nmath = 1" + "0" * 400 + "\n" + ARM,
            "weights.math",
            4,
            "must be a number, got 1000",
        ),
        # ... and echoed a generation setting's value whole, a pasted key included.
        (
            HEAD + ARM + f'[generation]\nreasoning_effort = "{SECRET}"\n',
            "generation.reasoning_effort",
            7,
            "got a string of 22 characters",
        ),
        (
            HEAD + ARM + f'[generation]\nmax_tokens = "{SECRET}"\n',
            "generation.max_tokens",
            7,
            "an integer >= 1",
        ),
        # A duplicate arm was found only once the tasks were loaded, as a key clash with field 'suites', no line.
        (HEAD + ARM + ARM, "arms[1]", 6, "the same arm as arms[0] (greedy@1)"),
        (
            HEAD
            + ARM
            + '[[arms]]\nstrategy = "majority"\nbudgets = [2]\n'
            + '[[arms]]\nstrategy = "majority"\n'
            "budget = 2\n",
            "arms[2]",
            9,
            "the same arm as arms[1] (majority@2)",
        ),
        # An inline table's key: the line of the table's key (the hand checks gave none).
        (HEAD + "weights = { math = -2 }\n" + ARM, "weights.math", 3, "must be >= 0"),
        (HEAD + "weights = { math = nan }\n" + ARM, "weights.math", 3, "must be a finite number, got nan"),
        (HEAD + "arms = []\n", "arms", 3, "must be a non-empty list of [[arms]] tables"),
        ('name = "é"\nsuites = ["math"]\n' + ARM, "name", 1, "must be letters, digits"),
        ('name = "x"\nsuites = []\n' + ARM, "suites", 2, "must be a non-empty list of suite names or files"),
        (
            HEAD + '[[arms]]\nstrategy = "majority"\nbudgets = [2, 2]\n',
            "arms[0].budgets",
            5,
            "distinct integers",
        ),
        (HEAD + '[[arms]]\nstrategy = "greedy"\nbudgets = [1]\nfoo = 1\n', "arms[0].foo", 6, "unknown field"),
        (
            HEAD + '[[arms]]\nstrategy = "tree_search"\nbudgets = [2]\nparams = { depth = 65 }\n',
            "arms[0].params",
            6,
            "parameter 'depth' must be an integer in 1..64, got 65",
        ),
    ],
)
def test_plan_errors_name_file_line_and_field_and_catch_what_the_hand_checks_missed(text, field, line, words):
    with pytest.raises(InputError) as ei:
        bounded(lambda: parse_plan(text, file="p.toml"), time_s=3, memory_mb=64)
    e = ei.value
    assert (e.file, e.field, e.line) == ("p.toml", field, line), e
    assert words in e.message and SECRET not in str(e), e


def test_missing_name_suites_and_arms_say_what_they_hold():
    for text, field, words in (
        ('suites = ["math"]\n' + ARM, "name", "missing required field"),
        ('name = "x"\n' + ARM, "suites", "missing required field (built-in suite names or JSONL files)"),
        (HEAD, "arms", "missing required field ([[arms]] tables, each: strategy, budgets)"),
        (HEAD + '[[arms]]\nstrategy = "greedy"\n', "arms[0].budgets", "missing required field"),
    ):
        with pytest.raises(InputError) as ei:
            parse_plan(text, file="p.toml")
        assert (ei.value.field, ei.value.message) == (field, words) or ei.value.message.startswith(words), (
            ei.value
        )


def test_a_good_plan_parses_to_the_same_values():
    text = (
        HEAD.replace('"x"', '" x "')
        + "weights = { math = 2 }\n"
        + (
            '[[arms]]\nstrategy = " majority "\nbudget = 4\nreasoning_effort = ["low", "high"]\ntemperature = 1\n'
            '[generation]\nstop = "END"\ntop_p = 1\n'
        )
    )
    plan = parse_plan(text)
    assert (plan.name, plan.weights, plan.generation) == ("x", {"math": 2.0}, {"stop": ["END"], "top_p": 1.0})
    assert isinstance(plan.weights["math"], float) and isinstance(plan.generation["top_p"], float)
    (arm,) = plan.arms
    assert (arm.strategy, arm.budgets) == ("majority", (4,))
    assert arm.gens == (
        {"temperature": 1.0, "reasoning_effort": "low"},
        {"temperature": 1.0, "reasoning_effort": "high"},
    )


@pytest.mark.parametrize("v", ["\x7f", "a\x00b\x1f", "é ü", '\\"', {"k\x7f": ["\x7f", 1.5]}])
def test_the_generator_writes_toml_that_reads_back(v: Any) -> None:
    """The property tests' TOML writer: a raw DEL is not TOML (hypothesis found one in a plan's value), so it is
    escaped like the other control characters; the text reads back as the value."""
    import tomllib

    for ascii_only in (False, True):
        assert tomllib.loads(f"x = {toml_value(v, ascii_only=ascii_only)}")["x"] == v
