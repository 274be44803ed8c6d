"""Naming a run by where it lives: a run folder or an s3://…/runs/<id> URL -> (ledger root, run id)."""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

# …/runs/<id> (a run: its segments plus the objects no segment holds) or …/runs/<id>/jobs (its objects only).
_RUN_URL = re.compile(r"^(?P<ledger>.*?)/?runs/(?P<run>[^/]+?)(?P<jobs>/jobs)?/*$")


@dataclass(frozen=True)
class RunSource:
    """A ledger run to read: where its ledger is, its id, and whether only its job objects are wanted."""

    ledger_url: str  # the ledger root: a folder or s3://bucket/prefix
    run_id: str
    objects_only: bool = False  # the path named the run's jobs/ folder: ignore its segments


def run_source(p: str) -> RunSource | None:
    """A run folder or s3://…/runs/<id> URL (with /jobs: the objects only); None for anything else."""
    m = _RUN_URL.match(p)
    if not m or glob.has_magic(p):
        return None
    if p.startswith("s3://"):
        led = m.group("ledger")
        if not led.startswith("s3://") or led == "s3:/":
            led = "s3://" + p[len("s3://") :].split("/", 1)[0]
        return RunSource(led, m.group("run"), bool(m.group("jobs")))
    if "://" in p or not os.path.isdir(p):
        return None
    run_dir = p.rstrip("/")[: -len("/jobs")] if m.group("jobs") else p.rstrip("/")
    if not any(os.path.exists(os.path.join(run_dir, n)) for n in ("jobs", "compact", "manifest.json")):
        return None
    return RunSource(m.group("ledger") or ".", m.group("run"), bool(m.group("jobs")))
