"""Masking of secrets. Keys never leave the process unmasked: not in logs, ledgers or errors."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence


def mask(secret: str | None) -> str:
    """`sk-abcdef...wxyz` -> `sk-…wxyz`; short or empty secrets are masked entirely."""
    if not secret:
        return "<unset>"
    if len(secret) < 12:
        return "…" * 3
    prefix = "sk-" if secret.startswith("sk-") else ""
    return f"{prefix}…{secret[-4:]}"


def scrub(text: str, secrets: Sequence[str | None] | None = None) -> str:
    """Replace every occurrence of the given secrets (default: likely-secret env values) with its mask."""
    if secrets is None:
        secrets = [v for k, v in os.environ.items() if _looks_secret_name(k)]
    for s in secrets:
        if s and len(s) >= 8:
            text = text.replace(s, mask(s))
    # Bearer headers echoed by servers or SDKs.
    text = re.sub(r"(Bearer\s+)(\S{8,})", lambda m: m.group(1) + mask(m.group(2)), text)
    return mask_urls(text)


# scheme://userinfo@ — userinfo cannot hold '/', '@' or whitespace, so a path containing '@' is not matched.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")


def _mask_userinfo(m: re.Match[str]) -> str:
    user, colon, password = m.group("userinfo").partition(":")
    # `user:password@` keeps the user name; a lone `token@` (e.g. https://ghp_xxx@github.com) is the secret itself.
    return f"{m.group('scheme')}{user}:{mask(password)}@" if colon else f"{m.group('scheme')}{mask(user)}@"


def mask_urls(text: str) -> str:
    """Every URL's userinfo masked: `http://user:pass@host/v1` -> `http://user:………@host/v1`."""
    return _URL_USERINFO.sub(_mask_userinfo, text) if "@" in text else text


def mask_url(url: str) -> str:
    """One URL for display (tables, manifests): its password (or lone user token) masked."""
    return mask_urls(url)


def _looks_secret_name(name: str) -> bool:
    n = name.upper()
    return any(w in n for w in ("KEY", "TOKEN", "SECRET", "PASSWORD"))
