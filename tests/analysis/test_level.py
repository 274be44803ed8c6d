"""`--level` is checked by one rule everywhere (analysis.level.check_level): analyze, compare, the tables."""

from __future__ import annotations

import numpy as np
import pytest

from elo_per_token.analysis.compare import compare_runs
from elo_per_token.analysis.compare_gate import FailRule
from elo_per_token.analysis.curve import ArmCurve
from elo_per_token.analysis.level import LevelError, check_level
from elo_per_token.analysis.pipeline import AnalysisOptions
from elo_per_token.analysis.returns import returns_table
from elo_per_token.contracts.errors import InputError


def _three_ways(level: float) -> list[BaseException | None]:
    """What analyze's options, compare and the returns table say about `level` (None = accepted)."""
    out: list[BaseException | None] = []
    for check in (
        lambda: AnalysisOptions(level=level).validate(),
        # Level is checked before the runs are read, so placeholders are enough to reach it.
        lambda: compare_runs(None, None, rule=FailRule(), level=level),  # type: ignore[arg-type]
        lambda: returns_table(
            ArmCurve(
                ["a", "b"],
                ["s", "s"],
                [1, 2],
                np.array([1.0, 2.0]),
                np.array([0.0, 1.0]),
                None,
                None,
                level=level,
            )
        ),
    ):
        try:
            check()
            out.append(None)
        except (InputError, ValueError, AttributeError) as e:
            out.append(e)
    return out


@pytest.mark.parametrize("level", [0.3, 0.4999, 1.0, 1.5, float("nan"), float("inf")])
def test_out_of_range_is_the_same_error_everywhere(level: float) -> None:
    errors = _three_ways(level)
    assert all(isinstance(e, LevelError) for e in errors), errors
    assert len({str(e) for e in errors}) == 1
    assert errors[0].field == "--level" and "[0.5, 1)" in str(errors[0])  # type: ignore[union-attr]


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.999])
def test_in_range_passes_the_level_check_everywhere(level: float) -> None:
    assert check_level(level) == level
    opts_err, compare_err, table_err = _three_ways(level)
    assert opts_err is None and table_err is None
    # compare goes on past the level check and fails later on the placeholder runs, never on the level.
    assert not isinstance(compare_err, LevelError)


def test_a_level_error_is_an_input_error_and_a_value_error() -> None:
    with pytest.raises(InputError):
        check_level(2)
    with pytest.raises(ValueError, match="level"):
        check_level("high")  # type: ignore[arg-type]
