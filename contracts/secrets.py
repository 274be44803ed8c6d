"""Masking of secrets. Keys never leave the process unmasked: not in logs, ledgers or errors."""

from __future__ import annotations

import os
import re


def mask(secret: str | None) -> str:
    """`sk-abcdef...wxyz` -> `sk-…wxyz`; short or empty secrets are masked entirely."""
    if not secret:
        return "<unset>"
    if len(secret) < 12:
        return "…" * 3
    prefix = "sk-" if secret.startswith("sk-") else ""
    return f"{prefix}…{secret[-4:]}"


def scrub(text: str, secrets: list[str | None] | None = None) -> str:
    """Replace every occurrence of the given secrets (default: likely-secret env values) with its mask."""
    if secrets is None:
        secrets = [v for k, v in os.environ.items() if _looks_secret_name(k)]
    for s in secrets:
        if s and len(s) >= 8:
            text = text.replace(s, mask(s))
    # Bearer headers echoed by servers or SDKs.
    return re.sub(r"(Bearer\s+)(\S{8,})", lambda m: m.group(1) + mask(m.group(2)), text)


def _looks_secret_name(name: str) -> bool:
    n = name.upper()
    return any(w in n for w in ("KEY", "TOKEN", "SECRET", "PASSWORD"))
