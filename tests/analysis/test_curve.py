"""analysis.curve.ArmCurve: the one input of the returns tables, checked once when built."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from bounds import bounded
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.analysis.curve import ArmCurve, on_frontier, prev_on_frontier
from elo_per_token.analysis.frontier import headline_table
from elo_per_token.analysis.returns import frontier_steps_table, per_strategy_table, returns_table

ROOT = Path(__file__).resolve().parents[2]


def _curve(**kw: object) -> ArmCurve:
    args: dict[str, object] = {
        "arms": ["a", "b"],
        "strategies": ["s", "s"],
        "budgets": [1, 2],
        "tokens": np.array([1.0, 2.0]),
        "elo": np.array([0.0, 1.0]),
    }
    return ArmCurve(**{**args, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"strategies": ["s"]}, "arms, strategies and budgets must have the same length"),
        ({"tokens": np.ones(3)}, r"tokens_per_task and elo must have shape \[2\]"),
        ({"elo": np.ones((2, 2))}, r"tokens_per_task and elo must have shape \[2\]"),
        ({"elo_samples": np.ones((3, 3))}, r"elo_samples must have shape \[R, 2\]"),
        ({"tokens_samples": np.ones(2)}, r"tokens_samples must have shape \[R, 2\]"),
        (
            {"elo_samples": np.ones((3, 2)), "tokens_samples": np.ones((4, 2))},
            "elo_samples and tokens_samples must have the same number of rounds",
        ),
        ({"level": 1.5}, "level"),
        ({"eligible": [True]}, r"eligible must have shape \[2\]"),
    ],
)
def test_each_bad_field_is_named(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _curve(**kw)


def test_holds_read_only_copies() -> None:
    tokens, es = np.array([1.0, 2.0]), np.zeros((3, 2))
    curve = _curve(tokens=tokens, elo_samples=es)
    tokens[0], es[0, 0] = 99.0, 99.0  # the caller's arrays change after the curve was built
    assert curve.tokens.tolist() == [1.0, 2.0] and curve.elo_samples is not None
    assert curve.elo_samples[0, 0] == 0.0
    assert curve.eligible.tolist() == [True, True] and curve.arms == ("a", "b")
    with pytest.raises(ValueError, match="read-only"):
        curve.elo[0] = 5.0


def test_ineligible_arm_is_off_every_frontier() -> None:
    # b is the strongest arm, but not eligible: it is off the frontier and dominates nobody, so c is on.
    curve = _curve(
        arms=["a", "b", "c"],
        strategies=["s"] * 3,
        budgets=[1, 2, 3],
        tokens=np.array([1.0, 2.0, 3.0]),
        elo=np.array([0.0, 50.0, 10.0]),
        eligible=np.array([True, False, True]),
    )
    assert curve.frontier().tolist() == [True, False, True]
    assert on_frontier(curve.tokens, curve.elo).tolist() == [True, True, False]
    assert frontier_steps_table(curve)["vs"].to_list() == [None, "a", "a"]
    assert prev_on_frontier(np.array([0, 1, 2]), curve.frontier()).tolist() == [-1, 0, 0]


_values = st.floats(allow_nan=True, allow_infinity=True, width=32)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf in a step is NaN -> null, as intended
@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(0, 6),
    k_other=st.integers(0, 6),
    rounds=st.integers(0, 5),
    data=st.data(),
)
def test_hostile_curves_build_every_table_or_fail_clearly(
    k: int, k_other: int, rounds: int, data: st.DataObject
) -> None:
    # Degenerate and hostile input: mismatched lengths, NaN/inf costs and Elo, zero arms, zero rounds.
    tokens = data.draw(st.lists(_values, min_size=k_other, max_size=k_other))
    elo = data.draw(st.lists(_values, min_size=k, max_size=k))
    es = (
        None
        if rounds == 0
        else np.array(data.draw(st.lists(_values, min_size=rounds * k, max_size=rounds * k)))
    )
    arms = [f"arm{i}" for i in range(k)]

    def build() -> int:
        try:
            curve = ArmCurve(
                arms, ["s"] * k, list(range(k)), tokens, elo, None if es is None else es.reshape(rounds, k)
            )
        except ValueError as e:
            assert "shape" in str(e) or "length" in str(e), e
            return -1
        heads = headline_table(curve, partial={}, per_family_theta={}, round_theta=None, weights={})
        for df in (returns_table(curve), per_strategy_table(curve), frontier_steps_table(curve), heads):
            assert df.height == k and sorted(df["arm"].to_list()) == sorted(arms)
        return k

    got = bounded(build, time_s=5.0, memory_mb=64)
    assert got == (k if k_other == k else -1)


def test_zero_arms_with_rounds_give_empty_tables() -> None:
    # Found by the property test: numpy's nanpercentile of a [R, 0] stack is not [2, 0], and the tables
    # raised "not enough values to unpack".
    curve = ArmCurve([], [], [], np.zeros(0), np.zeros(0), np.zeros((3, 0)))
    assert returns_table(curve).height == 0 and frontier_steps_table(curve).height == 0


def test_the_table_modules_import_no_private_names() -> None:
    # The tables' shared helpers are public (analysis.curve, analysis.steps); before, frontier.py imported
    # returns.py's _build, _frontier and _validate.
    bad = []
    for name in ("curve", "steps", "returns", "frontier", "pipeline_tables"):
        path = ROOT / "analysis" / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("elo_per_token"):
                bad += [f"{name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert bad == []
