"""Our own retries around one provider request (the SDKs run with max_retries=0), and the circuit breaker.

Each attempt's failure is classified (egress.errors); retryable classes wait Retry-After (capped) for a 429,
else the project's one backoff formula (common.backoff). After UNREACHABLE_CIRCUIT failed connects in a
row the circuit opens: no more attempts, except one probe per CIRCUIT_PROBE_S, until one connects.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from elo_per_token.common.backoff import backoff
from elo_per_token.contracts.errors import RETRYABLE
from elo_per_token.contracts.usage import check_usage
from elo_per_token.egress.errors import (
    Discarded,
    Malformed,
    ProviderError,
    access_error,
    classify,
    discarded_call,
)
from elo_per_token.egress.outage import Outage
from elo_per_token.egress.profiles import Profile

log = logging.getLogger("ept.provider")
T = TypeVar("T")

UNREACHABLE_CIRCUIT = 8  # failed connects in a row (no response of any kind in between) that open the circuit
CIRCUIT_PROBE_S = 5.0  # while open, one attempt per this many seconds may try the endpoint again


class RateLimiter(Protocol):
    """worker.ratelimit's limiters: admission (tokens reserved), correction, a shared pause, header reading."""

    def acquire(self, est_tokens: int, stop: threading.Event | None = None) -> None: ...
    def record(self, tokens: int, reserved: int = 0) -> None: ...
    def pause(self, seconds: float, *, rate_limited: bool = True) -> None: ...
    def observe(self, headers: Mapping[str, str]) -> None: ...


@dataclass
class RetryStats:
    """The retries one client made, by the class of the failure retried, and the time spent waiting to retry
    (a 429's pause is counted by the limiter, when there is one)."""

    retries: dict[str, int] = field(default_factory=dict)
    wait_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, cls: str, wait: float) -> None:
        with self.lock:
            self.retries[cls] = self.retries.get(cls, 0) + 1
            self.wait_s += wait


def _billed_tokens(usage: Any) -> int:
    """prompt + completion tokens of a usage dict as sent (anything unusable counts 0)."""
    if not isinstance(usage, dict):
        return 0
    vals = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    return sum(int(v) for v in vals if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 40)


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait before a retry: full-jitter backoff, or a 429's Retry-After up to retry_after_cap."""

    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    retry_after_cap: float = 60.0

    def pause(self, attempt: int) -> float:
        """The backoff before retry number `attempt` (1 = the first retry)."""
        return backoff(attempt, self.backoff_base, self.backoff_cap)

    def wait_after(self, err: ProviderError, attempt: int) -> float:
        """The wait before retrying after `err`, the failure of attempt number `attempt`."""
        if err.error_class == "rate_limit" and err.retry_after is not None:
            return min(err.retry_after, self.retry_after_cap)
        return self.pause(attempt)


class Circuit:
    """Shared by every thread of one client: whether any request got a 2xx yet (a 4xx before that is an
    access problem, see access_error), and the count of failed connects in a row."""

    def __init__(self) -> None:
        self.reached = False
        self.unreachable = 0
        self.last_probe = 0.0
        self._lock = threading.Lock()

    def is_open(self) -> bool:
        """Whether UNREACHABLE_CIRCUIT connects in a row failed (no response of any kind in between)."""
        return self.unreachable >= UNREACHABLE_CIRCUIT

    def check(self, profile: Profile, attempts: int) -> None:
        """Refuse to try while the circuit is open, except for one probe per CIRCUIT_PROBE_S."""
        with self._lock:
            if not self.is_open():
                return
            now = time.monotonic()
            if now - self.last_probe >= CIRCUIT_PROBE_S:
                self.last_probe = now
                return
            n = self.unreachable
        p = profile
        raise ProviderError(
            "unreachable",
            f"circuit open: the last {n} attempts to connect to {p.base_url} (profile '{p.name}') all failed "
            "(connection refused or name not resolved); not trying again until a probe connects — check the "
            f"host/port and that the server is up (`ept doctor --profile {p.name}`)",
            attempts=attempts,
        )

    def note(self, err: ProviderError | None) -> None:
        """Record an attempt's outcome: None for a success."""
        with self._lock:
            if err is None:
                self.reached, self.unreachable = True, 0
            elif err.error_class == "unreachable":
                self.unreachable += 1
            elif err.status is not None:
                self.unreachable = 0  # the server answered: it is reachable


@dataclass
class Retrier:
    """What one client's retries share: its profile and key, the circuit, the waits and the stop flag."""

    profile: Profile
    key: str | None
    circuit: Circuit
    policy: RetryPolicy
    stopping: threading.Event
    rate_limiter: RateLimiter | None = None
    stats: RetryStats = field(default_factory=RetryStats)
    outage: Outage = field(default_factory=Outage)

    def run(
        self,
        fn: Callable[[], T],
        est_tokens: int,
        discarded: list[Discarded] | None = None,
        *,
        access_check: bool = False,
    ) -> tuple[T, int]:
        """Run fn() with classification and retries; returns (result, attempts). Malformed 2xx responses that
        were retried are appended to `discarded`; the last one's usage rides on the raised error (`.usage`).
        With access_check every 4xx is an access problem (GET /models: no request body could be at fault).
        Attempts made while the endpoint is down (egress.outage) wait at the outage's gate and do not count
        against max_retries, up to the profile's patience."""
        attempts = in_outage = 0
        while True:
            attempts += 1
            try:
                probe = self.outage.admit(self.stopping, attempts)
            except ProviderError as down:
                down.discarded = list(discarded or [])
                raise
            if not self.outage.waits():  # else an outage, waited out above
                self.circuit.check(self.profile, attempts)
            limiter = self.rate_limiter
            if limiter is not None:
                limiter.acquire(est_tokens, self.stopping)
            try:
                out = fn()
            except ProviderError:
                raise
            except Exception as e:
                err = classify(e, self.profile, self.key)
                malformed = e if isinstance(e, Malformed) else None
            else:
                self.circuit.note(None)
                self.outage.note(None, probe)
                return out, attempts
            err.attempts = attempts
            self.circuit.note(err)
            if limiter is not None:  # the reservation back, but for what a malformed reply was billed
                limiter.record(_billed_tokens(malformed.usage if malformed else None), est_tokens)
            if self.outage.note(err, probe):  # down: the gate paces the next attempt, no retry is spent
                in_outage += 1
                self.stats.add(err.error_class, 0.0)
                continue
            self._give_up_if_final(err, attempts - in_outage, malformed, discarded, access_check)
            if malformed is not None and discarded is not None:
                discarded.append(discarded_call(malformed.usage, err.message, attempts))
            self._wait_to_retry(err, attempts, discarded)

    def _wait_to_retry(self, err: ProviderError, attempts: int, discarded: list[Discarded] | None) -> None:
        """Wait before the next attempt. A 429 with a limiter pauses every sender of the profile once (the
        next acquire waits it out with the others); anything else backs off on its own."""
        wait = self.policy.wait_after(err, attempts)
        log.info("retrying %s after %.2fs (attempt %d): %s", self.profile.name, wait, attempts, err.message)
        if err.error_class == "rate_limit" and self.rate_limiter is not None:
            self.stats.add(err.error_class, 0.0)
            self.rate_limiter.pause(wait)
            stopped = self.stopping.is_set()
        else:
            self.stats.add(err.error_class, wait)
            stopped = self.stopping.wait(wait)
        if stopped:  # stopped while waiting: this attempt's error is the call's result
            err.discarded = list(discarded or [])
            raise err

    def _give_up_if_final(
        self,
        err: ProviderError,
        attempts: int,
        malformed: Malformed | None,
        discarded: list[Discarded] | None,
        access_check: bool,
    ) -> None:
        """Raise the call's error when this attempt's failure ends it: an access problem (a 4xx where no
        request body can be at fault), a class that is not retried, the retries spent, or a stop."""
        if (
            err.error_class == "permanent"
            and err.status is not None
            and 400 <= err.status < 500
            and err.param is None  # a body naming a request field: the request's fault, not the key's
            and (access_check or not self.circuit.reached)
        ):
            denied = access_error(
                err,
                self.profile,
                self.key,
                "GET /models" if access_check else "the profile's first request",
            )
            denied.discarded = list(discarded or [])
            raise denied
        if err.error_class not in RETRYABLE or attempts > self.profile.max_retries or self.stopping.is_set():
            if malformed is not None:
                err.usage, err.usage_invalid = check_usage(malformed.usage)
            err.discarded = list(discarded or [])
            raise err
