"""greedy: one call at temperature 0 — the baseline every other arm is compared with."""

from __future__ import annotations

from elo_per_token.worker.strategies.base import JobContext, NoParams, Strategy, StrategyResult, sample


def run(ctx: JobContext) -> StrategyResult:
    (cand,) = sample(ctx, 0, 1, temperature=0.0)
    return StrategyResult(cand, {"note": cand.note} if cand.note else {})


STRATEGY: Strategy[NoParams] = Strategy(
    "greedy", run, budget_meaning="must be 1", description="one call, temperature 0", fixed_budget=1
)
