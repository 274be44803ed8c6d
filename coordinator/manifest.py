"""The run manifest: what was run, with which code and endpoint — never a secret."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.manifest import profile_prices
from elo_per_token.contracts.secrets import scrub
from elo_per_token.contracts.tasks import Task
from elo_per_token.coordinator.plan import Plan
from elo_per_token.ledger import Ledger


def code_version(root: Path | None = None) -> dict[str, str | None]:
    """The package version, and the git commit when the code runs from a checkout of this project (root: the
    folder holding the stage folders; default: this file's). An installed package sits inside whatever
    repository holds the user's virtual environment: that repository's commit says nothing about ept's code,
    so it is recorded only when the checkout's top level is the package's own root and is this project."""
    from elo_per_token import __version__

    root = (root or Path(__file__).resolve().parents[1]).resolve()
    return {"version": __version__, "git_commit": _checkout_commit(root)}


def _checkout_commit(root: Path) -> str | None:
    try:
        pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if 'name = "elo-per-token"' not in pyproject:
        return None
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != root:
        return None
    return lines[1]


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def analysis_settings(plan: Plan, profile_public: dict[str, Any]) -> dict[str, Any]:
    """The settings the run's table is computed with, as plain data in its manifest: `ept report RUN` (the
    analysis stage) reads them from there and needs no plan parser of the coordinator's."""
    return {
        "weights": dict(sorted(plan.weights.items())),
        "anchor": plan.anchor,
        "rounds": plan.bootstrap_rounds,
        "seed": plan.seed,
        "prices": profile_prices(profile_public),
    }


def build_manifest(
    plan: Plan, profile_public: dict[str, Any], n_jobs: int, executor: str, tasks_blob: str | None = None
) -> dict[str, Any]:
    """A new run's manifest; its one session records the endpoint and model it ran against."""
    from elo_per_token.coordinator.identity import run_identity

    now = time.time()
    identity = run_identity(plan.generation, plan.seed, profile_public)
    if tasks_blob:
        identity["tasks_blob"] = tasks_blob
    return {
        "run_id": plan.run_id,
        "plan_digest": plan.digest,
        "plan_source": plan.source,
        "plan": plan.raw,
        "ledger": plan.ledger,
        "code": code_version(),
        "profile": profile_public,
        "analysis": analysis_settings(plan, profile_public),
        "identity": identity,
        "n_jobs": n_jobs,
        "started_at": _iso(now),
        # This session declares its job keys before writing any (ledger/keyspace.py): a reader may trust the
        # declarations only if every session of the run did.
        "sessions": [
            {
                "started_at": _iso(now),
                "executor": executor,
                "declares_keys": True,
                "endpoint": identity["endpoint"],
                "model": identity["model"],
                "profile": profile_public.get("name"),
            }
        ],
    }


def write_manifest(
    ledger: Ledger,
    plan: Plan,
    profile_public: dict[str, Any],
    n_jobs: int,
    executor: str,
    *,
    tasks: list[Task] | None = None,
    allow_endpoint_change: bool = False,
) -> dict[str, Any]:
    """Create the manifest, or extend the run: check that this session computes the same jobs under the same
    keys (coordinator.identity: model, endpoint, generation settings, seed, task contents), then record the
    (possibly grown) plan and a session entry. Arms, budgets, tasks and replicates may be added."""
    from elo_per_token.coordinator import identity as ident

    digests = ident.task_digests(tasks) if tasks is not None else None
    blob = ident.tasks_blob_name(digests) if digests is not None else None
    new = build_manifest(plan, profile_public, n_jobs, executor, blob)
    old = ledger.get_manifest(plan.run_id)
    if old is not None:
        new = _extend(ledger, plan.run_id, old, new, digests, allow_endpoint_change)
    if digests is not None:
        ledger.put_blob(plan.run_id, str(new["identity"]["tasks_blob"]), ident.encode_tasks(digests))
    # Defence in depth: nothing that looks like a key goes into the ledger.
    import json

    text = scrub(json.dumps(new, sort_keys=True, default=str))
    ledger.put_manifest(plan.run_id, json.loads(text))
    return new


def _extend(
    ledger: Ledger,
    run_id: str,
    old: dict[str, Any],
    new: dict[str, Any],
    digests: dict[str, str] | None,
    allow_endpoint_change: bool,
) -> dict[str, Any]:
    """The manifest of a run that already exists, after checking the new session against it."""
    from elo_per_token.contracts.taskdigest import decode_tasks as _decode_tasks
    from elo_per_token.coordinator import identity as ident

    old_id = old.get("identity") or ident.legacy_identity(old)
    if old_id is None:
        raise InputError(
            f"run {run_id!r} in {ledger.url} has a manifest without its plan or profile: "
            "give the plan a new name to start a new run",
            field="name",
        )
    ident.check_compatible(old_id, new["identity"], run_id, allow_endpoint_change=allow_endpoint_change)
    # A garbage identity entry or digest file is refused naming it: read as "no tasks known", it switched the
    # task-change check off.
    old_blob = ident.tasks_blob_of({"identity": old_id}, ledger.blob_url(run_id, "manifest.json"))
    if digests is not None and old_blob:
        # Strict: a record the manifest names but that is missing is refused as well.
        old_tasks = _decode_tasks(ledger.get_blob(run_id, old_blob), ledger.blob_url(run_id, old_blob))
        ident.check_tasks(old_tasks, digests, run_id)
        digests.update({k: v for k, v in old_tasks.items() if k not in digests})  # the run's tasks: a union
        new["identity"]["tasks_blob"] = ident.tasks_blob_name(digests)
    elif old_blob:
        new["identity"]["tasks_blob"] = old_blob
    # The endpoint recorded is the run's first (an allowed change shows in the session entries).
    identity = {**new["identity"], "endpoint": old_id.get("endpoint", new["identity"]["endpoint"])}
    return {
        **old,
        "sessions": [*old.get("sessions", []), *new["sessions"]],
        "profile": new["profile"],
        "identity": identity,
        "plan": new["plan"],
        "plan_digest": new["plan_digest"],
        "plan_source": new["plan_source"],
        "analysis": new["analysis"],
        "n_jobs": max(int(old.get("n_jobs") or 0), int(new["n_jobs"])),
    }
