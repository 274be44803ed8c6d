"""Masking of secrets. Keys never leave the process unmasked: not in logs, ledgers, transcripts or errors.

One secret set (`process_secrets`) serves every surface: the secrets a caller names (the profile's key), the
value of every environment variable whose name looks secret (KEY, TOKEN, SECRET, PASS…), and the password
(or lone user token) of every URL-valued environment variable (broker, result backend, S3 endpoint). Each is
masked as written and in the encodings a model or a provider may echo it in: URL-encoded, JSON-escaped and
base64 (at any byte alignment). A token-shaped secret is also masked wherever a run of RUN_CHARS or more of
its characters appears, so a secret split across fields leaves no piece of that length in any of them.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, quote_plus, unquote

MIN_SECRET_CHARS = 8  # shorter values are too common to mask by value (they would mask ordinary words)
RUN_CHARS = 12  # a run of this many characters of a token-shaped secret is masked (split secrets)
_BLOCK = 6  # run search anchors: any run of 2 * _BLOCK - 1 characters of a secret holds one whole block
_MAX_RUN_SECRET = 512  # longer values (certificates, JSON blobs) are masked as written and encoded only
_RUN_MASK = "…"  # what replaces a piece of a secret (its mask would reveal four of its characters)
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASS", "CREDENTIAL", "AUTH")
_NOT_SECRET = frozenset({"SSH_AUTH_SOCK", "XAUTHORITY", "PWD", "OLDPWD"})


def mask(secret: str | None) -> str:
    """`sk-abcdef...wxyz` -> `sk-…wxyz`; short or empty secrets are masked entirely.

    Args:
        secret: The secret to mask (None: nothing to show).
    """
    if not secret:
        return "<unset>"
    if len(secret) < 12:
        return "…" * 3
    prefix = "sk-" if secret.startswith("sk-") else ""
    return f"{prefix}…{secret[-4:]}"


_BEARER = re.compile(r"(Bearer\s+)(\S{8,})")
# scheme://userinfo@ — userinfo cannot hold '/', '@' or whitespace, so a path containing '@' is not matched.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")


def _looks_secret_name(name: str) -> bool:
    n = name.upper()
    return n not in _NOT_SECRET and any(w in n for w in _SECRET_WORDS)


def _url_secrets(value: str) -> list[str]:
    """The password (or lone user token) of every URL in `value`, as written and percent-decoded."""
    out = []
    for m in _URL_USERINFO.finditer(value):
        user, colon, password = m.group("userinfo").partition(":")
        piece = password if colon else user
        out += [piece, unquote(piece)]
    return out


_env_cache: tuple[dict[bytes, bytes] | None, tuple[str, ...]] = (None, ())


def _environment_secrets() -> tuple[str, ...]:
    """The environment's key-like values and URL passwords. Recomputed only when the environment changed:
    walking os.environ (a decode per variable) on every call cost a worker ~0.4 ms per job; comparing the raw
    mapping with the last one seen is one dict comparison in C."""
    global _env_cache
    raw = getattr(os.environ, "_data", None)  # CPython's raw mapping; elsewhere: no cache
    seen, cached = _env_cache
    if raw is not None and seen is not None and raw == seen:
        return cached
    # Taken before the walk: a change made during it is seen on the next call.
    snapshot = dict(raw) if isinstance(raw, dict) else None
    found: set[str] = set()
    for k, v in os.environ.items():
        if not v:
            continue
        if _looks_secret_name(k):
            found.add(v)
        if "@" in v and "://" in v:
            found.update(_url_secrets(v))
    out = tuple(found)
    _env_cache = (snapshot, out)
    return out


def process_secrets(extra: Sequence[str | None] | None = None) -> tuple[str, ...]:
    """The one secret set: `extra` (the profile's key), key-like environment values and URL passwords from
    the environment; longest first, so a secret that contains another is masked whole.

    Args:
        extra: Secrets to add to the environment's (a profile's API key; None entries ignored).
    """
    found = {s for s in extra or () if s}
    found.update(_environment_secrets())
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=lambda s: (-len(s), s)))


def _b64_cores(raw: bytes) -> set[str]:
    """The base64 characters that depend on `raw` alone, at each of the three byte alignments it can sit at
    inside a longer encoded blob (standard and URL-safe alphabets)."""
    out = set()
    for k, drop in ((0, 0), (1, 2), (2, 3)):  # k bytes before it: the first `drop` characters mix them in
        enc = base64.b64encode(b"\0" * k + raw).decode()
        core = enc[drop : (k + len(raw)) // 3 * 4]  # the last partial group mixes in what follows
        if len(core) >= MIN_SECRET_CHARS:
            out |= {core, core.replace("+", "-").replace("/", "_")}
    return out


def _encodings(s: str) -> list[str]:
    """`s` as a model or provider may echo it: URL-encoded, JSON-escaped, base64 (never `s` itself)."""
    forms = {quote(s, safe=""), quote_plus(s), json.dumps(s)[1:-1], json.dumps(s, ensure_ascii=False)[1:-1]}
    forms.add(json.dumps(s)[1:-1].replace("/", "\\/"))
    forms |= _b64_cores(s.encode())
    return sorted((f for f in forms if f != s and len(f) >= MIN_SECRET_CHARS), key=lambda f: (-len(f), f))


def _token_shaped(s: str) -> bool:
    """A key, password or token (not a path or prose): run masking applies to it."""
    return (
        2 * _BLOCK <= len(s) <= _MAX_RUN_SECRET
        and not any(c.isspace() for c in s)
        and not s.startswith(("/", "~", "."))
        and "://" not in s
        and len(set(s)) >= _BLOCK
    )


@dataclass(frozen=True)
class SecretSet:
    """A compiled secret set: each secret with its encoded forms, and the anchors of its run search."""

    secrets: tuple[str, ...]
    forms: tuple[tuple[str, str], ...]  # (encoded form, its replacement)
    runs: tuple[str, ...]  # token-shaped secrets

    def mask_values(self, text: str) -> str:
        """Every known secret masked: as written, encoded, and any run of RUN_CHARS of its characters.

        Args:
            text: Text that may hold a secret (an error message, a log line, a transcript field).
        """
        if len(text) < MIN_SECRET_CHARS:  # every secret, form and run is at least this long: nothing to find
            return text
        for s in self.secrets:
            if s in text:
                text = text.replace(s, mask(s))
        for form, masked in self.forms:
            if form in text:
                text = text.replace(form, masked)
        for s in self.runs:
            text = _mask_runs(text, s)
        return text

    def scrub(self, text: str) -> str:
        """mask_values, plus bearer tokens and URL passwords whatever their value.

        Args:
            text: Text that may hold a secret (an error message, a log line, a transcript field).
        """
        text = self.mask_values(text)
        if "Bearer" in text:  # the pattern's literal part: most strings skip the regex
            text = _BEARER.sub(lambda m: m.group(1) + mask(m.group(2)), text)
        return mask_urls(text)


@functools.lru_cache(maxsize=64)
def _compile(secrets: tuple[str, ...]) -> SecretSet:
    forms = tuple((f, mask(s)) for s in secrets for f in _encodings(s))
    return SecretSet(secrets, forms, tuple(s for s in secrets if _token_shaped(s)))


def secret_set(extra: Sequence[str | None] | None = None) -> SecretSet:
    """The process's secret set (process_secrets) with `extra`, compiled (cached per distinct set).

    Args:
        extra: Secrets to add to the environment's (a profile's API key; None entries ignored).
    """
    return _compile(process_secrets(extra))


def _agree(text: str, i: int, s: str, j: int, forward: bool) -> int:
    """How many characters of `text` and `s` agree from text[i] / s[j] on (forward) or before them (backward):
    a binary search over slice comparisons, so the work is in C."""
    lo, hi = 0, min(len(text) - i, len(s) - j) if forward else min(i, j)
    while lo < hi:
        k = (lo + hi + 1) // 2
        same = text[i : i + k] == s[j : j + k] if forward else text[i - k : i] == s[j - k : j]
        lo, hi = (k, hi) if same else (lo, k - 1)
    return lo


@functools.lru_cache(maxsize=256)
def _run_starts(n: int) -> tuple[int, ...]:
    """Where the anchor blocks of a secret of n characters start (every _BLOCK characters, and the last block)."""
    return tuple(sorted({*range(0, n - _BLOCK + 1, _BLOCK), n - _BLOCK}))


def _mask_runs(text: str, s: str) -> str:
    """Every run of RUN_CHARS or more characters of `s` in `text` replaced by _RUN_MASK. Anchored on blocks of
    `s` found with str.find (any run of 2 * _BLOCK - 1 characters holds one), each hit extended both ways; a
    hit inside a run already found is passed over, so a degenerate text costs about one pass per block."""
    starts = _run_starts(len(s))
    if not any(s[o : o + _BLOCK] in text for o in starts):  # the common case, found in C: no block of s
        return text
    covered = bytearray(len(text))
    for o in starts:
        block, at = s[o : o + _BLOCK], 0
        while (p := text.find(block, at)) != -1:
            if covered[p] and covered[p + _BLOCK - 1]:
                end = covered.find(0, p)
                at = max(p + 1, (len(text) if end == -1 else end) - _BLOCK + 1)
                continue
            a = p - _agree(text, p, s, o, forward=False)
            b = p + _BLOCK + _agree(text, p + _BLOCK, s, o + _BLOCK, forward=True)
            if b - a >= RUN_CHARS:
                covered[a:b] = b"\1" * (b - a)
            at = p + 1
    if covered.find(1) == -1:  # blocks were found but no run of RUN_CHARS around them
        return text
    out, i = [], 0
    while (a := covered.find(1, i)) != -1:
        b = covered.find(0, a)
        b = len(text) if b == -1 else b
        out += [text[i:a], _RUN_MASK]
        i = b
    return "".join([*out, text[i:]])


def scrub(text: str, secrets: Sequence[str | None] | None = None) -> str:
    """Every secret the process knows (`secrets` added to process_secrets) masked, in any encoding it is
    echoed in; bearer tokens and URL passwords too.

    Args:
        text: Text that may hold a secret (an error message, a log line, a transcript field).
        secrets: Secrets to add to the environment's (a profile's API key; None entries ignored).
    """
    return secret_set(secrets).scrub(text)


def _mask_userinfo(m: re.Match[str]) -> str:
    user, colon, password = m.group("userinfo").partition(":")
    # `user:password@` keeps the user name; a lone `token@` (e.g. https://ghp_xxx@github.com) is the secret itself.
    return f"{m.group('scheme')}{user}:{mask(password)}@" if colon else f"{m.group('scheme')}{mask(user)}@"


def mask_urls(text: str) -> str:
    """Every URL's userinfo masked: `http://user:pass@host/v1` -> `http://user:………@host/v1`.

    Args:
        text: Text that may contain URLs with userinfo.
    """
    return _URL_USERINFO.sub(_mask_userinfo, text) if "@" in text else text


def mask_url(url: str) -> str:
    """One URL for display (tables, manifests): its password (or lone user token) masked.

    Args:
        url: The URL to show.
    """
    return mask_urls(url)


_record_factory_installed = False


def scrub_log_records() -> None:
    """Every log record of this process scrubbed (the secret set above) as it is made, whichever library logs
    it (the provider client, Celery, botocore): installed once, by the `ept` entry point."""
    global _record_factory_installed
    if _record_factory_installed:
        return
    make = logging.getLogRecordFactory()

    def scrubbed(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make(*args, **kwargs)
        # A record whose arguments do not format is left as it is: logging reports it when it is emitted.
        with contextlib.suppress(Exception):
            record.msg, record.args = scrub(record.getMessage()), ()
        return record

    logging.setLogRecordFactory(scrubbed)
    _record_factory_installed = True
