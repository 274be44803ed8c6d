"""A sweep's running count: the tally of job results, the run's budget cap, the sweep's outcome, and which families failed."""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from elo_per_token.contracts.errors import EGRESS_CLASSES, ErrorClass, InputError
from elo_per_token.contracts.jobs import JobSummary
from elo_per_token.coordinator.plan import Plan

if TYPE_CHECKING:  # annotations only: these are imported where a sweep needs them
    from elo_per_token.analysis.pipeline import AnalysisResult


# With this many egress failures in a row (no success in between), the endpoint or key is wrong — from the start
# or since a key was revoked mid-run — or the server is down (every connect refused): stop spending effort.
EGRESS_ABORT_AFTER = 8


# Failures that a retry repeats exactly (same request, same refusal).
DETERMINISTIC: frozenset[ErrorClass] = frozenset({"permanent", "context_overflow"})


@dataclass
class Tally:
    """Live counters, updated from executor callbacks (any thread)."""

    total: int
    done: int = 0
    skipped: int = 0
    duplicate: int = 0
    failed: int = 0
    calls: int = 0  # every attempt's (contracts.jobs.JobSummary)
    tokens: int = 0
    spent_calls: int = 0  # of those: attempts whose calls are in spent/ objects (failed, duplicate copies)
    spent_tokens: int = 0
    # Calls billed without usable usage, at their upper bound (JobSummary est_tokens): part of the spend the cap
    # counts, beside the measured `tokens`.
    est_tokens: int = 0
    est_calls: int = 0  # jobs with such calls (the summary says how much of the spend is estimated)
    retrying: set[str] = field(default_factory=set)
    failures: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lost: dict[str, int] = field(
        default_factory=lambda: defaultdict(int)
    )  # strategy failures scored as losses
    messages: dict[str, str] = field(default_factory=dict)  # first message per error class
    egress_streak: int = 0  # credential/endpoint failures since the last success that proves egress works
    streak_since: float | None = None  # when the streak's first failure finished
    workers: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # jobs run per Celery worker
    abandoned: int = 0  # jobs still running when a stop's grace period ran out (their calls are not recorded)
    cancelled: int = 0  # queued jobs a stop kept from starting (Celery: skipped by the workers)
    cap: BudgetCap | None = None  # the run's token/cost cap, with what earlier sessions spent
    weather: dict[str, Any] | None = (
        None  # the provider client's 429s, waits and retries (ProviderClient.weather)
    )
    # Set when another session took the run's lease over (ours went stale: coordinator.runlease): stop.
    lease_lost: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, s: JobSummary) -> None:
        with self.lock:
            self.retrying.discard(s["key"])
            st = s["status"]
            if st in ("done", "duplicate"):
                # Only a job that started after the streak began proves the key and endpoint work now; one
                # already in flight when a key was revoked says nothing, and must not reset the count.
                if self.streak_since is None or float(s.get("started_at") or math.inf) >= self.streak_since:
                    self.egress_streak, self.streak_since = 0, None
            elif st == "failed" and s.get("class") in EGRESS_CLASSES:
                if self.egress_streak == 0:
                    self.streak_since = float(s.get("finished_at") or time.time())
                self.egress_streak += 1
            if st == "done":
                self.done += 1
                if lost := s.get("lost"):
                    self.lost[lost] += 1
            elif st == "skipped":
                self.skipped += 1
            elif st == "duplicate":
                self.duplicate += 1
            elif st == "cancelled":
                self.cancelled += 1
            else:
                self.failed += 1
                cls = s.get("class") or "task"
                self.failures[cls].append(s["key"])
                self.messages.setdefault(cls, s.get("message") or "")
            if (worker := s.get("worker")) and st != "skipped":
                self.workers[worker] += 1
            self.calls += int(s.get("calls") or 0)
            self.tokens += int(s.get("tokens") or 0)
            self.spent_calls += int(s.get("spent_calls") or 0)
            self.spent_tokens += int(s.get("spent_tokens") or 0)
            est = int(s.get("est_tokens") or 0)
            self.est_tokens += est
            self.est_calls += 1 if est else 0

    def retry(self, key: str) -> None:
        with self.lock:
            self.retrying.add(key)

    @property
    def finished(self) -> int:
        return self.done + self.skipped + self.duplicate + self.failed + self.cancelled

    def egress_broken(self) -> bool:
        return self.egress_streak >= EGRESS_ABORT_AFTER

    def over_budget(self) -> bool:
        """The run has spent its cap (earlier sessions plus the jobs finished in this one): start no new job."""
        return self.cap is not None and self.cap.reached(self.spend)

    @property
    def spend(self) -> int:
        """This session's spend as the cap counts it: measured tokens plus the upper bounds of calls whose usage
        was missing or invalid (conservative by construction: a provider that reports nothing is still capped)."""
        return self.tokens + self.est_tokens

    def should_stop(self) -> bool:
        lost = self.lease_lost is not None and self.lease_lost.is_set()
        return self.egress_broken() or self.over_budget() or lost


@dataclass(frozen=True)
class BudgetCap:
    """A sweep's cap on the run's total strategy tokens and/or cost. Tokens are counted as jobs finish, so a
    stop overshoots by at most the jobs running when the cap is reached (one job per worker thread). Cost is
    counted at the higher of the profile's input and output prices, and a call without usable usage at its
    upper bound (prompt estimate + max_tokens x n): the count never undercounts."""

    max_tokens: int | None = None
    max_cost: float | None = None
    price_per_token: float | None = None  # USD, the higher of the input and output prices
    prior_tokens: int = 0  # spent by earlier sessions of the run (their manifest entries)

    def token_cap(self) -> int | None:
        """The cap in tokens: max_tokens, or max_cost at the price per token, whichever is lower."""
        caps = [self.max_tokens] if self.max_tokens is not None else []
        if self.max_cost is not None and self.price_per_token:
            caps.append(math.ceil(self.max_cost / self.price_per_token))
        return min(caps) if caps else None

    def reached(self, session_tokens: int) -> bool:
        cap = self.token_cap()
        return cap is not None and self.prior_tokens + session_tokens >= cap

    def describe(self) -> str:
        parts = [
            f"{self.max_tokens:,} tokens" if self.max_tokens is not None else "",
            f"${self.max_cost:g}" if self.max_cost is not None else "",
        ]
        return " / ".join(p for p in parts if p)


@dataclass
class SweepOutcome:
    run_id: str
    ledger_url: str
    run_url: str
    n_jobs: int
    already_done: int
    tally: Tally
    elapsed_s: float
    completed: bool
    analysis: AnalysisResult | None = None
    analysis_error: str | None = None
    compact_note: str | None = None
    profile_name: str | None = None
    # The command that finishes this run, when it is not `ept retry` (the demo's simulator lives in its own
    # process: `ept demo` again resumes the run; `ept retry` would need a profile the user never set up).
    rerun_hint: str | None = None

    @property
    def ok(self) -> bool:
        return self.completed and self.tally.failed == 0

    @property
    def stopped_for_egress(self) -> bool:
        """Stopped early because credential/endpoint failures came in a row (exit 3), not by the user (130)."""
        return not self.completed and self.tally.egress_broken()

    @property
    def stopped_for_budget(self) -> bool:
        """Stopped at the run's token/cost cap: the run is analysable as it stands; a higher cap continues it."""
        return not self.completed and not self.tally.egress_broken() and self.tally.over_budget()

    @property
    def exit_code(self) -> int:
        from elo_per_token.contracts.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_STOPPED_EGRESS

        if self.stopped_for_egress:
            return EXIT_STOPPED_EGRESS
        if self.stopped_for_budget:  # the cap the user set was reached: not an error
            return EXIT_FAILED if self.tally.failed else 0
        if not self.completed:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.tally.failed else 0


def failed_families(tally: Tally) -> dict[str, str]:
    """Family -> why its jobs failed this session ("360 jobs failed (task: SandboxUnavailable: ...)"), for every
    family with a failed job; the analysis names those it then has no outcomes for (analysis.incomplete)."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for cls, keys in tally.failures.items():
        for key in keys:
            counts[key.split("/", 1)[0]][cls] += 1
    out = {}
    for fam, by_cls in counts.items():
        cls = max(by_cls, key=lambda c: by_cls[c])
        first = (tally.messages.get(cls) or "").split(": install", 1)[0][:120]
        out[fam] = f"{sum(by_cls.values())} jobs failed, {cls}" + (f": {first}" if first else "")
    return out


def budget_cap(plan: Plan, manifest: dict[str, Any], profile_public: dict[str, Any]) -> BudgetCap | None:
    """The plan's cap with what the run's earlier sessions spent (their manifest entries); None without a cap."""
    if plan.max_total_tokens is None and plan.max_cost is None:
        return None
    prices = [profile_public.get(k) for k in ("price_in_per_1m", "price_out_per_1m")]
    known = [float(p) for p in prices if isinstance(p, int | float)]
    if plan.max_cost is not None and not known:
        raise InputError(
            f"--max-cost needs the profile's prices (price_in_per_1m, price_out_per_1m in profiles.toml); "
            f"profile {profile_public.get('name')!r} has none: cap tokens with --max-tokens instead",
            field="max_cost",
        )
    sessions = [x for x in manifest.get("sessions") or [] if isinstance(x, dict)][:-1]  # the last one is this
    prior = sum(int(x.get("tokens") or 0) + int(x.get("est_tokens") or 0) for x in sessions)
    return BudgetCap(plan.max_total_tokens, plan.max_cost, max(known) / 1e6 if known else None, prior)
