"""Spent records: the calls of a job attempt whose result is not the job's object, kept so every billed call is
in the ledger whatever happens to its job.

A job object (jobs/<key>.jsonl) holds the calls of the attempt that succeeded. Every other attempt that made
calls — one that failed (and was retried, resumed or given up), or a second copy that lost the race to the
conditional create — writes ONE write-once object `spent/<attempt id>.jsonl` in the run: a header line
(`kind: "attempt"`: job key, arm, why it ended) followed by the attempt's call lines, exactly as they would
appear in a job object. Names are unique per attempt, so nothing ever overwrites or deletes one: a later
success of the job leaves the spend of its failed attempts where it is. Analysis adds them to the token and
cost totals by arm, marked as spent on failed attempts (analysis.spent).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from elo_per_token.contracts.records import reached_provider

SPENT_DIR = "spent/"
SPENT_SUFFIX = ".jsonl"
# Why an attempt's calls are not in the job's object.
# "lost": journaled by a worker that died mid-job, recovered by the job's next delivery (worker.journal).
SPENT_REASONS = ("failed", "duplicate", "lost")


def spent_bytes(
    lines: list[dict[str, Any]], *, reason: str, error_class: str | None, attempt: int, at: float
) -> bytes:
    """The object for one attempt: a header, then its call lines (an outcome line, if any, is dropped: the
    attempt's outcome is the header's `reason` and `class`). `lines` are JobResult.to_lines() of the attempt.

    Args:
        lines: JobResult.to_lines() of the attempt.
        reason: Why the attempt's calls are spent: one of SPENT_REASONS.
        error_class: The attempt's error class (None for a duplicate).
        attempt: The attempt's number (1-based).
        at: When the attempt ended (time.time()).
    """
    if reason not in SPENT_REASONS:
        raise ValueError(f"unknown spent reason {reason!r}")
    calls = [x for x in lines if x.get("kind") == "call"]
    ident = {
        k: v
        for k, v in (lines[0] if lines else {}).items()
        if k
        in ("schema", "run_id", "job_key", "task_id", "family", "strategy", "budget_n", "arm", "replicate")
    }
    head = {
        **ident,
        "kind": "attempt",
        "reason": reason,
        "class": error_class,
        "attempt": attempt,
        "at": at,
        "calls": len(calls),
    }
    return "".join(_dump(x) + "\n" for x in [head, *calls]).encode()


def _dump(x: dict[str, Any]) -> str:
    # Finite numbers only (a provider's NaN must not make the object unreadable): non-finite become null.
    try:
        return json.dumps(x, sort_keys=True, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(x), sort_keys=True, allow_nan=False)


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def parse_spent(data: bytes, name: str = "spent object") -> list[dict[str, Any]]:
    """The call lines of one spent object, each tagged `spent_reason` (and `spent_class`); a malformed object
    raises ValueError naming it and the line (a ledger written by this tool never has one).

    Args:
        data: The spent object's bytes.
        name: How to name the object in an error.
    """
    out: list[dict[str, Any]] = []
    head: dict[str, Any] | None = None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{name}: not UTF-8 ({e.reason} at byte {e.start})") from None
    for i, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            x = json.loads(raw, parse_constant=_refuse_constant)
        except ValueError as e:
            raise ValueError(f"{name}:{i}: not JSON ({e})") from None
        if not isinstance(x, dict):
            raise ValueError(f"{name}:{i}: a line must be a JSON object")
        if head is None:
            if x.get("kind") != "attempt":
                raise ValueError(f"{name}:{i}: field 'kind': the first line must be the attempt header")
            head = x
            continue
        if x.get("kind") != "call":
            raise ValueError(
                f"{name}:{i}: field 'kind': expected a call line, got {str(x.get('kind'))[:40]!r}"
            )
        if (why := implausible_usage(x.get("usage"))) is not None:
            raise ValueError(f"{name}:{i}: field 'usage': {why}")
        out.append({**x, "spent_reason": head.get("reason"), "spent_class": head.get("class")})
    return out


def implausible_usage(u: Any) -> str | None:
    """Why a call line's usage cannot be a bill (a count over contracts.usage.MAX_CALL_TOKENS: 10^15 tokens
    would show as "$3,000,000,000"), else None. Other malformed usage (a string, a negative, a missing field)
    counts 0 tokens, as a call without usage does (spent_usage_totals).

    Args:
        u: A call line's `usage` field (any value).
    """
    from elo_per_token.contracts.usage import MAX_CALL_TOKENS

    if not isinstance(u, dict):
        return None
    for field in ("prompt_tokens", "completion_tokens", "total_tokens"):
        v = u.get(field)
        if isinstance(v, int | float) and not isinstance(v, bool) and v > MAX_CALL_TOKENS:
            return f"{field} absurd ({v:.3g} > {MAX_CALL_TOKENS:,} per call)"
    return None


def _refuse_constant(c: str) -> float:
    raise ValueError(f"non-finite number {c}")


def spent_usage_totals(lines: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per arm: calls (that reached the provider: billed or answered), unsent (attempts that never reached
    it: connection refused, an open circuit — not billed), prompt_tokens, completion_tokens and tokens of spent
    call lines (judge calls excluded from tokens, as in analysis.tokens; counted in calls).

    Args:
        lines: Call lines from parse_spent.
    """
    out: dict[str, dict[str, int]] = {}
    for x in lines:
        row = out.setdefault(
            str(x.get("arm")),
            {"calls": 0, "unsent": 0, "prompt_tokens": 0, "completion_tokens": 0, "tokens": 0},
        )
        row["calls" if reached_provider(x.get("error")) else "unsent"] += 1
        u = x.get("usage")
        if not isinstance(u, dict) or x.get("role") == "judge":
            continue
        p, c = _count(u.get("prompt_tokens")), _count(u.get("completion_tokens"))
        row["prompt_tokens"] += p
        row["completion_tokens"] += c
        row["tokens"] += p + c
    return out


def _count(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        return 0
    return int(v)
