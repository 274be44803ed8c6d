"""Transcript capture: what a job sent and got back, call by call, and the grader's evidence.

JobContext.chat hands every call to a Recorder (when the plan keeps transcripts); run_job adds the grader's
verdict and evidence; perform_job stores the bounded, scrubbed, compressed document beside the job's result
(contracts.transcripts), never inside it, so `ept analyze` does not read it. Storing is best effort: a
transcript that cannot be written never fails a job whose result is stored.
"""

from __future__ import annotations

import threading
from typing import Any

from elo_per_token.contracts import transcripts

# Grader detail keys that are evidence for the transcript only: taken out of the outcome (so the ledger's job
# object stays as it was) and kept in the transcript.
EVIDENCE_KEYS = ("sandbox_output",)


class Recorder:
    """Collects one job's calls (thread-safe: strategies call in parallel)."""

    def __init__(self) -> None:
        self._calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.evidence: dict[str, Any] = {}

    def call(
        self,
        index: int,
        role: str,
        messages: list[dict[str, Any]],
        resp: Any = None,
        error: str | None = None,
    ) -> None:
        """One call: the messages sent and, from the response, each choice's text, reasoning and tool calls."""
        rec: dict[str, Any] = {"call_index": index, "role": role, "messages": [_message(m) for m in messages]}
        if resp is not None:
            choices = list(getattr(resp, "choices", []) or [])
            texts = [c.text for c in choices]
            rec["completion"] = texts[0] if len(texts) == 1 else texts
            reasoning = [c.reasoning for c in choices if getattr(c, "reasoning", None)]
            rec["reasoning"] = reasoning[0] if len(reasoning) == 1 else reasoning or None
            rec["tool_calls"] = [tc for c in choices for tc in c.tool_calls] or None
            rec["finish_reason"] = choices[0].finish_reason if choices else None
            rec["usage"] = resp.usage
            rec["latency_s"] = resp.latency_s
        if error is not None:
            rec["error"] = error
        with self._lock:
            self._calls.append(rec)

    def document(self, job_key: str, outcome: Any) -> dict[str, Any]:
        """The transcript (before contracts.transcripts bounds and scrubs it)."""
        with self._lock:
            calls = sorted(self._calls, key=lambda c: c["call_index"])
        g = dict(getattr(outcome, "grader", None) or {})
        verdict = {
            "score": getattr(outcome, "score", None),
            "correct": getattr(outcome, "correct", None),
            "reason": g.get("reason"),
            "error": getattr(outcome, "error", None),
            "failure": getattr(outcome, "failure", None),
        }
        evidence = {k: g[k] for k in ("failures", "load_error", "returncode", "passed", "total") if k in g}
        evidence.update(self.evidence)
        return {
            "job_key": job_key,
            "calls": calls,
            "grader": {"verdict": verdict, "evidence": evidence, "answer": getattr(outcome, "answer", None)},
        }


def _message(m: Any) -> dict[str, Any]:
    if not isinstance(m, dict):
        return {"role": "?", "content": str(m)}
    out = {"role": m.get("role"), "content": m.get("content")}
    for k in ("tool_calls", "tool_call_id", "name"):
        if m.get(k):
            out[k] = m[k]
    return out


def take_evidence(outcome: Any, recorder: Recorder | None) -> None:
    """Move the transcript-only evidence out of the outcome's grader details (into the recorder, if any)."""
    g = getattr(outcome, "grader", None)
    if not isinstance(g, dict):
        return
    for k in EVIDENCE_KEYS:
        if k in g:
            v = g.pop(k)
            if recorder is not None:
                recorder.evidence[k] = v


def store(
    ledger: Any, run_id: str, job_key: str, recorder: Recorder, outcome: Any, secrets: list[str] | None = None
) -> int:
    """Write the transcript blob; its size in bytes, 0 when it could not be written (never raises)."""
    try:
        data = transcripts.encode(recorder.document(job_key, outcome), secrets)
        ledger.put_blob(run_id, transcripts.blob_name(job_key), data)
        return len(data)
    except Exception:  # the job's result is stored; a missing transcript is shown as such by `ept view`
        return 0
