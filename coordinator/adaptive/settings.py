"""The adaptive sweep's settings: `[adaptive]` in a plan, validated with file, line and field.

Kept free of numpy/scipy: every plan parse runs `check_adaptive`, and the statistics are imported only by
a sweep that runs adaptively.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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

_KEYS: dict[str, type] = {
    "alpha": float,
    "rounds": int,
    "min_rounds": int,
    "width": float,
    "max_tokens": float,
    "futility": bool,
    "futility_power": float,
    "epsilon_elo": float,  # or "auto"
    "epsilon_tokens": float,  # or "auto"
    "delta": float,
}


@dataclass(frozen=True)
class AdaptiveSettings:
    """alpha: error budget per arm decision and per interval; rounds: the grid is cut into this many rounds
    (the looks the budget is spent over); min_rounds: rounds before any decision; width: an on-frontier arm
    keeps running until its ΔElo-per-1k step over the next-cheaper frontier arm is resolved to this width
    (None: the frontier decision alone settles it); max_tokens: stop before a round whose likely cost (the running arms'
    tokens per task so far x its tasks) would pass it; the first round always runs. futility: an open arm whose
    decision the full grid could not settle either (every way to decide it has conditional power below
    futility_power at the end of the grid, coordinator/adaptive/sequential.py) stops and is reported open; false: open arms
    run to the grid's end (or the cap). epsilon_elo / epsilon_tokens: the margin (None: auto, see EPSILON_ELO);
    epsilon_elo 0 with epsilon_tokens auto is the strict rule (the token margin follows the Elo one to 0)."""

    alpha: float = 0.05
    rounds: int = 10
    min_rounds: int = 2
    width: float | None = None
    seed: int = 0
    max_tokens: float | None = None
    futility: bool = True
    futility_power: float = 0.02
    epsilon_elo: float | None = EPSILON_ELO
    epsilon_tokens: float | None = EPSILON_TOKENS

    def check(self) -> None:
        """ValueError 'name: problem' for a value no sweep can use."""
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha: must be in (0, 0.5), got {self.alpha}")
        if not 1 <= self.rounds <= 10_000:
            raise ValueError(f"rounds: must be in 1..10000, got {self.rounds}")
        if not 1 <= self.min_rounds <= self.rounds:
            raise ValueError(f"min_rounds: must be in 1..rounds ({self.rounds}), got {self.min_rounds}")
        if self.width is not None and not (math.isfinite(self.width) and self.width > 0):
            raise ValueError(f"width: must be a positive number, got {self.width}")
        if self.max_tokens is not None and not (math.isfinite(self.max_tokens) and self.max_tokens > 0):
            raise ValueError(f"max_tokens: must be a positive number, got {self.max_tokens}")
        if self.epsilon_elo is not None and not (
            math.isfinite(self.epsilon_elo) and 0 <= self.epsilon_elo <= 1000
        ):
            raise ValueError(f'epsilon_elo: must be "auto" or in [0, 1000] (ΔElo), got {self.epsilon_elo}')
        if self.epsilon_tokens is not None and not (
            math.isfinite(self.epsilon_tokens) and 0 <= self.epsilon_tokens < 1
        ):
            raise ValueError(
                f'epsilon_tokens: must be "auto" or a share in [0, 1) (0.05 = 5%), got {self.epsilon_tokens}'
            )
        if not 0 < self.futility_power < 1:
            raise ValueError(f"futility_power: must be in (0, 1), got {self.futility_power}")


def settings_from_table(table: dict[str, Any], seed: int) -> AdaptiveSettings:
    """Settings from a validated `[adaptive]` table (unknown keys ignored; check_adaptive refuses them).
    `delta` is the issue's name for the error budget: the same setting as `alpha`, not both."""
    kw: dict[str, Any] = {
        k: (AUTO if _is_auto(k, val) else _KEYS[k](val)) for k, val in table.items() if k in _KEYS
    }
    if "delta" in kw:
        if "alpha" in kw:
            raise ValueError("delta: the same setting as alpha (the error budget); give one of them")
        kw["alpha"] = kw.pop("delta")
    return AdaptiveSettings(seed=seed, **kw)


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


def check_adaptive(table: Any, v: Any) -> None:
    """Validate a plan's `[adaptive]` table (v: plan._V, so errors name file, line and field)."""
    if table is None:
        return
    if not isinstance(table, dict):
        raise v.err("must be a table: [adaptive]", "adaptive")
    for key, val in table.items():
        if key not in _KEYS:
            raise v.err(
                f"unknown field (known: {', '.join(sorted(_KEYS))})", f"adaptive.{key}", key, "adaptive"
            )
        if _KEYS[key] is bool:
            if not isinstance(val, bool):
                raise v.err(
                    f"must be true or false, got {type(val).__name__}", f"adaptive.{key}", key, "adaptive"
                )
            continue
        if _is_auto(key, val):
            continue
        if (
            isinstance(val, bool)
            or not isinstance(val, int | float)
            or (_KEYS[key] is int and not isinstance(val, int))
        ):
            want = 'a number or "auto"' if key in _AUTO_KEYS else "a number"
            raise v.err(f"must be {want}, got {type(val).__name__}", f"adaptive.{key}", key, "adaptive")
    try:
        settings_from_table(table, 0).check()
    except (ValueError, OverflowError) as e:
        key = str(e).split(":")[0] if ":" in str(e) else "adaptive"
        raise v.err(str(e).split(": ", 1)[-1], f"adaptive.{key}", key, "adaptive") from None
