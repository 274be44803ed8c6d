"""Records a worker writes and the analysis reads: the ledger schema (documented in docs/schema.md).

One ledger object per job is a JSONL file whose lines are records, each tagged with `kind`:

* `kind="call"`     one API call, with `usage` as the server returned it once checked (contracts.usage):
                    invalid usage is stored as null with `usage_invalid` saying why.
* `kind="outcome"`  the job's final answer and score.
* `kind="judgment"` an explicit pairwise judgment between two arms (judge mode).

Every line repeats the job identity (`run_id`, `job_key`, `task_id`, `family`, `strategy`,
`budget_n`, `arm`, `replicate`) so a plain `polars.scan_ndjson` over a run's objects needs no joins.
The minimal call-log shape (`task_id`, `strategy`, `budget_n`, `usage.prompt_tokens`,
`usage.completion_tokens`), what an agent harness typically logs, is a subset of a call record; lines without `kind` are classified
by their fields (see analysis.io).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from elo_per_token.contracts.finite import dumps_finite
from elo_per_token.contracts.jobs import Job

SCHEMA_VERSION = 1

# Roles of a call within a job. Strategy cost = every role except "judge" (evaluation cost).
# The strategy name of judge jobs (worker.judge): their outcome line is bookkeeping, never a graded answer.
JUDGE_STRATEGY = "judge"


# Keys every ledger line carries besides its own fields: the job identity (JobResult.identity) and `kind`.
LINE_IDENTITY_KEYS = frozenset(
    ["schema", "run_id", "job_key", "task_id", "family", "strategy", "budget_n", "arm", "replicate", "kind"]
)


def reached_provider(error: Any) -> bool:
    """Whether a call (its record's `error` field) reached the provider: one whose last attempt could not even
    connect (class `unreachable`: connection refused, DNS, an open circuit) is an attempt, never a billed call.
    The one rule every count of calls uses (the sweep's summary, the spent table).

    Args:
        error: The call record's `error` field (None for a call that succeeded).
    """
    return not (isinstance(error, dict) and error.get("class") == "unreachable")


# Keyword-only: twelve fields of which several are optional ints and strings are easy to pass in the wrong
# order. Field order (and so the JSON written to the ledger) is unchanged.
@dataclass(kw_only=True)
class CallRecord:
    call_index: int
    role: str
    model: str | None
    usage: dict[str, int] | None  # as returned by the server; None = server sent none (flagged)
    latency_s: float
    attempts: int
    seed: int | None = None
    n_requested: int = 1
    n_returned: int = 1
    finish_reason: str | None = None
    error: dict[str, str] | None = None  # {"class": ..., "message": ...} when the call failed
    usage_missing: bool = False
    usage_invalid: str | None = (
        None  # the server sent usage that failed contracts.usage.check_usage (then usage=None)
    )
    # Generation settings sent with this call (temperature, max_tokens, reasoning_effort, …; contracts.generation).
    gen: dict[str, Any] = field(default_factory=dict)
    # One per returned choice (finish_reason above is the first one's): "length" = cut by max_tokens.
    finish_reasons: list[str | None] = field(default_factory=list)
    # A billed call without usable usage (usage_missing): its upper bound in tokens (prompt estimate + max_tokens
    # x n, egress.client.usage_bound), what it counts toward the run's spending cap. None when usage was measured.
    usage_estimate: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not d["gen"]:  # an empty object would be a struct without fields (Parquet cannot store one)
            del d["gen"]
        if d["usage_estimate"] is None:  # only on the calls it concerns: job objects keep their shape
            del d["usage_estimate"]
        return d


@dataclass
class Outcome:
    answer: str | None
    score: float | None  # 0..1; None when the job failed before grading
    correct: bool | None
    grader: dict[str, Any] = field(default_factory=dict)  # grader name and details (reason, tests passed…)
    error: dict[str, str] | None = None
    # A failure of the strategy on this task, scored as a loss (score 0): {"class", "message", "scored": "loss"}.
    failure: dict[str, str] | None = None


@dataclass
class JobResult:
    job: Job
    calls: list[CallRecord]
    outcome: Outcome
    started_at: float = 0.0
    finished_at: float = 0.0
    judgments: list[dict[str, Any]] = field(default_factory=list)
    # The digest of the task the job graded (coordinator.identity.task_digest), on its outcome line: analysis
    # refuses an outcome whose task is not the one the run recorded.
    task_digest: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome.error is None

    @property
    def sent_calls(self) -> int:
        """Calls that reached the server (a failed connect is an attempt, not a call)."""
        return sum(1 for c in self.calls if reached_provider(c.error))

    @property
    def tokens(self) -> int:
        """Strategy cost of this job: the sum of the calls' usage as returned (judge calls excluded)."""
        return sum(
            int(c.usage.get("prompt_tokens", 0)) + int(c.usage.get("completion_tokens", 0))
            for c in self.calls
            if c.usage is not None and c.role != "judge"
        )

    @property
    def estimated_tokens(self) -> int:
        """Strategy calls billed without usable usage, at their upper bound (CallRecord.usage_estimate): what
        they count toward a spending cap beside `tokens`, which counts only measured usage."""
        return sum(
            int(c.usage_estimate)
            for c in self.calls
            if c.usage is None and c.usage_estimate and c.role != "judge"
        )

    def identity(self) -> dict[str, Any]:
        j = self.job
        return {
            "schema": SCHEMA_VERSION,
            "run_id": j.run_id,
            "job_key": j.key,
            "task_id": j.task_id,
            "family": j.family,
            "strategy": j.strategy,
            "budget_n": j.budget_n,
            "arm": j.arm,
            "replicate": j.replicate,
        }

    def to_lines(self) -> list[dict[str, Any]]:
        ident = self.identity()
        lines = [{**ident, "kind": "call", **c.to_dict()} for c in self.calls]
        o = asdict(self.outcome)
        digest = {"task_digest": self.task_digest} if self.task_digest else {}
        lines.append(
            {
                **ident,
                "kind": "outcome",
                **o,
                "started_at": self.started_at,
                "finished_at": self.finished_at,
                **digest,
            }
        )
        lines.extend({**ident, "kind": "judgment", **jd} for jd in self.judgments)
        return lines

    def to_jsonl(self) -> bytes:
        """The job object's bytes: never a NaN or Infinity token (contracts.finite), which would make a write-once
        object that `ept analyze` can never read."""
        return "".join(dumps_finite(x, sort_keys=True) + "\n" for x in self.to_lines()).encode()

    @classmethod
    def from_lines(cls, lines: list[dict[str, Any]], job: Job) -> JobResult:
        """The result to_lines wrote: call, judgment and outcome lines back into records.

        Args:
            lines: The job object's lines, parsed.
            job: The job the lines belong to.
        """
        calls, outcome, judgments, started, finished, digest = [], None, [], 0.0, 0.0, None
        call_fields = set(CallRecord.__dataclass_fields__)
        out_fields = set(Outcome.__dataclass_fields__)
        for rec in lines:
            if rec.get("kind") == "call":
                calls.append(CallRecord(**{k: v for k, v in rec.items() if k in call_fields}))
            elif rec.get("kind") == "outcome":
                outcome = Outcome(**{k: v for k, v in rec.items() if k in out_fields})
                started, finished = rec.get("started_at", 0.0), rec.get("finished_at", 0.0)
                digest = rec.get("task_digest")
            elif rec.get("kind") == "judgment":
                judgments.append({k: v for k, v in rec.items() if k not in LINE_IDENTITY_KEYS})
        if outcome is None:
            raise ValueError(f"job {job.key}: no outcome line")
        return cls(job, calls, outcome, started, finished, judgments, digest)
