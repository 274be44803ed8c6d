"""What a Celery worker accepts from a message: the ledger and endpoint only from its own allow-lists.

Anyone who can publish to the broker (the grader holds its password, as does Flower) can send `ept.run_job`
with any context. A worker that took the ledger URL and the endpoint override from the message would send
its provider key to a server the sender chose and write where the sender chose. So:

- EPT_WORKER_LEDGERS: comma-separated ledgers this worker writes to (`s3://bucket/prefix` or a folder). An
  entry ending in `*` allows every ledger that starts with the rest (`s3://ept-ledger/*`). A message naming any
  other ledger is refused before anything is read, written or sent.
- EPT_WORKER_BASE_URLS: comma-separated endpoints a message may put in place of the profile's own
  (`--profile-url-override`), same syntax. Unset: no override is accepted; the worker's profiles.toml decides.

Paths are compared after resolving `..` and symlinks, URLs after dropping a trailing slash.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from elo_per_token.contracts.settings import read_str

LEDGERS_ENV = "EPT_WORKER_LEDGERS"
BASE_URLS_ENV = "EPT_WORKER_BASE_URLS"


class Untrusted(Exception):
    """A message asked for a ledger or endpoint outside this worker's allow-lists."""


def _norm(value: str) -> str:
    v = value.strip()
    if "://" in v and not v.startswith("file://"):
        return v.rstrip("/")
    path = v[len("file://") :] if v.startswith("file://") else v
    return os.path.realpath(os.path.expanduser(path)) if path else ""


def _entries(env: Mapping[str, str] | None, name: str) -> list[str]:
    """The comma-separated entries of the declared variable `name` (env None: the process environment)."""
    return [e.strip() for e in (read_str(name, env) or "").split(",") if e.strip()]


def _allowed(value: str, entries: list[str]) -> bool:
    v = _norm(value)
    for e in entries:
        if e.endswith("*"):
            stem = e[:-1]
            # A folder prefix is resolved too, so `/data/*` cannot be escaped with `..`.
            stem = (
                stem
                if "://" in stem and not stem.startswith("file://")
                else _norm(stem) + ("/" if stem.endswith("/") else "")
            )
            if v.startswith(stem):
                return True
        elif v == _norm(e):
            return True
    return False


def check_ledger(url: str, env: Mapping[str, str] | None = None) -> str:
    """`url` if this worker may write there; Untrusted (naming the setting, never the message's secrets) if not."""
    entries = _entries(env, LEDGERS_ENV)
    if not isinstance(url, str) or not url or not _allowed(url, entries):
        shown = _shown(url)
        raise Untrusted(
            f"this worker does not write to ledger {shown!r}: it writes only to the ledgers in {LEDGERS_ENV} "
            f"({', '.join(entries) or 'unset'}); set {LEDGERS_ENV} on the workers to the plan's ledger"
        )
    return url


def check_base_url(url: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The message's endpoint override if allowed (None: the profile's own endpoint); Untrusted otherwise."""
    if url is None:
        return None
    entries = _entries(env, BASE_URLS_ENV)
    if not isinstance(url, str) or not _allowed(url, entries):
        raise Untrusted(
            f"this worker does not send requests to {_shown(url)!r}: a message may only choose an "
            f"endpoint listed in {BASE_URLS_ENV} ({', '.join(entries) or 'unset'}); otherwise the profile's own "
            "base_url is used"
        )
    return url


def _shown(value: object) -> str:
    """The message's value for an error: cut short, URL passwords and this worker's own secrets masked."""
    from elo_per_token.contracts.secrets import mask_url, scrub

    return scrub(mask_url(str(value)[:400]))[:200]


def ledgers_configured(env: Mapping[str, str] | None = None) -> bool:
    return bool(_entries(env, LEDGERS_ENV))
