"""A generated run for the sample explorer: testkit/fixtures_ledger.py's job objects (2,000 by default) plus a
stored transcript per job (contracts.transcripts.encode, as a worker writes them) whose prompt and
completion carry searchable words: every job's prompt names its task, and a completion says "needle-<n>"
where n is the job's index modulo 97."""

from __future__ import annotations

import json
from pathlib import Path

import fixtures_ledger


def transcript_doc(key: str, idx: int) -> dict:
    """One job's transcript: a prompt naming the task, a completion with its needle word."""
    task = key.split("/")[1]
    return {"schema": 1, "job_key": key, "truncated": False,
            "calls": [{"call_index": 0, "role": "sample",
                       "messages": [{"role": "user", "content": f"Solve task {task}. Give the answer."}],
                       "completion": f"Thinking about {task}: needle-{idx % 97} then 42.", "reasoning": None}],
            "grader": {"score": None, "verdict": "match", "evidence": None}}  # fmt: skip


def write_run(root: Path, run_id: str = "big", n_jobs: int = 2000, *, transcripts: bool = True) -> list[str]:
    """The run's job objects, a manifest, and (by default) a transcript per job; returns the job keys."""
    from elo_per_token.contracts.transcripts import blob_name, encode

    fixtures_ledger.write_local(root, run_id, n_jobs)
    run = Path(root) / "runs" / run_id
    (run / "manifest.json").write_text(json.dumps({"run_id": run_id, "n_jobs": n_jobs,
                                                   "plan": {"suites": fixtures_ledger.FAMILIES}}))  # fmt: skip
    keys = sorted(
        p.relative_to(run / "jobs").as_posix()[: -len(".jsonl")] for p in (run / "jobs").rglob("*.jsonl")
    )
    if transcripts:
        frame = fixtures_ledger.job_frame(run_id, n_jobs)
        for key, idx in zip(frame["job_key"].to_list(), frame["idx"].to_list(), strict=True):
            path = run / blob_name(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode(transcript_doc(key, idx)))
    return keys
