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
from elo_per_token.analysis.sequential import OFF, ON, assess_holm, pair_stats, true_frontier
from elo_per_token.coordinator.adaptive import AdaptiveResult, RoundResults, round_bounds, run_adaptive
from elo_per_token.coordinator.adaptive_settings import AdaptiveSettings

__all__ = [
    "ReplayOutcome",
    "full_decisions",
    "full_rule_decisions",
    "reach",
    "replay_adaptive",
    "replay_runner",
]


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


def full_rule_decisions(
    table: RunTable, settings: AdaptiveSettings, weights: dict[str, float] | None = None, looks: int = 1
) -> list[str]:
    """What a non-adaptive sweep using the adaptive sweep's test decides at its end: the sequential rule
    (assess_holm: Holm over each arm's 2 (K - 1) pair tests at `settings.alpha`) applied once to every task.
    looks=1 (the default) spends nothing on peeking, as a sweep that looks once need not: the most the same
    test can decide on this grid, so the reach measured against it is the strict figure. looks = the adaptive
    sweep's looks gives its final-look z instead (the price of peeking left out)."""
    from elo_per_token.coordinator.adaptive import task_weights

    w = task_weights(table.families, weights)
    bounds = round_bounds(len(table.tasks), settings.rounds)
    min_tasks = bounds[min(settings.min_rounds, len(bounds)) - 1][1] if bounds else 2
    st = pair_stats(table.scores, table.tokens, w)
    return list(assess_holm(st, settings.alpha, looks, min_tasks).status)


def reach(adaptive: list[str], full: list[str]) -> tuple[int, int]:
    """(reached, decided): of the arms the full grid decides (on or off), how many the adaptive sweep
    decides the same way. An arm the adaptive sweep leaves open, or decides the other way, is not reached."""
    pairs = [(a, f) for a, f in zip(adaptive, full, strict=True) if f in (ON, OFF)]
    return sum(a == f for a, f in pairs), len(pairs)


@dataclass(frozen=True)
class ReplayOutcome:
    result: AdaptiveResult
    full_tokens: float
    truth: list[bool]  # the full grid's frontier
    full_rule: list[str]  # the full grid's decisions under the sequential rule (full_rule_decisions, 1 look)

    @property
    def reach(self) -> tuple[int, int]:
        """(reached, decided) of the full grid's decisions under the same rule (module function `reach`)."""
        return reach([r.status for r in self.result.reports], self.full_rule)

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
        result=res,
        full_tokens=float(np.nansum(table.tokens)),
        truth=full_decisions(table, weights),
        full_rule=full_rule_decisions(table, settings, weights),
    )
