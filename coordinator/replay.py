"""The replay executor: run the adaptive policy against a completed full run's stored results.

Each job returns what it returned in the full run, with its real tokens, so the savings and the agreement of
the decisions are measured on the same data without spending a token. `ept replay-adaptive RUN` answers "how
much would an adaptive sweep have saved on my last run?".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from elo_per_token.analysis.run_table import RunTable
from elo_per_token.analysis.sequential import OFF, ON, pair_stats, true_frontier
from elo_per_token.coordinator.adaptive import AdaptiveResult, RoundResults, run_adaptive
from elo_per_token.coordinator.adaptive_settings import AdaptiveSettings

__all__ = ["ReplayOutcome", "full_decisions", "replay_adaptive", "replay_runner"]


def replay_runner(table: RunTable) -> Callable[[int, list[int], list[int]], RoundResults]:
    """A round runner that answers every (task, arm) from the table; a job the full run had no result for
    (NaN) is a failed job (absent from the round's results)."""

    def run(_round: int, tasks: list[int], arms: list[int]) -> RoundResults:
        out: dict[tuple[int, int], tuple[float, float]] = {}
        for t in tasks:
            for a in arms:
                s, tk = table.scores[t, a], table.tokens[t, a]
                if np.isfinite(s) and np.isfinite(tk):
                    out[(t, a)] = (float(s), float(tk))
        return out

    return run


def full_decisions(table: RunTable, weights: dict[str, float] | None = None) -> list[bool]:
    """The frontier of the full grid itself (every task, every arm): the population the replay samples from,
    so the replay's known truth."""
    from elo_per_token.coordinator.adaptive import task_weights

    w = task_weights(table.families, weights)
    st = pair_stats(table.scores, table.tokens, w)
    seen = (~np.isnan(table.tokens)).sum(axis=0)
    tok = np.where(seen > 0, np.nansum(table.tokens, axis=0) / np.maximum(seen, 1), np.nan)
    return [bool(x) for x in true_frontier(tok, np.nan_to_num(st.q))]


@dataclass(frozen=True)
class ReplayOutcome:
    result: AdaptiveResult
    full_tokens: float
    truth: list[bool]  # the full grid's frontier

    @property
    def token_share(self) -> float:
        return self.result.tokens_spent / self.full_tokens if self.full_tokens else float("nan")

    @property
    def wrong(self) -> list[bool]:
        """Per arm: a confident decision that contradicts the full grid's frontier."""
        st = [r.status for r in self.result.reports]
        return [(s == ON and not t) or (s == OFF and t) for s, t in zip(st, self.truth, strict=True)]


def replay_adaptive(
    table: RunTable, settings: AdaptiveSettings, weights: dict[str, float] | None = None
) -> ReplayOutcome:
    """The adaptive policy replayed on a full run's table; its tokens against the full grid's."""
    res = run_adaptive(table.families, table.arms, replay_runner(table), settings, weights=weights)
    return ReplayOutcome(
        result=res, full_tokens=float(np.nansum(table.tokens)), truth=full_decisions(table, weights)
    )
