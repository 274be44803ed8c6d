"""A run's record of its tasks: the digest of each task's whole record (prompt, reference, grader, ...),
stored in the run's ledger as identity/tasks-<digest>.json and named by the manifest's identity.tasks_blob.

One definition for everyone who checks a task against its run: the coordinator (a task whose content changed
is refused, coordinator.identity), the workers (a message whose task is not the recorded one is not graded,
worker.taskcheck) and analysis (an outcome whose digest is not the recorded one is refused). A missing or
garbage record is an InputError naming its file: read as "no tasks known" it switched those checks off.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from elo_per_token.contracts.errors import InputError


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


MAX_TASKS_BLOB_BYTES = 64 * 2**20  # a million tasks' digests are ~40 MB; anything larger is not ours


def decode_tasks(
    data: bytes | None, file: str = "identity/tasks", *, missing_ok: bool = False
) -> dict[str, str]:
    """The stored task digests {task part: digest}. An unreadable or malformed file is an InputError naming
    `file` (and the task whose entry is bad): treating it as "no tasks known" silently disabled the
    task-change check and, on a worker, the check of what it grades. data=None (no file): {} with
    missing_ok (a display that can say "no digest recorded"), else an InputError.

    Args:
        data: The digest file's bytes (None: no file).
        file: How to name the file in an error.
        missing_ok: Return {} for a missing file instead of an InputError.
    """
    if data is None:
        if missing_ok:
            return {}
        raise InputError("named by the manifest's identity.tasks_blob, but missing", file=file)
    if len(data) > MAX_TASKS_BLOB_BYTES:
        raise InputError(f"{len(data):,} bytes, over {MAX_TASKS_BLOB_BYTES:,}", file=file)
    try:
        d = json.loads(data)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise InputError(f"not JSON ({str(e)[:120]})", file=file) from None
    if not isinstance(d, dict):
        raise InputError(f"must be a JSON object of task -> digest, got {type(d).__name__}", file=file)
    for k, v in d.items():
        if not isinstance(v, str) or not v:
            raise InputError(f"must be a digest string, got {str(v)[:40]!r}", file=file, field=str(k)[:200])
    return d


def tasks_blob_of(manifest: dict[str, Any], file: str = "manifest.json") -> str | None:
    """The name of the run's task-digest file (identity.tasks_blob); None for a run that records none (written
    before digests were recorded, or an import). A name that is not a file under identity/ is an InputError.

    Args:
        manifest: The run's manifest.
        file: How to name the file in an error.
    """
    ident = manifest.get("identity")
    if ident is None:
        return None
    if not isinstance(ident, dict):
        raise InputError(f"must be a table, got {type(ident).__name__}", file=file, field="identity")
    blob = ident.get("tasks_blob")
    if blob is None:
        return None
    if not isinstance(blob, str) or not blob.startswith("identity/") or ".." in blob.split("/"):
        raise InputError(f"bad name {str(blob)[:80]!r}", file=file, field="identity.tasks_blob")
    return blob


def run_task_digests(
    ledger: Any, run_id: str, manifest: dict[str, Any] | None = None
) -> dict[str, str] | None:
    """The run's recorded task digests {task part: digest}, read from its ledger (`ledger`: a Ledger);
    None when the run records none. A garbage manifest entry or digest file is an InputError naming it.

    Args:
        ledger: The run's Ledger.
        run_id: The run's id.
        manifest: The run's manifest (read from the ledger when None).
    """
    where = ledger.blob_url(run_id, "manifest.json")
    if manifest is None:
        try:
            manifest = ledger.get_manifest(run_id)
        except (ValueError, RecursionError) as e:
            raise InputError(f"not JSON ({str(e)[:120]})", file=where) from None
    if manifest is None:
        return None
    if not isinstance(manifest, dict):
        raise InputError(f"must be a JSON object, got {type(manifest).__name__}", file=where)
    blob = tasks_blob_of(manifest, where)
    if blob is None:
        return None
    return decode_tasks(ledger.get_blob(run_id, blob), ledger.blob_url(run_id, blob))


def task_digest(task: Any) -> str:
    """The digest of one task's whole record, as recorded in the run's identity (task_digests).

    Args:
        task: The task record.
    """
    return _digest(task)


def key_task_part(job_key: str) -> str:
    """The task part (family/task) of a job key.

    Args:
        job_key: A job key (family/task/arm/replicate).
    """
    return "/".join(job_key.split("/")[:2])
