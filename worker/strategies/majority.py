"""majority (self-consistency): n samples at temperature 0.7, extract final answers, vote."""

from __future__ import annotations

from collections import Counter
from typing import Any

from elo_per_token.contracts.tasks import Task
from elo_per_token.worker.graders import grader_for
from elo_per_token.worker.graders.registry import VoteKeyFn
from elo_per_token.worker.strategies.base import (
    SAMPLE_TEMPERATURE,
    Candidate,
    JobContext,
    NoParams,
    Strategy,
    StrategyResult,
    sample,
)


def vote(task: Task, cands: list[Candidate]) -> tuple[Candidate | None, dict[str, Any]]:
    """Most common answer wins; a tie goes to the answer seen first (lowest sample index). Answers are
    compared by the grader's vote key (numbers by value, code without comments, BFCL by the calls made…)."""
    key = grader_for(task).vote_key
    keys = [_safe_key(key, task, c) for c in cands]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return (cands[0] if cands else None), {"votes": {}, "n_valid": 0}
    first_seen = {k: keys.index(k) for k in counts}
    best = min(counts, key=lambda k: (-counts[k], first_seen[k]))
    top = dict(sorted(counts.items(), key=lambda kv: (-kv[1], first_seen[kv[0]]))[:5])
    return cands[first_seen[best]], {
        "votes": {k[:80]: v for k, v in top.items()},
        "n_valid": sum(counts.values()),
    }


def _safe_key(key: VoteKeyFn, task: Task, cand: Candidate) -> str | None:
    # A key the candidate's answer makes raise (a fraction past the int digit limit, arguments nested 100k
    # deep) is no vote: the other candidates still vote and the job is still graded, never a task failure.
    try:
        return key(task, cand)
    except Exception:
        return None


def run(ctx: JobContext) -> StrategyResult:
    cands = sample(ctx, 0, ctx.job.budget_n, SAMPLE_TEMPERATURE)
    chosen, details = vote(ctx.task, cands)
    return StrategyResult(chosen, details)


STRATEGY: Strategy[NoParams] = Strategy(
    "majority", run, budget_meaning="samples n", description="n samples at T=0.7, majority vote"
)
