"""The run manifest: what was run, with which code and endpoint — never a secret."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.ledger import Ledger
from elo_per_token.contracts.secrets import scrub
from elo_per_token.coordinator.plan import Plan


def code_version() -> dict[str, str | None]:
    from elo_per_token.ept import __version__

    commit = None
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=5
        )
        commit = out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"version": __version__, "git_commit": commit}


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def build_manifest(plan: Plan, profile_public: dict[str, Any], n_jobs: int, executor: str) -> dict[str, Any]:
    now = time.time()
    return {
        "run_id": plan.run_id,
        "plan_digest": plan.digest,
        "plan_source": plan.source,
        "plan": plan.raw,
        "ledger": plan.ledger,
        "code": code_version(),
        "profile": profile_public,
        "n_jobs": n_jobs,
        "started_at": _iso(now),
        # This session declares its job keys before writing any (analysis/keyspace.py): a reader may trust the
        # declarations only if every session of the run did.
        "sessions": [{"started_at": _iso(now), "executor": executor, "declares_keys": True}],
    }


def write_manifest(
    ledger: Ledger, plan: Plan, profile_public: dict[str, Any], n_jobs: int, executor: str
) -> dict[str, Any]:
    """Create the manifest, or on resume check the plan is the same and append a session entry."""
    new = build_manifest(plan, profile_public, n_jobs, executor)
    old = ledger.get_manifest(plan.run_id)
    if old is not None:
        if old.get("plan_digest") != plan.digest:
            raise InputError(
                f"run {plan.run_id!r} already exists in {ledger.url} with a different plan "
                "(jobs, suites, seed or profile changed): give the plan a new name to start a new run",
                file=plan.source, field="name",
            )  # fmt: skip
        new = {**old, "sessions": [*old.get("sessions", []), *new["sessions"]], "profile": profile_public}
    # Defence in depth: nothing that looks like a key goes into the ledger.
    import json

    text = scrub(json.dumps(new, sort_keys=True, default=str))
    ledger.put_manifest(plan.run_id, json.loads(text))
    return new
