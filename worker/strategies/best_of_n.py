"""best_of_n: n samples at temperature 0.7, reranked by a verifier; verifier cost is part of the arm's cost.

verifier = "llm"   one verifier call per candidate (role 'verifier', 'Score: x' in 0..1);
           "tests" run the task's visible tests in the sandbox (code tasks; no tokens);
           "auto"  tests when the task has visible tests, else llm ("tests" on a task without tests = llm).
Ties go to the most common answer among the tied candidates, then the lowest sample index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from elo_per_token.worker.graders import grader_for
from elo_per_token.worker.strategies.base import (
    SAMPLE_TEMPERATURE,
    JobContext,
    Strategy,
    StrategyResult,
    llm_verify,
    sample,
    sample_stride,
)
from elo_per_token.worker.strategies.majority import vote

Verifier = Literal["auto", "llm", "tests"]


@dataclass(frozen=True)
class BestOfNParams:
    """Checked by a model (Strategy.check)."""

    verifier: Verifier = field(default="auto", metadata={"must": f"one of: {', '.join(get_args(Verifier))}"})


def run(ctx: JobContext) -> StrategyResult:
    n, task = ctx.job.budget_n, ctx.task
    cands = sample(ctx, 0, n, SAMPLE_TEMPERATURE)
    mode: str = STRATEGY.params_of(ctx).verifier
    run_tests = grader_for(task).run_tests
    has_tests = run_tests is not None and bool(task.get("visible_tests") or task.get("tests"))
    if mode == "auto" or (mode == "tests" and not has_tests):  # only tasks whose grader runs tests have tests
        mode = "tests" if has_tests and task.get("visible_tests") else "llm"
    if mode == "tests" and run_tests is not None:  # (has_tests says run_tests is there)
        cache: dict[str, float] = {}  # identical candidates run once

        def test_score(code: str | None) -> float | None:
            if code is None:
                return None
            if code not in cache:
                cache[code] = run_tests(task, code, task.get("visible_tests") or task["tests"])
            return cache[code]

        scores = ctx.map(test_score, [c.answer for c in cands])
    else:
        scores = llm_verify(ctx, n * sample_stride(task), cands)
    scored = [c for s, c in zip(scores, cands, strict=True) if s is not None]
    if not scored:
        return StrategyResult(
            cands[0], {"verifier": mode, "scores": scores, "reason": "no candidate could be scored"}
        )
    top = max(s for s in scores if s is not None)
    # Ties (common with test pass rates) go to the most common answer among the tied, then the lowest index.
    tied = [c for c in scored if scores[c.index] == top]
    chosen, _ = vote(task, tied)
    if chosen is None:  # vote() on a non-empty list always chooses; not an assert, `python -O` would strip it
        raise RuntimeError("best_of_n: no candidate chosen among the tied top scores")
    return StrategyResult(chosen, {"verifier": mode, "scores": scores, "chosen_index": chosen.index})


STRATEGY: Strategy[BestOfNParams] = Strategy(
    "best_of_n",
    run,
    budget_meaning="samples n (plus one verifier call per sample with the llm verifier)",
    params=BestOfNParams,
    description="n samples at T=0.7, rerank by verifier score",
)
