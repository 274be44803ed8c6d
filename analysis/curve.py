"""The arms' cost-vs-Elo curve that every returns table reads (`ArmCurve`), and the frontier over it.

`ArmCurve` holds what analysis.returns' tables and analysis.frontier's headline table take: per arm its
label, strategy, budget, cost and Elo, optionally the bootstrap rounds of both, the interval level and
which arms may be on the frontier. It checks its shapes once, when built, so the tables do not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from elo_per_token.analysis.level import check_level

__all__ = ["ArmCurve", "frontier_probability", "on_frontier", "prev_on_frontier"]


def _frozen(values: ArrayLike, dtype: type) -> NDArray[Any]:
    """A read-only copy, so a frozen curve cannot change under the tables that read it."""
    arr: NDArray[Any] = np.array(values, dtype=dtype)
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True)
class ArmCurve:
    """K arms placed by cost and Elo, with their bootstrap rounds (R of them) when there are any.

    Fields (K = number of arms, R = bootstrap rounds):
        arms: the K arm labels ("best_of_n@4"), in the caller's order; rows refer to arms by this index.
        strategies: the K arms' strategy names.
        budgets: the K arms' budgets (n).
        tokens: [K] float, each arm's cost per task on the x axis: tokens per task, or for the cost
            table USD x 1000 per task. NaN = unknown.
        elo: [K] float, each arm's Elo (point estimate). NaN = not estimated.
        elo_samples: [R, K] float, Elo in each bootstrap round, or None (no intervals).
        tokens_samples: [R, K] float, cost in each round, or None (the point cost in every round).
        level: the intervals' coverage, checked by analysis.level.check_level.
        eligible: [K] bool, arms that may be on the frontier (default all); the others are never on it,
            dominate no arm, and their frontier share is null.

    Building one checks the shapes (ValueError naming the field) and copies the arrays read-only.
    """

    arms: Sequence[str]
    strategies: Sequence[str]
    budgets: Sequence[int]
    tokens: NDArray[np.float64]
    elo: NDArray[np.float64]
    elo_samples: NDArray[np.float64] | None = None
    tokens_samples: NDArray[np.float64] | None = None
    level: float = 0.95
    # None means all arms; __post_init__ replaces it with the [K] mask, so readers never see None.
    eligible: NDArray[np.bool_] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        k = len(self.arms)
        if not (len(self.strategies) == len(self.budgets) == k):
            raise ValueError("arms, strategies and budgets must have the same length")
        tokens, elo = _frozen(self.tokens, float), _frozen(self.elo, float)
        if tokens.shape != (k,) or elo.shape != (k,):
            raise ValueError(f"tokens_per_task and elo must have shape [{k}]")
        check_level(self.level)  # LevelError is a ValueError too
        samples: list[NDArray[np.float64] | None] = []
        for name, s in (("elo_samples", self.elo_samples), ("tokens_samples", self.tokens_samples)):
            arr = None if s is None else _frozen(s, float)
            if arr is not None and (arr.ndim != 2 or arr.shape[1] != k):
                raise ValueError(f"{name} must have shape [R, {k}]")
            samples.append(arr)
        if samples[0] is not None and samples[1] is not None and samples[0].shape != samples[1].shape:
            raise ValueError("elo_samples and tokens_samples must have the same number of rounds")
        eligible = _frozen(np.ones(k, dtype=bool) if self.eligible is None else self.eligible, bool)
        if eligible.shape != (k,):
            raise ValueError(f"eligible must have shape [{k}]")
        for name, value in (
            ("arms", tuple(self.arms)),
            ("strategies", tuple(self.strategies)),
            ("budgets", tuple(self.budgets)),
            ("tokens", tokens),
            ("elo", elo),
            ("elo_samples", samples[0]),
            ("tokens_samples", samples[1]),
            ("eligible", eligible),
        ):
            object.__setattr__(self, name, value)  # frozen: the normalised values, set once here

    @property
    def k(self) -> int:
        """The number of arms."""
        return len(self.arms)

    def frontier(self) -> NDArray[np.bool_]:
        """[K] bool: the arms on the point-estimate frontier of the eligible arms (see on_frontier)."""
        return on_frontier(self.tokens, np.where(self.eligible, self.elo, np.nan))


def on_frontier(tokens: NDArray[np.float64], elo: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Which arms are on the cost-vs-Elo frontier.

    An arm is on it when no other arm is at least as cheap and at least as strong, and strictly better in
    one of the two (weakly dominated arms are off). NaN Elo or cost is never on it.

    Args:
        tokens: [..., K] cost per task; leading axes are a stack (one frontier per bootstrap round).
        elo: [..., K] Elo, the same shape.

    Returns:
        [..., K] bool, True where the arm is on that frontier.
    """
    t_le = tokens[..., None, :] <= tokens[..., :, None]  # [.., i, j]: arm j at most as costly as arm i
    e_ge = elo[..., None, :] >= elo[..., :, None]
    strict = (tokens[..., None, :] < tokens[..., :, None]) | (elo[..., None, :] > elo[..., :, None])
    dominated = np.any(t_le & e_ge & strict, axis=-1)
    on: NDArray[np.bool_] = ~dominated & ~np.isnan(elo) & ~np.isnan(tokens)
    return on


def frontier_probability(elo_samples: ArrayLike, tokens_samples: ArrayLike) -> NDArray[np.float64]:
    """Share of bootstrap rounds in which each arm is on that round's frontier.

    Args:
        elo_samples: [R, K] Elo per round; a round where an arm's Elo is NaN counts as off.
        tokens_samples: [R, K] cost per round (NaN: off).

    Returns:
        [K] share of the R rounds in which the arm is on the frontier.
    """
    tok, elo = np.asarray(tokens_samples, dtype=float), np.asarray(elo_samples, dtype=float)
    # on_frontier compares every pair of arms: [rounds, K, K] booleans. Chunks of rounds keep that near 32M
    # booleans per temporary for many arms (1,000 arms x 200 rounds would be 200M each); same result.
    step = max(1, 2**25 // max(1, tok.shape[-1]) ** 2)
    if tok.ndim < 2 or tok.shape[0] <= step:
        share: NDArray[np.float64] = on_frontier(tok, elo).mean(axis=0)
        return share
    on = [on_frontier(tok[i : i + step], elo[i : i + step]) for i in range(0, tok.shape[0], step)]
    share = np.concatenate(on).mean(axis=0)
    return share


def prev_on_frontier(order: NDArray[np.intp], front: NDArray[np.bool_]) -> NDArray[np.intp]:
    """Each row's predecessor: the last arm on the frontier among the rows before it.

    Args:
        order: [K] arm indices in row order (cheapest first).
        front: [K] bool by arm index, True for arms on the frontier.

    Returns:
        [K] arm index of each row's predecessor, -1 where no frontier arm comes before it.
    """
    prev = np.full(order.size, -1)
    last = -1
    for pos, i in enumerate(order):  # K rows: a loop over arms, not over data
        prev[pos] = last
        if front[i]:
            last = i
    return prev
