"""What the task page shows beside the outcomes: the prompt the arms were sent (from a stored transcript of
one of the task's jobs) and the reference answer (from the built-in suite the run's plan names, checked
against the task digest the run recorded). The viewer never opens a suite file a manifest names: a path in
an untrusted ledger is not followed; such a task's reference is said to be in that file."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

MAX_PROMPT_TRIES = 8  # transcripts tried for the prompt (a job without one is skipped)


def prompt_of(
    keys: Sequence[str], transcript: Callable[[str], Mapping[str, Any] | None]
) -> tuple[list[dict[str, Any]], str | None]:
    """The first call's messages of the first of `keys` that has a transcript, and that job's key."""
    for key in keys[:MAX_PROMPT_TRIES]:
        doc = transcript(key)
        calls = (doc or {}).get("calls") or []
        if calls and isinstance(calls[0], Mapping):
            msgs = [m for m in calls[0].get("messages") or [] if isinstance(m, Mapping)]
            if msgs:
                return [dict(m) for m in msgs], key
    return [], None


@functools.lru_cache(maxsize=16)
def _builtin(name: str) -> dict[str, dict[str, Any]]:
    from elo_per_token.suites.load import load_builtin_suite

    return {str(t["task_id"]): dict(t) for t in load_builtin_suite(name)}


def reference_of(manifest: Mapping[str, Any], task_id: str, digests: Mapping[str, str]) -> tuple[Any, str]:
    """(the task's reference, where it came from) or (None, why it is not shown)."""
    from elo_per_token.suites.load import builtin_suite_names

    suites = (manifest.get("plan") or {}).get("suites") or []
    if not isinstance(suites, list) or not suites:
        return None, "the run's manifest names no suites"
    names = set(builtin_suite_names())
    files = []
    for ref in suites:
        if not isinstance(ref, str):
            continue
        if ref not in names:
            files.append(ref)
            continue
        try:
            task = _builtin(ref).get(task_id)
        except Exception as ex:  # a public suite whose package is missing: said, never a broken page
            files.append(f"{ref} ({type(ex).__name__})")
            continue
        if task is None:
            continue
        return _checked(task, ref, digests)
    where = (
        f" (suite files: {', '.join(files)[:300]}; the viewer does not open files a manifest names)"
        if files
        else ""
    )
    return None, f"not in the run's built-in suites{where}"


def _checked(task: Mapping[str, Any], suite: str, digests: Mapping[str, str]) -> tuple[Any, str]:
    """The reference when the built-in task is the one the run ran (its digest as recorded), else why not."""
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.contracts.taskdigest import key_task_part, task_digest

    part = key_task_part(Job(run_id="x", task=dict(task), strategy="x", budget_n=1).key)  # type: ignore[arg-type]
    want = digests.get(part) if digests else None
    if want is not None and want != task_digest(dict(task)):
        return None, f"the built-in suite '{suite}' has changed since this run: its task differs, not shown"
    checked = (
        "checked against the run's task digest" if want else "the run recorded no digest to check it against"
    )
    return task.get("reference"), f"from the built-in suite '{suite}' ({checked})"
