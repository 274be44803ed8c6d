"""What a run's jobs compute, so a run can grow without mixing incompatible jobs.

A job's key (family/task/arm/replicate, contracts.jobs.Job.key) names *which* job it is within a run; what the
job computes also depends on settings shared by the whole run: the model and endpoint it ran against, the
plan-level generation settings, the seed, and the content of its task (prompt, reference, grader). Those are
the run's identity, recorded in the manifest (`identity`) by the first session that writes it.

A later session may add arms, budgets, tasks and replicates (new keys: only they run) or run a subset; it is
refused, naming the field, when it would change what an existing key means (another model, endpoint,
generation settings or seed, or a task whose content changed). Manifests written before the identity existed
(no `identity`) are read from their stored plan and profile; their task contents are not known, so a task
change there is not detected (documented in docs/sweep.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from elo_per_token.contracts.errors import InputError

# One digest for the coordinator, the workers and analysis (contracts.taskdigest); decode_tasks reads the
# stored record back, refusing a garbage one with its file named.
from elo_per_token.contracts.taskdigest import _digest as _digest
from elo_per_token.contracts.taskdigest import decode_tasks as _decode_tasks
from elo_per_token.contracts.taskdigest import tasks_blob_of as tasks_blob_of
from elo_per_token.contracts.tasks import Task

# Fields of the identity compared as a whole; a difference in any is refused naming it.
RUN_FIELDS = ("model", "endpoint", "protocol", "generation", "seed")
TASKS_BLOB = "identity/tasks-"  # blob name prefix: <prefix><digest>.json, {task part: content digest}


def task_part(task: Task) -> str:
    """The task's part of a job key (family/task), as contracts.jobs.Job.key builds it."""
    from elo_per_token.contracts.jobs import Job

    return "/".join(Job(run_id="x", task=task, strategy="x", budget_n=1).key.split("/")[:2])


def task_digests(tasks: Iterable[Task]) -> dict[str, str]:
    """{task part: digest of the task's whole record} — prompt, reference, grader and any other field."""
    return {task_part(t): _digest(t) for t in tasks}


def run_identity(
    plan_generation: dict[str, Any], seed: int, profile_public: dict[str, Any]
) -> dict[str, Any]:
    """The run-wide part of a job's identity (profile_public: the profile with the endpoint it runs against)."""
    return {
        "model": profile_public.get("model"),
        "endpoint": str(profile_public.get("base_url") or ""),
        "protocol": profile_public.get("protocol", "openai"),
        # What every request is sent with: the profile's defaults under the plan's (as the worker merges them).
        "generation": {**dict(profile_public.get("generation") or {}), **dict(plan_generation)},
        "seed": seed,
    }


def legacy_identity(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The identity of a run written before identities were recorded, from its stored plan and profile."""
    raw = manifest.get("plan")
    prof = manifest.get("profile")
    if not isinstance(raw, dict) or not isinstance(prof, dict):
        return None
    return run_identity(dict(raw.get("generation") or {}), int(raw.get("seed") or 0), prof)


_FIELD_NAMES = {
    "model": "profile.model",
    "endpoint": "endpoint",
    "protocol": "profile.protocol",
    "generation": "generation",
    "seed": "seed",
}


def check_compatible(
    old: dict[str, Any], new: dict[str, Any], run_id: str, *, allow_endpoint_change: bool = False
) -> None:
    """InputError naming the first run-wide field whose value would make the same job key mean another job."""
    for f in RUN_FIELDS:
        if f == "endpoint" and allow_endpoint_change:
            continue
        if old.get(f) != new.get(f):
            hint = (
                "pass --allow-endpoint-change if it serves the same model (e.g. a moved simulator)"
                if f == "endpoint"
                else f"run them as a new run: add --name {_new_name(run_id, new.get(f))} to the same `ept sweep` "
                "command (or give the plan a new name)"
            )
            raise InputError(
                f"run {run_id!r} ran with {f} {old.get(f)!r}; this session would use {new.get(f)!r}: the same job "
                f"keys would mean different jobs, mixed in one run. Extending a run may add arms, budgets, tasks "
                f"and replicates, not change what its jobs compute; {hint}",
                field=_FIELD_NAMES[f],
            )


def _new_name(run_id: str, value: Any) -> str:
    """A run name for the same plan under another model (or setting): '<run>-<model slug>', a valid name."""
    import re

    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(value)).strip("-.")[:60] if isinstance(value, str) else ""
    return f"{run_id}-{slug or 'new'}"


def check_tasks(old: dict[str, str], new: dict[str, str], run_id: str) -> None:
    """InputError naming the first task whose content changed (same family/task id, different record)."""
    changed = sorted(k for k in new.keys() & old.keys() if new[k] != old[k])
    if changed:
        raise InputError(
            f"run {run_id!r}: task {changed[0]!r} has different content than when the run used it ({len(changed)} "
            "task(s) changed: prompt, reference or grader): its done jobs would be mixed with jobs of the new "
            "content; give the plan a new name, or restore the suite",
            field="suites",
        )


def tasks_blob_name(digests: dict[str, str]) -> str:
    return f"{TASKS_BLOB}{_digest(digests)}.json"


def encode_tasks(digests: dict[str, str]) -> bytes:
    return json.dumps(digests, sort_keys=True, separators=(",", ":")).encode()


def decode_tasks(data: bytes | None, file: str = "identity/tasks") -> dict[str, str]:
    """The stored task digests; {} when there is no file (data=None), an InputError naming `file` when it is
    garbage (contracts.taskdigest.decode_tasks: never read as "no tasks known")."""
    return _decode_tasks(data, file, missing_ok=True)
