"""The replay executor: run the adaptive policy against a completed full run's stored results.

Each job returns what it returned in the full run, with its real tokens, so the savings and the agreement of
the decisions are measured on the same data without spending a token. `ept replay-adaptive RUN` answers "how
much would an adaptive sweep have saved on my last run?".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from elo_per_token.coordinator.adaptive.core import AdaptiveResult, RoundResults, round_bounds, run_adaptive
from elo_per_token.coordinator.adaptive.run_table import RunTable
from elo_per_token.coordinator.adaptive.sequential import OFF, ON, assess_holm, pair_stats, true_frontier
from elo_per_token.coordinator.adaptive.settings import AdaptiveSettings

__all__ = [
    "OrdersSummary",
    "ReplayOutcome",
    "full_decisions",
    "full_rule_decisions",
    "full_values",
    "reach",
    "replay_adaptive",
    "replay_orders",
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
    from elo_per_token.coordinator.adaptive.core import task_weights

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
    from elo_per_token.coordinator.adaptive.core import task_weights

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


def full_values(
    table: RunTable, weights: dict[str, float] | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(tokens/task [K], win balance [K, K]) of the full grid: the population a replay samples its tasks
    from, so its exact truth."""
    from elo_per_token.coordinator.adaptive.core import task_weights

    st = pair_stats(table.scores, table.tokens, task_weights(table.families, weights))
    seen = (~np.isnan(table.tokens)).sum(axis=0)
    tok = np.where(seen > 0, np.nansum(table.tokens, axis=0) / np.maximum(seen, 1), np.nan)
    return tok, np.nan_to_num(st.q)


@dataclass(frozen=True)
class OrdersSummary:
    """`ept replay-adaptive RUN --orders K`: K random task orders replayed on one stored run."""

    shares: list[float]
    classified: list[bool]  # every arm classified (no open)
    wrong: list[int]  # arms whose classification contradicts the full grid's own ε-classification
    covered: int  # intervals (tokens/task, ΔElo vs anchor) holding the full grid's values
    intervals: int
    truth: list[str]  # the full grid's ε-classification (its point values: eps_truth)
    margin: str = ""  # the margin classified at (epsilon.Margin.describe)

    def line(self) -> str:
        """Mean / median / 90th pct token share, classified share, classification error, coverage."""
        sh, k = np.asarray(self.shares), len(self.shares)
        return (
            f"{k} task orders, {self.margin}: token share mean {sh.mean():.1%}, median {np.median(sh):.1%}, 90th pct "
            f"{np.quantile(sh, 0.9):.1%}; every arm classified in {sum(self.classified)}/{k}; orders with "
            f"a classification contradicting the full grid's ({', '.join(self.truth)}): "
            f"{sum(w > 0 for w in self.wrong)}/{k}; interval coverage {self.covered}/{self.intervals} = "
            f"{self.covered / max(self.intervals, 1):.1%}"
        )


def replay_orders(
    table: RunTable, settings: AdaptiveSettings, orders: int, weights: dict[str, float] | None = None
) -> OrdersSummary:
    """Replay `orders` task orders (seeds settings.seed .. + orders - 1) and score each against the full grid's
    own values (full_values): its ε-classification (epsilon.eps_truth) and interval coverage."""
    from dataclasses import replace

    from elo_per_token.coordinator.adaptive.core import plan_margin
    from elo_per_token.coordinator.adaptive.epsilon import eps_truth, eps_wrong
    from elo_per_token.coordinator.adaptive.sequential import OPEN, elo_from_balance

    tok, bal = full_values(table, weights)
    margin = plan_margin(table.families, settings, weights)  # the sweep's own (auto: from the design)
    truth = eps_truth(tok, bal, margin)
    full_tokens = float(np.nansum(table.tokens))
    shares, classified, wrong, covered, intervals = [], [], [], 0, 0
    for k in range(orders):
        res = run_adaptive(
            table.families,
            table.arms,
            replay_runner(table),
            replace(settings, seed=settings.seed + k),
            weights=weights,
        )
        shares.append(res.tokens_spent / full_tokens if full_tokens else float("nan"))
        st = [r.status for r in res.reports]
        classified.append(OPEN not in st)
        wrong.append(sum(eps_wrong(s, t) for s, t in zip(st, truth, strict=True)))
        anchor = res.arms.index(res.anchor)
        for i, r in enumerate(res.reports):
            intervals += 1
            covered += bool(r.tokens_lo <= tok[i] <= r.tokens_hi)
            if i != anchor and r.d_elo_lo is not None and r.d_elo_hi is not None:
                intervals += 1
                covered += bool(
                    r.d_elo_lo - 1e-9 <= float(elo_from_balance(bal[i, anchor])) <= r.d_elo_hi + 1e-9
                )
    return OrdersSummary(shares, classified, wrong, covered, intervals, truth, margin.describe())
