"""Outages waited out: when an endpoint that has answered before stops answering (connection refused, DNS, or
5xx on every request), the client pauses every sender, probes, and resumes when the endpoint is back.

One `Outage` per client, shared by its threads. A failed connect or a 5xx starts an outage; any answer (a
2xx, a 4xx, a 429) ends it. While it lasts, senders wait at `admit` and one of them at a time is let through
as the probe, with a growing pause between probes (from PROBE_BASE_S to PROBE_CAP_S). Attempts made during an
outage are not counted against the profile's `max_retries`: the outage is the provider's, not the request's.
After the profile's `patience` (seconds since the outage began) the waiting senders fail with the outage's
class (`unreachable`, or `transient` for 5xx) and a message that names the patience; one probe per
PROBE_CAP_S still goes through, so the run resumes if the endpoint comes back.

An endpoint never reached (a wrong port from the start) is not an outage: egress.retry's circuit fails it
fast, as a setup problem. On Celery, "reached" is shared by the workers of a profile through Redis
(`SharedReach`): a worker process that had not yet got its first answer when the provider went down waits
too, instead of failing its jobs as a setup problem.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import socket
import threading
import time
from typing import Any

from elo_per_token.egress.errors import ProviderError
from elo_per_token.egress.profiles import DEFAULT_PATIENCE_S

log = logging.getLogger("ept.provider")

PROBE_BASE_S = 0.5  # the first pause between two probes of an endpoint that is down
PROBE_CAP_S = 5.0  # the longest (a restarted server is found at most this long after it is back)
# 5xx in a row (no answer in between, across the client's threads) that start an outage: one is a hiccup (a
# provider's random 0.1 % of 500s must not pause every sender); one refused connect is enough.
FIVEXX_OUTAGE = 2


def is_outage(err: ProviderError) -> bool:
    """A failure that says the endpoint is down rather than the request is at fault: a failed connect, or a
    5xx (the server, a proxy or a gateway answering that it cannot serve)."""
    return err.error_class == "unreachable" or (
        err.error_class == "transient" and err.status is not None and err.status >= 500
    )


class SharedReach:
    """Whether any worker of this profile and endpoint got an answer: one Redis key, set once per process."""

    TTL_S = 86400

    def __init__(self, r: Any, profile: str, base_url: str) -> None:
        self._r, self.profile = r, profile
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.key = f"ept:reached:{profile}:{hashlib.sha1(base_url.encode()).hexdigest()[:12]}"

    def mark(self) -> None:
        with contextlib.suppress(Exception):  # the broker down: this process still knows for itself
            self._r.set(self.key, "1", ex=self.TTL_S)

    def report(self, state: dict[str, Any] | None) -> None:
        """This process's outage under way (None: over), for the coordinator's progress line."""
        from elo_per_token.contracts.weather import report_outage

        with contextlib.suppress(Exception):  # the broker down too: the summary still says it afterwards
            report_outage(self._r, self.profile, self.worker, state)

    def seen(self) -> bool:
        try:
            return bool(self._r.exists(self.key))
        except Exception:
            return False


def outage_text(what: str, since_wall: float, patience: float, elapsed: float) -> str:
    """'provider unreachable since 12:03:10, waiting (patience 10 min)': the progress line of a local sweep
    (Outage.describe) and of a Celery one (from the workers' reports, contracts.weather.read_outage)."""
    at = time.strftime("%H:%M:%S", time.localtime(since_wall))
    if elapsed >= patience:
        return f"provider {what} since {at}: patience ({format_patience(patience)}) spent, failing jobs"
    return f"provider {what} since {at}, waiting (patience {format_patience(patience)})"


def format_patience(seconds: float) -> str:
    """600 -> '10 min', 45 -> '45 s' (how the progress line and the messages say it)."""
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


class Outage:
    """The state of one client's endpoint: whether it was ever reached, and the outage under way, if any."""

    def __init__(
        self, patience: float = DEFAULT_PATIENCE_S, profile: str = "", shared: SharedReach | None = None
    ) -> None:
        self.patience = float(patience)
        self.profile = profile
        self.reached = False  # some request got a 2xx: from then on a failed connect is an outage
        self.shared = shared
        self.since: float | None = None  # monotonic start of the outage under way
        self.since_wall = 0.0
        self.last: ProviderError | None = None  # the outage's latest failure (its class, for expiry)
        self.outages = 0  # outages that began
        self.ended_s = 0.0  # total length of the outages that ended
        self.expired = 0  # senders failed after the patience
        self._streak = 0  # outage-like failures since the last answer
        self._probing = False
        self._next_probe = 0.0
        self._probe_wait = PROBE_BASE_S
        self._cond = threading.Condition()

    def waits(self) -> bool:
        """Whether failures now are an outage to wait out: a patience, and the endpoint answered before (here,
        or to another worker of the profile)."""
        if self.patience <= 0:
            return False
        if not self.reached and self.shared is not None and self.shared.seen():
            self.reached = True
        return self.reached

    def down(self) -> bool:
        """Whether an outage is under way."""
        return self.since is not None

    def admit(self, stop: threading.Event, attempts: int) -> bool:
        """Wait while the endpoint is down; True when this attempt is the outage's probe. Raises the outage's
        error once the patience is spent (or at a stop) — except for the probe, which still goes through."""
        with self._cond:
            while self.since is not None:
                now = time.monotonic()
                if not self._probing and now >= self._next_probe:
                    self._probing = True
                    return True
                if now - self.since >= self.patience or stop.is_set():
                    self.expired += 1
                    raise self._expired_error(attempts, stopped=stop.is_set())
                left = min(self._next_probe - now, self.since + self.patience - now)
                self._cond.wait(max(0.01, min(0.5, left)))
            return False

    def note(self, err: ProviderError | None, probe: bool) -> bool:
        """Record an attempt's outcome (None: a 2xx). True when the failure came during an outage already under
        way: the caller retries it through `admit` without counting it against max_retries."""
        was_down = self.since is not None
        out = self._note(err, probe)
        self._share(was_down, probe)
        return out

    def _note(self, err: ProviderError | None, probe: bool) -> bool:
        with self._cond:
            now = time.monotonic()
            if probe:
                self._probing = False
            if err is None or not is_outage(err):
                if err is None and not self.reached:
                    self.reached = True
                    if self.shared is not None:
                        self.shared.mark()
                if err is None or err.status is not None:
                    self._streak = 0
                if (err is None or err.status is not None) and self.since is not None:  # any answer: back
                    took = now - self.since
                    self.ended_s += took
                    self.since = None
                    log.warning("provider %s answers again after %.1fs", self.profile, took)
                    self._cond.notify_all()
                return False
            # Never answered: a setup problem, for the circuit to fail fast. Patience 0: no outage is waited out.
            if not self.waits():
                return False
            self.last = err
            self._streak += 1
            if self.since is None and err.error_class != "unreachable" and self._streak < FIVEXX_OUTAGE:
                return False
            if self.since is None:
                self.since, self.since_wall = now, time.time()
                self.outages += 1
                self._probe_wait = PROBE_BASE_S
                self._next_probe = now + PROBE_BASE_S
                log.warning("%s", self.describe())
                return False
            if probe:  # the endpoint is still down: probe less often, with jitter so fleets do not align
                self._probe_wait = min(PROBE_CAP_S, self._probe_wait * 1.5)
                self._next_probe = now + self._probe_wait * random.uniform(0.75, 1.0)
                self._cond.notify_all()
            return True

    def describe(self) -> str | None:
        """'provider unreachable since 12:03:10, waiting (patience 10 min)' while an outage lasts, else None."""
        since, state = self.since, self.state()  # read once: another thread may end the outage meanwhile
        if state is None or since is None:
            return None
        return outage_text(state["what"], state["since"], self.patience, time.monotonic() - since)

    def state(self) -> dict[str, Any] | None:
        """The outage under way for other processes to show (contracts.weather.report_outage), else None."""
        since, last = self.since, self.last
        if since is None or last is None:
            return None
        what = "unreachable" if last.error_class == "unreachable" else f"answering {last.status}"
        return {"since": self.since_wall, "what": what, "patience": self.patience}

    def _share(self, was_down: bool, probe: bool) -> None:
        """Tell the profile's other processes (the Celery coordinator's progress line) that an outage began,
        goes on (a failed probe: the report stays fresh) or ended. Outside the lock: a Redis round trip."""
        down = self.since is not None
        if self.shared is not None and (was_down != down or (down and probe)):
            self.shared.report(self.state())

    def waited_s(self) -> float:
        """Seconds of outage so far: the ended ones and the one under way."""
        since = self.since
        return self.ended_s + (time.monotonic() - since if since is not None else 0.0)

    def _expired_error(self, attempts: int, *, stopped: bool) -> ProviderError:
        last = self.last
        assert last is not None  # an outage begins with a failure
        at = time.strftime("%H:%M:%S", time.localtime(self.since_wall))
        why = (
            "stopping while it was down"
            if stopped
            else f"still down after the profile's patience ({format_patience(self.patience)}, `patience` in "
            "profiles.toml)"
        )
        return ProviderError(
            last.error_class,
            f"provider '{self.profile}' down since {at}, {why}: {last.message}",
            status=last.status,
            attempts=attempts,
        )
