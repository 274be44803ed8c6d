"""Per-job transcripts: what the worker stores beside a job's result and `ept view` shows.

Stored as one gzip-compressed JSON blob per job under the run's `transcripts/` folder, never inside the job
object: `ept analyze` reads `jobs/` and `compact/` only, so transcripts change neither its speed nor its
memory. Every text field is bounded (MAX_CALL_CHARS per call, with a visible truncation mark) and scrubbed
of secrets before it is written. Model output is untrusted: it is stored as text and shown escaped.

Document (schema 1): {"schema": 1, "job_key", "calls": [{"call_index", "role", "messages": [{"role",
"content"}], "completion", "reasoning", "tool_calls", "tool_results", "finish_reason", "usage",
"latency_s"}], "grader": {"score", "verdict", "evidence"}, "truncated": bool}
"""

from __future__ import annotations

import gzip
import io
import json
import re
from typing import Any, Protocol

from elo_per_token.contracts.secrets import SecretSet, mask, secret_set

TRANSCRIPTS_DIR = "transcripts"
SCHEMA = 1
MAX_CALL_CHARS = 16_000  # per call, over all its text fields; a long generation keeps its start and end
MAX_FIELD_CHARS = 8_000  # one field (a message, the completion, the grader's evidence)
MAX_BLOB_BYTES = 4_000_000  # a compressed transcript larger than this is not read back by the viewer
TRUNCATION_MARK = "\n…[truncated by ept: {n} characters left out]…\n"
# Key-shaped tokens, wherever they sit ("0sk-…" too; not after a letter, so "task-…" ids stay readable). The
# process's own secrets are masked by value whatever surrounds them (contracts.secrets.scrub).
_KEYLIKE = re.compile(r"(?<![A-Za-z])(sk-[A-Za-z0-9_-]{12,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,})")


class BlobReader(Protocol):
    """What read_transcript needs of a ledger (ledger.store.Ledger has it)."""

    def get_blob(self, run_id: str, name: str) -> bytes | None:
        """The object `name`'s bytes; None when there is none.

        Args:
            run_id: The run's id.
            name: The object's path relative to the run.
        """
        ...


def blob_name(job_key: str) -> str:
    """The transcript's blob name inside the run (job keys are already path-safe).

    Args:
        job_key: The job's key.
    """
    return f"{TRANSCRIPTS_DIR}/{job_key}.json.gz"


def clip(text: Any, limit: int = MAX_FIELD_CHARS) -> str:
    """Text bounded to `limit` characters: its start and end kept, the middle replaced by a visible mark.

    Args:
        text: Any value (shown as str).
        limit: The most characters kept.
    """
    s = text if isinstance(text, str) else json.dumps(text, default=str, ensure_ascii=False)
    if len(s) <= limit:
        return s
    head = limit * 2 // 3
    tail = limit - head
    return s[:head] + TRUNCATION_MARK.format(n=len(s) - limit) + s[len(s) - tail :]


def scrub_text(text: str, secrets: list[str] | None = None, known: SecretSet | None = None) -> str:
    """Every secret the process knows (contracts.secrets: `secrets` plus the environment's key-like values and
    URL passwords, in any encoding), bearer tokens, URL passwords and anything shaped like an API key are
    masked (`sk-…abcd`). `known`: the compiled set, when the caller scrubs many strings.

    Args:
        text: The text to scrub.
        secrets: Secrets to mask besides the process's own (a profile's API key).
        known: A compiled secret set to use instead of building one (callers scrubbing many strings pass it
            once).
    """
    text = (known or secret_set(secrets)).scrub(text)
    return _KEYLIKE.sub(lambda m: mask(m.group(0)), text)


def bounded(doc: dict[str, Any], secrets: list[str] | None = None) -> dict[str, Any]:
    """The document with every string scrubbed and each call's text within MAX_CALL_CHARS.

    Args:
        doc: The transcript document.
        secrets: Secrets to mask besides the process's own (a profile's API key).
    """
    truncated = False
    known = secret_set(secrets)  # one secret set for the whole document

    def walk(x: Any, budget: list[int]) -> Any:
        nonlocal truncated
        if isinstance(x, str):
            limit = max(200, min(MAX_FIELD_CHARS, budget[0]))
            out = clip(scrub_text(x, known=known), limit)
            truncated |= "[truncated by ept" in out and "[truncated by ept" not in x
            budget[0] = max(0, budget[0] - len(out))
            return out
        if isinstance(x, dict):
            return {scrub_text(str(k), known=known): walk(v, budget) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [walk(v, budget) for v in x]
        return x if isinstance(x, int | float | bool) or x is None else walk(str(x), budget)

    out = {k: v for k, v in doc.items() if k not in ("calls", "grader")}
    out["calls"] = [walk(c, [MAX_CALL_CHARS]) for c in doc.get("calls") or []]
    out["grader"] = walk(doc.get("grader") or {}, [MAX_CALL_CHARS])
    out["truncated"] = truncated
    out["schema"] = SCHEMA
    return out


def encode(doc: dict[str, Any], secrets: list[str] | None = None) -> bytes:
    """Bounded, scrubbed, gzip-compressed JSON (deterministic bytes: no timestamp in the gzip header).

    Args:
        doc: The transcript document.
        secrets: Secrets to mask besides the process's own (a profile's API key).
    """
    raw = json.dumps(bounded(doc, secrets), ensure_ascii=False, sort_keys=True).encode("utf-8")
    return gzip.compress(raw, compresslevel=6, mtime=0)


def decode(data: bytes) -> dict[str, Any]:
    """A stored transcript; ValueError when the bytes are not one (too large, not gzip, not a JSON object).

    Args:
        data: The stored bytes.
    """
    if len(data) > MAX_BLOB_BYTES:
        raise ValueError(f"transcript blob of {len(data)} bytes is over {MAX_BLOB_BYTES}")
    limit = MAX_BLOB_BYTES * 20  # bounded inflation: a gzip bomb stops here
    parts, size = [], 0
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
        while chunk := f.read(1 << 20):  # chunks: read(n) would allocate n bytes up front
            size += len(chunk)
            if size > limit:
                raise ValueError("transcript inflates beyond its bound")
            parts.append(chunk)
    raw = b"".join(parts)
    doc = json.loads(raw.decode("utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("transcript is not a JSON object")
    return doc


def read_transcript(ledger: BlobReader, run_id: str, job_key: str) -> dict[str, Any] | None:
    """The job's transcript, None when none was stored; a damaged one is reported inside the document.

    Args:
        ledger: Anything with get_blob(run_id, name) (a Ledger).
        run_id: The run's id.
        job_key: The job's key.
    """
    data = ledger.get_blob(run_id, blob_name(job_key))
    if data is None:
        return None
    try:
        return decode(data)
    except (ValueError, OSError, EOFError) as e:
        return {"schema": SCHEMA, "job_key": job_key, "calls": [], "grader": {}, "error": f"unreadable: {e}"}
