"""Judge mode: pairwise LLM judging of arms' answers for tasks without a reference.

Each pair is asked in both orders (arm_a shown as A, then arm_b shown as A) so position bias cancels:
an arm wins the pair only when the two orders do not contradict it; disagreement is a tie. Judge calls
have role 'judge' — evaluation cost, kept out of every arm's token cost — and the result is one
judgment record per pair, {task_id, arm_a, arm_b, winner in A/B/tie}, which the analysis reads as an
explicit pairwise outcome (ledger kind "judgment").
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.prompts import judge_messages, parse_winner
from elo_per_token.contracts.records import JUDGE_STRATEGY, JobResult, Outcome
from elo_per_token.contracts.secrets import scrub
from elo_per_token.contracts.tasks import Task
from elo_per_token.egress.client import ProviderClient
from elo_per_token.egress.errors import ProviderError
from elo_per_token.worker.strategies.base import JobContext


def combine(first: str | None, second: str | None) -> str:
    """first: verdict with arm_a shown as A; second: verdict with arm_b shown as A. Returns A/B/tie for arm_a/arm_b."""
    votes = {"A": 0, "B": 0}
    if first in ("A", "B"):
        votes[first] += 1
    if second in ("A", "B"):
        votes["B" if second == "A" else "A"] += 1
    if votes["A"] > votes["B"]:
        return "A"
    if votes["B"] > votes["A"]:
        return "B"
    return "tie"


def judge_job(run_id: str, task: Task, seed: int = 0, profile: str = "default") -> Job:
    """The job that judges one task's answers (its key and seeds derive like any other job's)."""
    return Job(run_id=run_id, task=task, strategy=JUDGE_STRATEGY, budget_n=1, seed=seed, profile=profile)


def run_judgments(job: Job, answers: dict[str, str], provider: ProviderClient) -> JobResult:
    """Judge every pair of arms' answers to job.task (arms in sorted order; pair k uses call indices 2k, 2k+1)."""
    ctx = JobContext(job, provider)
    pairs = list(itertools.combinations(sorted(answers), 2))
    started = time.time()

    def one(k_pair: tuple[int, tuple[str, str]]) -> dict[str, Any]:
        k, (a, b) = k_pair
        r1 = ctx.chat(2 * k, "judge", judge_messages(job.task, answers[a], answers[b]), temperature=0.0)
        r2 = ctx.chat(2 * k + 1, "judge", judge_messages(job.task, answers[b], answers[a]), temperature=0.0)
        v1, v2 = parse_winner(r1.choices[0].text), parse_winner(r2.choices[0].text)
        return {
            "task_id": job.task_id,
            "arm_a": a,
            "arm_b": b,
            "winner": combine(v1, v2),
            "verdicts": [v1, v2],
        }

    try:
        judgments = ctx.map(one, list(enumerate(pairs)))
        outcome = Outcome(None, None, None, {"grader": "judge", "pairs": len(pairs)})
    except ProviderError as e:
        judgments = []
        outcome = Outcome(
            None, None, None, {"grader": "judge"}, {"class": e.error_class, "message": scrub(e.message)}
        )
    calls = sorted(ctx.calls, key=lambda c: c.call_index)
    return JobResult(job, calls, outcome, started, time.time(), judgments)
