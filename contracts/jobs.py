"""The job: one (task, strategy, budget, replicate) unit of work, as it travels coordinator -> queue -> worker.

A job is plain JSON (Celery uses the JSON serializer only). It carries the task itself so a
worker needs no access to the coordinator's suite files, and the *name* of a provider profile,
never a key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Literal, NotRequired, TypedDict

from elo_per_token.contracts.generation import label
from elo_per_token.contracts.tasks import Task


def arm_label(strategy: str, budget_n: int, variant: str = "") -> str:
    """Canonical arm name. An arm is (strategy, budget[, variant]) — never strategy alone.

    Args:
        strategy: The strategy's name.
        budget_n: The strategy's budget (samples, steps, ...).
        variant: params_variant of the other parameters ('' when none).
    """
    base = f"{strategy}@{budget_n}"
    return f"{base}[{variant}]" if variant else base


def params_variant(params: dict[str, Any]) -> str:
    """Stable short label for non-budget strategy parameters (e.g. tree depth), '' when none.

    Args:
        params: The arm's strategy parameters (the budget included, and left out of the label).
    """
    if not params:
        return ""
    return ",".join(f"{k}={params[k]}" for k in sorted(params))


def cancel_key(run_id: str) -> str:
    """Redis key (on the broker) that marks a run's queued Celery jobs as cancelled: the coordinator sets it when
    it is stopped (Ctrl-C/SIGTERM), workers skip jobs of the run while it exists, the next session clears it.

    Args:
        run_id: The run's id.
    """
    return f"ept:cancel:{run_id}"


def worker_error_key(queue: str) -> str:
    """Redis key (on the broker) where a worker that cannot start for `queue` leaves its reason, so a coordinator
    waiting on that queue can name the cause (coordinator.consumers). Prefixed by the queue's name so a grader
    whose broker user may touch only its queue's keys (`~grade*`, deploy/README.md "Broker users") can write it.

    Args:
        queue: The Celery queue the worker was started for.
    """
    return f"{queue}.ept-worker-error"


def derive_seed(*parts: object) -> int:
    """A 31-bit seed derived from any parts; the same parts always give the same seed.

    Args:
        *parts: Any values with a stable repr (the run's seed, a job key, a call index...).
    """
    h = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF


def job_key(family: str, task_id: str, arm: str, replicate: int) -> str:
    """The job key of (family, task, arm label, replicate): Job.key, also for readers that know only a record's
    labels (`ept view` finds a job's objects from an outcome row).

    Args:
        family: The task's family.
        task_id: The task's id.
        arm: The arm label (arm_label).
        replicate: The replicate number (0 for the first run of a (task, arm)).
    """
    from elo_per_token.contracts.keys import key_component as kc

    arm = arm.replace("@", "_n").replace("[", "_").replace("]", "").replace(",", "_").replace("=", "-")
    # Generation labels may carry other characters (extra_body values); plain arms are unchanged by this.
    arm = "".join(c if c.isalnum() or c in "-_." else "_" for c in arm)
    safe_task = "".join(c if c.isalnum() or c in "-_." else "_" for c in task_id)
    return f"{kc(family)}/{kc(safe_task)}/{kc(arm)}/r{replicate}"


@dataclass(frozen=True)
class Job:
    run_id: str
    task: Task  # a validated task record (see contracts.tasks)
    strategy: str
    budget_n: int
    replicate: int = 0
    params: dict[str, Any] = field(default_factory=dict)  # strategy parameters other than the budget
    seed: int = 0  # run seed; per-call seeds derive from (seed, job key, call index)
    profile: str = "default"  # profile NAME; credentials are resolved by the worker
    # Generation settings (contracts.generation): `gen` from the arm (part of the arm label), `base_gen` from
    # the plan (the same for every arm). The worker merges profile < base_gen < gen.
    gen: dict[str, Any] = field(default_factory=dict)
    base_gen: dict[str, Any] = field(default_factory=dict)

    @property
    def task_id(self) -> str:
        return str(self.task["task_id"])

    @property
    def family(self) -> str:
        return str(self.task["family"])

    @property
    def variant(self) -> str:
        return ",".join(x for x in (params_variant(self.params), label(self.gen)) if x)

    @property
    def arm(self) -> str:
        return arm_label(self.strategy, self.budget_n, self.variant)

    @cached_property
    def key(self) -> str:
        """Deterministic, path-safe job key: the same plan always yields the same keys. Every part goes
        through `key_component` (contracts.keys), so a hostile family or task id cannot leave the run.
        Computed once per Job (a worker reads it a dozen times per job: claim, journal, ledger, summary)."""
        return job_key(self.family, self.task_id, self.arm, self.replicate)

    def call_seed(self, call_index: int) -> int:
        """The seed of call `call_index` of this job: derived from the job's seed and key.

        Args:
            call_index: The call's index within the job (0, 1, ...).
        """
        return derive_seed(self.seed, self.key, call_index)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Job:
        """The job to_dict wrote.

        Args:
            d: The dict to_dict wrote (e.g. read back from a Celery message).
        """
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


class CeleryJobContextDict(TypedDict):
    """The job context as it travels in a Celery message (the task's second argument): plain JSON.

    `clear_failure` is present (and true) only for a job with a failure object from an earlier attempt, and
    `max_attempts` only when it differs from the worker's default of 3, so the messages of an ordinary job are
    the same four keys they always were: a worker and a coordinator of the same version interoperate.
    """

    ledger: str
    base_url: str | None
    rpm: int | None
    tpm: int | None
    clear_failure: NotRequired[bool]
    max_attempts: NotRequired[int]
    check_ledger: NotRequired[bool]
    transcripts: NotRequired[bool]
    budget_tokens: NotRequired[int]


DEFAULT_MAX_ATTEMPTS = 3
# The most jobs one Celery message carries (the plan's jobs_per_message; worker.celery_batch refuses more).
MAX_JOBS_PER_MESSAGE = 64


def budget_key(run_id: str) -> str:
    """Redis key (on the broker) counting the tokens a run has spent, for its budget cap: the coordinator sets
    it to what earlier sessions spent, workers add each job's tokens and start no job once it reaches the cap.

    Args:
        run_id: The run's id.
    """
    return f"ept:spent:{run_id}"


@dataclass(frozen=True)
class CeleryJobContext:
    """What a Celery worker needs besides the job: where results go and how to reach the provider.

    Built by the coordinator (coordinator.celery_exec), read by the worker (worker.celery_job.celery_run_job); on
    the wire it is `to_dict()` (Celery sends JSON only), never this object. Not to be confused with
    worker.strategies.base.JobContext, what a strategy sees while it runs a job.
    """

    # Both used by a worker only if its own allow-lists name them (worker.trust: EPT_WORKER_LEDGERS,
    # EPT_WORKER_BASE_URLS): anyone who can publish to the broker can write a context.
    ledger: str  # ledger URL the worker writes the job's object (or failure) to
    base_url: str | None = None  # --profile-url-override: the profile's requests go here instead
    rpm: int | None = None  # the plan's rate limits for the profile (None: the profile's own)
    tpm: int | None = None
    # The job has a failure object from an earlier attempt, deleted once it succeeds (no blind DELETE otherwise).
    clear_failure: bool = False
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    # Check the ledger before the job's first API call (a job that finished elsewhere never spends tokens
    # twice). False only from a run's first session, where nothing can have finished a job before its first
    # delivery (coordinator.sweep.execute); absent on the wire means True, so older coordinators keep it.
    check_ledger: bool = True
    # Store each job's transcript beside its result (contracts.transcripts); on the wire only when false.
    transcripts: bool = True
    # The run's token cap (coordinator.sweep_tally.BudgetCap, $ converted at the profile's price): a worker starts no
    # job of the run once budget_key(run_id) reaches it. None: no cap (absent on the wire).
    budget_tokens: int | None = None

    def to_dict(self) -> CeleryJobContextDict:
        d: CeleryJobContextDict = {
            "ledger": self.ledger,
            "base_url": self.base_url,
            "rpm": self.rpm,
            "tpm": self.tpm,
        }
        if self.clear_failure:
            d["clear_failure"] = True
        if self.max_attempts != DEFAULT_MAX_ATTEMPTS:
            d["max_attempts"] = self.max_attempts
        if not self.check_ledger:
            d["check_ledger"] = False
        if not self.transcripts:
            d["transcripts"] = False
        if self.budget_tokens is not None:
            d["budget_tokens"] = self.budget_tokens
        return d

    @classmethod
    def from_dict(cls, d: CeleryJobContextDict | dict[str, Any]) -> CeleryJobContext:
        """The worker's reading of a message's context: `ledger` is required (KeyError otherwise, as before);
        the rest default when absent, and keys it does not know are ignored.

        Args:
            d: The dict to_dict wrote (e.g. read back from a Celery message).
        """
        return cls(
            ledger=d["ledger"],
            base_url=d.get("base_url"),
            rpm=d.get("rpm"),
            tpm=d.get("tpm"),
            clear_failure=bool(d.get("clear_failure")),
            max_attempts=int(d.get("max_attempts", DEFAULT_MAX_ATTEMPTS)),
            check_ledger=bool(d.get("check_ledger", True)),
            transcripts=bool(d.get("transcripts", True)),
            budget_tokens=None if d.get("budget_tokens") is None else int(d["budget_tokens"]),
        )


JobStatus = Literal["done", "duplicate", "skipped", "cancelled", "failed"]

# What a worker reports for one job (worker.lifecycle.perform_job; through the Celery result backend as JSON) and
# what the coordinator tallies (coordinator.sweep_tally.Tally.add). Functional syntax because one key is `class`.
JobSummary = TypedDict(
    "JobSummary",
    {
        "key": str,  # Job.key
        "status": JobStatus,  # done / duplicate (another copy landed first) / skipped (already in the ledger) / …
        "calls": int,  # calls that reached the server, every attempt's (failed ones included)
        "tokens": int,  # strategy tokens as the server reported them (judge calls excluded), every attempt's
        "class": str | None,  # a contracts.errors.ErrorClass when status is "failed"
        "message": str | None,  # why it failed (scrubbed of keys)
        "attempts": NotRequired[int],  # attempts of the whole job (the worker's retries)
        "started_at": NotRequired[float],
        "finished_at": NotRequired[float],
        "lost": NotRequired[str | None],  # a strategy failure scored as a loss (e.g. context_overflow)
        "worker": NotRequired[str | None],  # the Celery worker's hostname
        # Of calls/tokens: those of attempts whose result is not the job's object (failed attempts, a copy that
        # lost the race), recorded in the run's spent/ objects (contracts.spent).
        "spent_calls": NotRequired[int],
        "spent_tokens": NotRequired[int],
        # Tokens of calls billed without usable usage, at their upper bound (JobResult.estimated_tokens):
        # counted toward a spending cap beside `tokens` (measured only).
        "est_tokens": NotRequired[int],
    },
)
