"""`ept sweep --dry-run`: what a sweep would run and roughly what it would cost, without one API call.

Calls per job are the arm's budget (the samples or branches a strategy asks for; a judge or a tree's
expansions can add some). Tokens per call come from the run's own results when it has any (measured on up to
SAMPLE job objects), else from the plan: the prompt's length / 4 plus the generation's max_tokens (or
DEFAULT_OUT_TOKENS), an upper-bound guess. Dollars use the profile's prices when it has them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SAMPLE = 200
DEFAULT_OUT_TOKENS = 512


@dataclass(frozen=True)
class Estimate:
    jobs: int
    done: int  # jobs of this selection already in the ledger
    to_run: int
    calls: int  # estimated calls of the jobs to run
    tokens_in: int
    tokens_out: int
    measured: bool  # tokens per call measured on the run's results (else from the plan)
    cost: float | None  # USD, None without prices

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out


def _measured(ledger: Any, run_id: str, keys: list[str]) -> tuple[float, float] | None:
    """(input, output) tokens per call on up to SAMPLE of the run's job objects; None when none is readable."""
    import json

    calls = tin = tout = 0
    for data in ledger.get_jobs(run_id, keys[:SAMPLE]) if keys else []:
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            usage = rec.get("usage") if isinstance(rec, dict) and rec.get("kind") == "call" else None
            if isinstance(usage, dict) and rec.get("role") != "judge":
                calls += 1
                tin += int(usage.get("prompt_tokens") or 0)
                tout += int(usage.get("completion_tokens") or 0)
    return (tin / calls, tout / calls) if calls else None


def estimate(plan: Any, profile_public: dict[str, Any]) -> Estimate:
    """The selection's jobs, those already done, and calls/tokens/$ for the rest (reads the ledger only)."""
    from elo_per_token.coordinator.sweep import plan_source
    from elo_per_token.ledger import open_ledger_for_reading

    stream, n = plan_source(plan)
    led = open_ledger_for_reading(plan.ledger)
    have: set[str] = set()
    if led.get_manifest(plan.run_id) is not None:
        have = set(led.iter_job_keys(plan.run_id))
    per_call = _measured(led, plan.run_id, sorted(have))
    out_guess = int(plan.generation.get("max_tokens") or DEFAULT_OUT_TOKENS)
    calls = tin = tout = to_run = 0
    for j in stream():
        if j.key in have:
            continue
        to_run += 1
        calls += j.budget_n
        if per_call is None:
            tin += j.budget_n * (len(str(j.task.get("prompt", ""))) // 4 + 1)
            tout += j.budget_n * out_guess
    if per_call is not None:
        tin, tout = int(per_call[0] * calls), int(per_call[1] * calls)
    pi, po = profile_public.get("price_in_per_1m"), profile_public.get("price_out_per_1m")
    cost = (tin * float(pi) + tout * float(po)) / 1e6 if pi is not None and po is not None else None
    return Estimate(n, n - to_run, to_run, calls, tin, tout, per_call is not None, cost)


def describe(est: Estimate, run_id: str) -> str:
    """The dry run's report, a few lines of plain text."""
    how = (
        "measured on the run's results"
        if est.measured
        else "from the plan (prompt/4 + max_tokens: an upper-bound guess)"
    )
    cost = f"${est.cost:,.2f}" if est.cost is not None else "$ unknown (the profile has no prices)"
    return (
        f"dry run of {run_id}: {est.jobs:,} jobs, {est.done:,} already done, {est.to_run:,} to run\n"
        f"estimate for the jobs to run: ~{est.calls:,} calls, ~{est.tokens:,} tokens "
        f"({est.tokens_in:,} in, {est.tokens_out:,} out; {how}), {cost}\n"
        "nothing was sent and nothing was written"
    )
