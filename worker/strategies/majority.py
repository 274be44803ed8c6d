"""majority (self-consistency): n samples at temperature 0.7, extract final answers, vote."""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from typing import Any

from elo_per_token.worker.graders.basic import normalise
from elo_per_token.worker.graders.extract import parse_number
from elo_per_token.worker.strategies.base import (
    SAMPLE_TEMPERATURE,
    Candidate,
    JobContext,
    Strategy,
    StrategyResult,
    sample,
)


def vote_key(task: dict[str, Any], answer: str | None) -> str | None:
    """Answers that mean the same thing get the same key (numbers by value, code without blank lines/comments)."""
    if answer is None:
        return None
    gtype = task["grader"]["type"]
    if gtype == "code":
        lines = [re.sub(r"\s+#.*$", "", ln).rstrip() for ln in answer.splitlines()]
        return "\n".join(ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#"))
    numeric = gtype == "numeric" or task["grader"].get("answer", {}).get("type") == "numeric"
    if numeric:
        x = parse_number(answer)
        if x is not None:
            return f"{x:.6g}" if abs(x) < 1e15 else repr(x)
    return normalise(answer)


def calls_key(cand: Candidate) -> str:
    """BFCL tasks are answered by the calls made, not the reply text: vote on the calls (arguments parsed,
    key order and call order ignored; no call at all is an answer too)."""
    calls = []
    for c in cand.tool_calls:
        args = c.get("arguments")
        if isinstance(args, str):
            with contextlib.suppress(ValueError):  # unparsable arguments vote as their text
                args = json.loads(args or "{}")
        calls.append(json.dumps([c.get("name"), args], sort_keys=True, default=str))
    return json.dumps(sorted(calls))


def vote(task: dict[str, Any], cands: list[Candidate]) -> tuple[Candidate | None, dict[str, Any]]:
    """Most common answer wins; a tie goes to the answer seen first (lowest sample index)."""
    by_calls = task["grader"]["type"] == "bfcl"
    keys = [(calls_key(c) if c.text is not None or c.tool_calls else None) if by_calls else vote_key(task, c.answer)
            for c in cands]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return (cands[0] if cands else None), {"votes": {}, "n_valid": 0}
    first_seen = {k: keys.index(k) for k in counts}
    best = min(counts, key=lambda k: (-counts[k], first_seen[k]))
    top = dict(sorted(counts.items(), key=lambda kv: (-kv[1], first_seen[kv[0]]))[:5])
    return cands[first_seen[best]], {"votes": {k[:80]: v for k, v in top.items()}, "n_valid": sum(counts.values())}


def run(ctx: JobContext) -> StrategyResult:
    cands = sample(ctx, 0, ctx.job.budget_n, SAMPLE_TEMPERATURE)
    chosen, details = vote(ctx.task, cands)
    return StrategyResult(chosen, details)


STRATEGY = Strategy("majority", run, budget_meaning="samples n", description="n samples at T=0.7, majority vote")
