"""The adaptive sweep's settings: `[adaptive]` in a plan, validated with file, line and field.

Kept free of numpy/scipy: every plan parse runs `check_adaptive`, and the statistics are imported only by
a sweep that runs adaptively.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

if TYPE_CHECKING:  # the bounds in the annotations, resolved by common.checked when settings are checked
    from annotated_types import Ge, Gt, Interval, Lt

__all__ = [
    "AUTO",
    "AUTO_EPSILON_TOKENS",
    "EPSILON_ELO",
    "EPSILON_TOKENS",
    "AdaptiveSettings",
    "check_adaptive",
    "margin_arg",
    "settings_from_table",
]

# The default margin of the ε-relaxed classification (coordinator/adaptive/epsilon.py): arms no arm beats by
# more than this much Elo AND this share of tokens are "within the margin" of the frontier. The default is
# AUTO (None): the Elo margin is the smallest the plan's full grid can settle at its error budget, computed
# from the design before the first task (core.plan_margin, epsilon.auto_epsilon_elo), and the token margin
# AUTO_EPSILON_TOKENS. An explicit epsilon_elo = 0 is the strict rule (on / off / open).
AUTO = None
AUTO_EPSILON_TOKENS = 0.05
EPSILON_ELO: float | None = AUTO
EPSILON_TOKENS: float | None = AUTO
# `[adaptive]` keys that are not settings: `delta` is the name for `alpha`; `seed` is the plan's.
_ALIASES = {"delta": "alpha"}
_NOT_IN_TABLE = frozenset({"seed"})


@dataclass(frozen=True)
class AdaptiveSettings:
    """alpha: error budget per arm decision and per interval; rounds: the grid is cut into this many rounds
    (the looks the budget is spent over); min_rounds: rounds before any decision; width: an on-frontier arm
    keeps running until its ΔElo-per-1k step over the next-cheaper frontier arm is resolved to this width
    (None: the frontier decision alone settles it); max_tokens: stop before a round whose likely cost (the running arms'
    tokens per task so far x its tasks) would pass it; the first round always runs. futility: an open arm whose
    decision the full grid could not settle either (every way to decide it has conditional power below
    futility_power at the end of the grid, coordinator/adaptive/sequential.py) stops and is reported open; false:
    open arms run to the grid's end (or the cap). epsilon_elo / epsilon_tokens: the margin (None: auto, see
    EPSILON_ELO); epsilon_elo 0 with epsilon_tokens auto is the strict rule (the token margin follows the Elo
    one to 0).

    Each field's type and bounds are its check (`check()`, common.checked); `metadata["must"]` is the rule in
    the words an error shows. One field per line."""

    alpha: Annotated[float, Gt(0), Lt(0.5)] = field(default=0.05, metadata={"must": "in (0, 0.5)"})
    rounds: Annotated[int, Interval(ge=1, le=10_000)] = field(default=10, metadata={"must": "in 1..10000"})
    min_rounds: Annotated[int, Ge(1)] = field(default=2, metadata={"must": "in 1..rounds"})
    width: Annotated[float, Gt(0)] | None = field(default=None, metadata={"must": "a positive number"})
    seed: int = 0
    max_tokens: Annotated[float, Gt(0)] | None = field(default=None, metadata={"must": "a positive number"})
    futility: bool = field(default=True, metadata={"must": "true or false"})
    futility_power: Annotated[float, Gt(0), Lt(1)] = field(default=0.02, metadata={"must": "in (0, 1)"})
    epsilon_elo: Annotated[float, Interval(ge=0, le=1000)] | None = field(
        default=EPSILON_ELO, metadata={"must": '"auto" or in [0, 1000] (ΔElo)'}
    )
    epsilon_tokens: Annotated[float, Ge(0), Lt(1)] | None = field(
        default=EPSILON_TOKENS, metadata={"must": '"auto" or a share in [0, 1) (0.05 = 5%)'}
    )

    def check(self) -> None:
        """ValueError 'name: problem' for a value no sweep can use."""
        _checked(dataclasses.asdict(self))


def _checked(values: dict[str, Any]) -> AdaptiveSettings:
    """Settings from `values`, checked by the model; ValueError 'name: problem' (common.checked.ModelError)."""
    from elo_per_token.common.checked import ModelError, checked  # pydantic: only when settings are checked

    settings = checked(AdaptiveSettings, values)
    if settings.min_rounds > settings.rounds:  # the one rule across two fields
        raise ModelError(
            ("min_rounds",), f"must be in 1..rounds ({settings.rounds}), got {settings.min_rounds}"
        )
    return settings


def settings_from_table(table: dict[str, Any], seed: int) -> AdaptiveSettings:
    """Settings from an `[adaptive]` table, checked (ValueError 'name: problem'). `delta` is the issue's name
    for the error budget: the same setting as `alpha`, not both."""
    from elo_per_token.common.checked import ModelError

    known = sorted({f.name for f in dataclasses.fields(AdaptiveSettings)} - _NOT_IN_TABLE | set(_ALIASES))
    unknown = sorted(str(k) for k in table if k not in known)
    if unknown:
        raise ModelError((unknown[0],), f"unknown field (known: {', '.join(known)})")
    kw = {k: (AUTO if _is_auto(k, val) else val) for k, val in table.items()}
    for alias, name in _ALIASES.items():
        if alias in kw:
            if name in kw:
                raise ModelError((alias,), f"the same setting as {name} (the error budget); give one of them")
            kw[name] = kw.pop(alias)
    return _checked({**kw, "seed": seed})


def _is_auto(key: str, val: Any) -> bool:
    """A margin field given as "auto" (the default, written out)."""
    return key in _AUTO_KEYS and val == "auto"


_AUTO_KEYS = ("epsilon_elo", "epsilon_tokens")


def margin_arg(value: str, flag: str) -> float | None:
    """A command line's margin (`--epsilon-elo auto`, `--epsilon-tokens 0.05`): None for auto, else the number;
    ValueError naming the flag otherwise."""
    if value.strip().lower() == "auto":
        return AUTO
    try:
        return float(value)
    except ValueError:
        raise ValueError(f'{flag}: must be "auto" or a number, got {value!r}') from None


def check_adaptive(table: dict[str, Any] | None, v: Any) -> None:
    """Validate a plan's `[adaptive]` table, a table or None (plan.PlanFile checked that); v: plan._V, so errors
    name file, line and field."""
    from elo_per_token.common.checked import ModelError

    if table is None:
        return
    try:
        settings_from_table(table, 0)
    except ModelError as e:
        key = e.key or "adaptive"
        raise v.err(e.message, f"adaptive.{key}", key, "adaptive") from None
