"""run_job: one (task, strategy, budget, replicate) job, end to end, as a pure function of the job and
the provider. Both the local and the distributed executors call it.
"""

from __future__ import annotations

import time

from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.records import JobResult, Outcome
from elo_per_token.contracts.secrets import scrub
from elo_per_token.contracts.tasks import Task
from elo_per_token.egress.client import ProviderClient
from elo_per_token.egress.errors import ProviderError
from elo_per_token.worker.graders import GradeResult, grade, grader_for
from elo_per_token.worker.graders.registry import GradingUnavailable
from elo_per_token.worker.sandbox.bwrap import SandboxUnavailable
from elo_per_token.worker.strategies import StrategyResult, get_strategy
from elo_per_token.worker.strategies.base import DEFAULT_CONCURRENCY, JobContext
from elo_per_token.worker.transcript import Recorder, take_evidence


def run_job(
    job: Job,
    provider: ProviderClient,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    transcript: Recorder | None = None,
) -> JobResult:
    """Run the job's strategy on its task and grade the answer.

    A ProviderError ends the job and the calls made so far (including the failed one) are kept. A failure of
    the strategy on this task — the context overflowed, or the server refused (4xx) what the strategy sent
    after it had already spent tokens — is scored as a loss (score 0, `outcome.failure` says why), so an arm
    that fails on hard tasks keeps their cost and their place in the comparison. Egress and infrastructure
    failures (credential, endpoint, unreachable, rate limit, transient) leave the outcome unscored with
    {"class", "message"} in `error`: they say nothing about the strategy. Any other failure inside the
    strategy (a tool, a grader used for selection) is a "task" error that also keeps the calls already made:
    their tokens were spent. Anything a candidate makes the grader raise is a scored loss
    (`details.grading_error`); only grading that cannot run here (GradingUnavailable, SandboxUnavailable)
    is an unscored "task" error. Bad strategy names or parameters raise
    InputError, and a code task on a machine that cannot sandbox raises SandboxUnavailable, before any call
    is made.
    """
    strategy = get_strategy(job.strategy)
    params = strategy.check(job)  # validated once, before any call; the strategy reads them from ctx
    if grader_for(job.task).needs_sandbox:
        _require_sandbox()
    ctx = JobContext(job, provider, concurrency, params)
    ctx.transcript = transcript  # worker.transcript: every call's messages and response, when kept
    started = time.time()
    try:
        result = strategy.run(ctx)
    except ProviderError as e:
        err = {"class": e.error_class, "message": scrub(e.message)}
        spent = any(c.usage for c in ctx.calls)
        if is_strategy_failure(e.error_class, spent):
            outcome = Outcome(
                None, 0.0, False, {"reason": f"failed: {e.error_class}"}, None, {**err, "scored": "loss"}
            )
        else:
            outcome = Outcome(None, None, None, {}, err)
    except Exception as e:
        msg = scrub(f"{type(e).__name__} in strategy {job.strategy}: {str(e)[:300]}")
        outcome = Outcome(None, None, None, {}, {"class": "task", "message": msg})
    else:
        outcome = _grade(job, result)
    take_evidence(outcome, transcript)  # transcript-only grader evidence never enters the job object
    calls = sorted(ctx.calls, key=lambda c: c.call_index)
    return JobResult(job, calls, outcome, started, time.time())


def is_strategy_failure(error_class: str, spent_tokens: bool) -> bool:
    """Whether a provider failure is the strategy's (scored as a loss) rather than egress/infrastructure's."""
    return error_class == "context_overflow" or (error_class == "permanent" and spent_tokens)


def _require_sandbox() -> None:
    # Candidate code is graded here unless a grader queue takes it; refuse before spending tokens if we cannot sandbox.
    from elo_per_token.worker.graders.remote import grade_queue
    from elo_per_token.worker.sandbox import bwrap

    if grade_queue() is None:
        bwrap.require()


def grading_error(task: Task, e: BaseException) -> GradeResult:
    """A candidate whose grading raised (a number past the int digit limit, arguments nested 100k deep, ...)
    is a scored loss that keeps its tokens: dropping it would drop exactly the arm's worst answers from the
    fit, and `ept retry` would pay for it again."""
    reason = scrub(f"grading raised {type(e).__name__}: {_safe_str(e)[:300]}")
    return GradeResult(
        0.0, False, {"grader": task["grader"]["type"], "reason": reason, "grading_error": True}
    )


def _safe_str(e: BaseException) -> str:
    try:
        return str(e)
    except Exception:  # an exception whose message cannot be built still needs a reason
        return "(no message)"


def _grade(job: Job, result: StrategyResult) -> Outcome:
    task, chosen = job.task, result.chosen
    details = {"strategy": result.details}
    if chosen is None:
        return Outcome(
            None, 0.0, False, {**details, "grader": task["grader"]["type"], "reason": "no candidate"}
        )
    if task["grader"]["type"] == "none":  # judge mode: scored later by pairwise judgments
        return Outcome(chosen.answer, None, None, {**details, "grader": "none"})
    try:
        g = grade(task, chosen.text, chosen.tool_calls)
    except (GradingUnavailable, SandboxUnavailable) as e:  # infrastructure: unscored, the job is retried
        return Outcome(
            chosen.answer,
            None,
            None,
            details,
            {"class": "task", "message": scrub(f"grader failed: {type(e).__name__}: {str(e)[:300]}")},
        )
    except Exception as e:  # whatever the candidate made the grader raise is the candidate's miss
        g = grading_error(task, e)
    if chosen.note:
        g.details.setdefault("note", chosen.note)
    return Outcome(chosen.answer, g.score, g.correct, {**g.details, **details})
