"""best_of_n: n samples at temperature 0.7, reranked by a verifier; verifier cost is part of the arm's cost.

verifier = "llm"   one verifier call per candidate (role 'verifier', 'Score: x' in 0..1);
           "tests" run the task's visible tests in the sandbox (code tasks; no tokens);
           "auto"  tests when the task has visible tests, else llm ("tests" on a task without tests = llm).
Ties go to the most common answer among the tied candidates, then the lowest sample index.
"""

from __future__ import annotations

from elo_per_token.worker.graders.code import grade_code
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


def run(ctx: JobContext) -> StrategyResult:
    n, task = ctx.job.budget_n, ctx.task
    cands = sample(ctx, 0, n, SAMPLE_TEMPERATURE)
    mode = STRATEGY.param(ctx.job, "verifier")
    has_tests = task["grader"]["type"] == "code" and bool(task.get("visible_tests") or task.get("tests"))
    if mode == "auto" or (mode == "tests" and not has_tests):  # only code tasks have tests to run
        mode = "tests" if has_tests and task.get("visible_tests") else "llm"
    if mode == "tests":
        cache: dict[str, float] = {}  # identical candidates run once

        def test_score(code: str | None) -> float | None:
            if code is None:
                return None
            if code not in cache:
                cache[code] = grade_code(code, task, tests=task.get("visible_tests") or task["tests"]).score
            return cache[code]

        scores = ctx.map(test_score, [c.answer for c in cands])
    else:
        scores = llm_verify(ctx, n * sample_stride(task), cands)
    scored = [c for s, c in zip(scores, cands, strict=True) if s is not None]
    if not scored:
        return StrategyResult(cands[0], {"verifier": mode, "scores": scores, "reason": "no candidate could be scored"})
    top = max(s for s in scores if s is not None)
    # Ties (common with test pass rates) go to the most common answer among the tied, then the lowest index.
    tied = [c for c in scored if scores[c.index] == top]
    chosen, _ = vote(task, tied)
    assert chosen is not None
    return StrategyResult(chosen, {"verifier": mode, "scores": scores, "chosen_index": chosen.index})


STRATEGY = Strategy(
    "best_of_n", run, budget_meaning="samples n (plus one verifier call per sample with the llm verifier)",
    params={"verifier": "auto"}, param_choices={"verifier": ("auto", "llm", "tests")}, description="n samples at T=0.7, rerank by verifier score",
)
