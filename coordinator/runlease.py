"""A run's lease: one session at a time runs a run's jobs.

Two `ept sweep` (or `ept retry`) sessions growing the same run each listed the run's results, saw the same
jobs missing and paid for every one of them twice (24 requests for 12 jobs). A session now holds the run's
lease from before it writes the manifest until it has compacted and analysed; a second session is refused
with the holder named (InputError: exit 2, one line).

The lease is a chain of write-once objects in the run's ledger, `lease/<generation>.json`, created the way job
objects are (ledger conditional create: a local hard link, S3 If-None-Match), so two sessions can never both
take the same generation. The newest generation is the lease. Its holder (host, pid, session start) rewrites
its own object every TTL/4 with a fresh heartbeat and marks it released when done. A lease whose heartbeat
is older than its TTL belongs to a session that died (or hangs): the next session takes the next generation.
A holder that finds a newer generation than its own has lost the lease, and its sweep stops starting jobs.

TTL: EPT_RUN_LEASE_TTL seconds (default 120). Heartbeats compare wall clocks of the two hosts: a clock skew
near the TTL makes a live lease look expired — keep hosts on NTP, or raise the TTL.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from elo_per_token.contracts import settings
from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger import Ledger

LEASE_DIR = "lease/"
SESSION_STARTED = time.time()  # this process's start: with host and pid, names the holder


def lease_ttl_s() -> float:
    """EPT_RUN_LEASE_TTL (seconds, 1..86400; default 120)."""
    return settings.read_seconds("EPT_RUN_LEASE_TTL", 1, 86400)


def _name(gen: int) -> str:
    return f"{LEASE_DIR}{gen:010d}.json"


def _generations(ledger: Ledger, run_id: str) -> list[int]:
    out = []
    for name in ledger.list_blobs(run_id, LEASE_DIR):
        stem = name[len(LEASE_DIR) :].removesuffix(".json")
        if stem.isdigit() and len(stem) == 10:
            out.append(int(stem))
    return sorted(out)


def _read(ledger: Ledger, run_id: str, gen: int) -> dict[str, Any] | None:
    """The lease object, or None when it is missing or unreadable (not a live holder: it can be taken over)."""
    try:
        d = json.loads(ledger.get_blob(run_id, _name(gen)) or b"null")
    except (ValueError, RecursionError):
        return None
    ok = (
        isinstance(d, dict)
        and isinstance(d.get("heartbeat"), int | float)
        and isinstance(d.get("ttl"), int | float)
    )
    return d if ok else None


def describe_holder(d: dict[str, Any]) -> str:
    """'host H, pid P, session started <UTC>' from a lease object (values cut short: it is read from storage)."""
    h: dict[str, Any] = d["holder"] if isinstance(d.get("holder"), dict) else {}
    started = h.get("started_at")
    when = (
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)) if isinstance(started, int | float) else "?"
    )
    return f"host {str(h.get('host'))[:80]}, pid {str(h.get('pid'))[:12]}, session started {when}"


def running_line(ledger: Ledger, run_id: str) -> str | None:
    """`ept status`'s line (rich markup) while a session runs the run: its holder and what its progress line
    says about the provider ("provider unreachable since 12:03:10, waiting (patience 10 min)"); else None."""
    from rich.markup import escape

    from elo_per_token.contracts.errors import printable

    gens = _generations(ledger, run_id)
    d = _read(ledger, run_id, gens[-1]) if gens else None
    if d is None or d.get("released") or not 0 <= time.time() - d["heartbeat"] < d["ttl"]:
        return None
    note = d.get("note")  # read from storage: shown as text, control characters replaced
    shown = f": [yellow]{escape(printable(note[:300]))}[/]" if isinstance(note, str) and note else ""
    return f"running now ({escape(printable(describe_holder(d)))}){shown}"


class RunLease:
    """The lease on one run, held by this session; a context manager (acquire on enter, release on exit)."""

    def __init__(self, ledger: Ledger, run_id: str, ttl_s: float | None = None) -> None:
        self.ledger, self.run_id = ledger, run_id
        self.ttl = lease_ttl_s() if ttl_s is None else ttl_s
        self.gen = 0
        self.lost = threading.Event()  # a newer generation exists: another session took the run over
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.holder = {"host": socket.gethostname(), "pid": os.getpid(), "started_at": SESSION_STARTED}
        # What the sweep's progress line says about the provider now ("provider unreachable since …"), for
        # `ept status` from anywhere (live_note); a change is written at once, not at the next heartbeat.
        self.note: str | None = None
        self._kick = threading.Event()

    def _body(self, released: bool = False) -> bytes:
        return json.dumps(
            {
                "holder": self.holder,
                "heartbeat": time.time(),
                "ttl": self.ttl,
                "released": released,
                "note": None if released else self.note,
            }
        ).encode()

    def set_note(self, note: str | None) -> None:
        """The provider's state as the progress line shows it (None: nothing to say); written by the heartbeat."""
        if (note or None) != self.note:
            self.note = note or None
            self._kick.set()

    def acquire(self) -> RunLease:
        """Take the lease, or InputError naming the live holder. Generations are created exclusively, so of
        two sessions taking the same free (or expired) lease exactly one succeeds; the other sees its holder."""
        for _ in range(20):  # each round: someone else created the generation we wanted; look again
            gens = _generations(self.ledger, self.run_id)
            latest = gens[-1] if gens else 0
            if latest:
                d = _read(self.ledger, self.run_id, latest)
                live = d is not None and not d.get("released") and time.time() - d["heartbeat"] < d["ttl"]
                if live and d is not None and not self._died_here(d):
                    raise InputError(
                        f"run {self.run_id!r} is being run by another session ({describe_holder(d)}, last heartbeat "
                        f"{max(0.0, time.time() - d['heartbeat']):.0f}s ago): two sessions would pay for the same "
                        f"jobs twice; wait for it to finish (or, if it died, for its lease to expire after "
                        f"{d['ttl']:g}s) and rerun",
                        field="RUN",
                    )
            if self.ledger.create_object(self.run_id, _name(latest + 1), self._body()):
                self.gen = latest + 1
                self._start_heartbeat()
                self._tidy(gens)
                return self
        raise InputError(f"run {self.run_id!r}: could not take its lease (contended)", field="RUN")

    def _died_here(self, d: dict[str, Any]) -> bool:
        """The holder ran on this host and is gone: its pid no longer exists, or it is this very process's pid
        with another session start (a restarted container whose coordinator is pid 1 again). A killed sweep
        rerun on the same machine resumes at once instead of waiting out the TTL; a holder on another host
        is judged by its heartbeat only."""
        h = d.get("holder")
        if not isinstance(h, dict) or h.get("host") != self.holder["host"]:
            return False
        pid = h.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            return False
        if pid == os.getpid():
            return h.get("started_at") != SESSION_STARTED
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:  # exists, another user's: alive
            return False
        return _is_zombie(pid)

    def _start_heartbeat(self) -> None:
        self._thread = threading.Thread(target=self._beat, name="ept-run-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.is_set():
            self._kick.wait(self.ttl / 4)
            self._kick.clear()
            if self._stop.is_set():
                return
            try:
                if _generations(self.ledger, self.run_id)[-1:] != [self.gen]:
                    self.lost.set()  # taken over after our heartbeat went stale: stop starting jobs
                    return
                self.ledger.put_blob(self.run_id, _name(self.gen), self._body())
            except Exception:  # a ledger hiccup: the next beat tries again (the TTL is 4 beats long)
                continue

    def _tidy(self, older: list[int]) -> None:
        """Delete generations below ours (they are finished or expired), so the folder stays one object."""
        for g in older:
            try:
                self.ledger.delete_blob(self.run_id, _name(g))
            except Exception:  # tidying is optional
                return

    def release(self) -> None:
        """Stop the heartbeat and mark the lease released (a lost lease is left to its new holder)."""
        self._stop.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(5)
        if not self.gen or self.lost.is_set():
            return
        with contextlib.suppress(Exception):  # unreleased, the lease expires after its TTL
            if self._wrote_nothing():
                # A session refused before it wrote a manifest (a bad plan): leave no run behind, only a lease.
                self.ledger.delete_blob(self.run_id, _name(self.gen))
                self._remove_empty_folders()
            else:
                self.ledger.put_blob(self.run_id, _name(self.gen), self._body(released=True))

    def _remove_empty_folders(self) -> None:
        """A local ledger keeps folders: the run's (empty) folder would be listed as a run."""
        root = getattr(self.ledger, "root", None)
        if root is not None:
            for d in (Path(root) / "runs" / self.run_id / LEASE_DIR, Path(root) / "runs" / self.run_id):
                with contextlib.suppress(OSError):
                    d.rmdir()  # only when empty

    def _wrote_nothing(self) -> bool:
        try:
            return self.ledger.get_manifest(self.run_id) is None
        except ValueError:  # a garbage manifest is still a run
            return False

    def __enter__(self) -> RunLease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _is_zombie(pid: int) -> bool:
    """A process that exited but was not reaped yet (a SIGKILLed child of a test or a shell) holds nothing."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False
