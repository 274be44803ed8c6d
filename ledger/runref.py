"""Naming a run by where it lives: the one parser of "which ledger run is this?".

Two kinds of text name a run: an argument (a run folder or an s3://…/runs/<id> URL, `run_source`) and the
name of a data file read from a run (…/runs/<id>/jobs/… or …/compact/…, `run_of_file`). Both give the one
type, RunSource (ledger root, run id)."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

# …/runs/<id> (a run: its segments plus the objects no segment holds) or …/runs/<id>/jobs (its objects only).
_RUN_URL = re.compile(r"^(?P<ledger>.*?)/?runs/(?P<run>[^/]+?)(?P<jobs>/jobs)?/*$")
# A file inside a run: one of its job objects or its compacted copy.
_RUN_FILE = re.compile(r"^(?P<ledger>.*?)/?runs/(?P<run>[^/]+)/(?:jobs|compact)/")


@dataclass(frozen=True)
class RunSource:
    """A ledger run to read: where its ledger is, its id, and whether only its job objects are wanted."""

    ledger_url: str  # the ledger root: a folder or s3://bucket/prefix
    run_id: str
    objects_only: bool = False  # the path named the run's jobs/ folder: ignore its segments

    @property
    def url(self) -> str:
        """The run's folder or URL: <ledger>/runs/<id>."""
        return self.ledger_url.rstrip("/") + "/runs/" + self.run_id


def run_source(p: str) -> RunSource | None:
    """A run folder or s3://…/runs/<id> URL (with /jobs: the objects only); None for anything else.

    Args:
        p: A command-line path or URL.
    """
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


def run_of_file(f: str) -> RunSource | None:
    """The run a data file was read from (a job object or compact/ copy of a run); None for a plain log.
    Only the text is parsed: the file is not opened.

    Args:
        f: A data file's path or URL.
    """
    m = _RUN_FILE.match(f)
    return RunSource(m.group("ledger") or ".", m.group("run")) if m else None


def runs_of_files(files: Sequence[str]) -> list[RunSource]:
    """The ledger runs the given data files belong to, each once, in first-seen order (none for plain logs).

    Args:
        files: The data files' paths or URLs.
    """
    return list(dict.fromkeys(r for r in map(run_of_file, files) if r is not None))
