"""Fixed-budget mode of the adaptive sweep: what a sweep stopped at its token cap leaves unclassified, and what
it would likely cost to finish.

Per open arm, each claim a decision could rest on (coordinator/adaptive/epsilon.py: a pair test `mean + z se < bound`) is
projected at its current estimate: with se shrinking as 1 / sqrt(n), the claim holds after
n x (z se / (bound - mean))^2 shared tasks (never, while the estimate is on the wrong side of the bound). An arm
needs the fewest tasks over its routes: on or within (every arm not off ruled out, each by its cheapest route)
or off (one dominator, both of its claims). Finishing costs the tasks the slowest open arm still needs, at the
tokens per task of the arms it involves (the open arms and every arm not off they are compared with). A
projection at the current estimate, not a promise: it says which arms are close and which are out of reach.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from elo_per_token.coordinator.adaptive.epsilon import EpsAssessment
from elo_per_token.coordinator.adaptive.sequential import OFF, OPEN

__all__ = ["Unfinished", "unfinished"]


@dataclass(frozen=True)
class Unfinished:
    """The arms a capped sweep left open, the tasks it would still need (None: out of reach of the grid at
    the current estimates) and the tokens that would likely cost."""

    arms: list[str]
    tasks: int | None
    tokens: float

    def line(self) -> str:
        """One sentence for the report."""
        if not self.arms:
            return "every arm classified within the budget"
        names = ", ".join(self.arms)
        if self.tasks is None:
            return (
                f"not classified at this budget: {names}; at the current estimates even the full grid would "
                f"not settle them (the rest of the grid for them: ~{self.tokens:,.0f} tokens)"
            )
        return (
            f"not classified at this budget: {names}; finishing would take ~{self.tasks} more tasks for "
            f"these arms and their comparisons, ~{self.tokens:,.0f} more tokens"
        )


def _tasks_for(
    mean: NDArray[np.float64],
    se: NDArray[np.float64],
    n: NDArray[np.float64],
    z: float,
    bound: float | NDArray[np.float64],
) -> NDArray[np.float64]:
    """Shared tasks at which `mean + z se < bound` would hold at the current estimates (inf: never)."""
    gap = np.asarray(bound - mean, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        need = n * (z * se / gap) ** 2
    out: NDArray[np.float64] = np.where(np.isfinite(need) & (gap > 0), np.maximum(need, n), np.inf)
    return out


def unfinished(
    a: EpsAssessment,
    arms: Sequence[str],
    tok_per_task: NDArray[np.float64],
    z_on: float,
    z_off: float,
    n_tasks: int,
    z_tok: float | None = None,
) -> Unfinished:
    """The open arms of `a`, the shared tasks the slowest of them would need and its likely token cost."""
    st, k = a.stats, len(a.status)
    open_ = [i for i in range(k) if a.status[i] == OPEN]
    if not open_:
        return Unfinished([], 0, 0.0)
    n = st.n.astype(float)
    strong = _tasks_for(-st.q, st.q_se, n, z_on, 0.0)  # strong[i, j]: q_ij > 0
    zt = z_on if z_tok is None else z_tok  # the token route's z
    cheap = _tasks_for(st.c, st.c_se, n, zt, 0.0)  # cheap[i, j]: c_ij < 0
    routes = [strong, cheap]
    if a.margin.active and a.d is not None:
        routes.append(_tasks_for(st.q, st.q_se, n, z_on, a.margin.balance).T)  # [i, j]: q_ji < b
        routes.append(_tasks_for(a.d[0], a.d[1], a.d[2].astype(float), zt, 0.0))
    rule_out = np.minimum.reduce(routes) - n  # more shared tasks each pair needs
    dom = (
        np.maximum(_tasks_for(-st.q, st.q_se, n, z_off, 0.0), _tasks_for(st.c, st.c_se, n, z_off, 0.0)).T - n
    )
    need, involved = 0.0, set(open_)
    for i in open_:
        live = [j for j in range(k) if j != i and a.status[j] != OFF]
        settle = max((float(rule_out[i, j]) for j in live), default=0.0)
        off = min((float(dom[i, j]) for j in range(k) if j != i), default=np.inf)
        need = max(need, min(settle, off))
        involved.update(live)
    # a negative mean (corrupt or hostile token data) must not make the rest of the grid look free or refunded
    per_task = float(np.nansum(np.clip(tok_per_task[sorted(involved)], 0.0, None)))
    per_task = per_task if not np.isnan(per_task) else float("inf")  # +inf and -inf tokens: unknown
    seen_min = int(min(n[i, j] for i in open_ for j in range(k) if j != i))
    left = max(n_tasks - seen_min, 0)
    names = [arms[i] for i in open_]
    if not np.isfinite(need) or seen_min + need > n_tasks:
        return Unfinished(names, None, per_task * left)
    more = int(np.ceil(max(need, 1.0)))
    return Unfinished(names, more, per_task * more)
