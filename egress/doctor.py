"""`ept doctor`: credential and egress checks before any evaluation, cheapest and most common cause first.

The local checks come first and the network checks run only once they pass; each later check depends on
fewer things going right than the one after it, so the first failure shown is usually the one to fix:

1. the key variable is set and non-empty      (401s usually start here)
2. base_url is well-formed for the protocol     (/v1 for OpenAI-compatible; none for Anthropic)
3. GET /models is reachable                     (network, TLS, credentials, path)
4. the profile's model is listed                (the 404 "model not found" class)
5. one tiny completion returns `usage`          (token accounting needs it)
6. n=2 returns 2 choices                        (warns when the profile's supports_n disagrees)
7. client configs (~/.claude/settings.json, ~/.codex/config.toml, $EPT_CLIENT_CONFIGS) hold no placeholder
   key YOUR_API_KEY left from `ept profiles export`   (warning)

Each failure carries a concrete fix. Nothing here prints a key: only its mask.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from elo_per_token.contracts.secrets import mask, scrub
from elo_per_token.contracts.settings import read_str
from elo_per_token.egress.profiles import Profile

if TYPE_CHECKING:  # for annotations; run_checks imports the client where it runs
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.egress.errors import ProviderError

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
# Names of the network checks: run_checks finds a check by its name, never by its position in the list.
MODELS_CHECK = "GET /models"
MODEL_LISTED_CHECK = "model listed"
COMPLETION_CHECK = "tiny completion returns usage"
N_CHECK = "n=2 returns 2 choices"
PLACEHOLDERS = ("YOUR_API_KEY", "sk-...", "<your key>")


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


def check_key(p: Profile) -> Check:
    name = f"key variable ${p.api_key_env}"
    raw = p.env_value()
    if raw is None:
        return Check(
            name,
            FAIL,
            "not set",
            f"export {p.api_key_env}=<your key> (or add it as a CI secret); "
            "the profile file only names the variable, it never holds the key",
        )
    if not raw.strip():
        return Check(
            name,
            FAIL,
            "set but empty",
            f"export {p.api_key_env}=<your key>; an empty value is sent as no key at all",
        )
    if raw != raw.strip() or raw.strip("\"'") != raw:
        return Check(
            name,
            FAIL,
            f"set ({mask(raw.strip())}) but has surrounding whitespace or quotes",
            f"re-export {p.api_key_env} without quotes, spaces or a trailing newline",
        )
    if raw in PLACEHOLDERS:
        return Check(
            name, FAIL, "still the placeholder YOUR_API_KEY", f"replace it: export {p.api_key_env}=<your key>"
        )
    return Check(name, PASS, f"set ({mask(raw)})")


def check_base_url(p: Profile) -> Check:
    name = f"base_url for protocol {p.protocol}"
    u = urlsplit(p.base_url)
    if u.scheme not in ("http", "https") or not u.hostname:
        return Check(name, FAIL, f"{p.base_url!r} is not an http(s) URL", 'set base_url = "https://host/..."')
    if u.query or u.fragment:
        return Check(
            name,
            FAIL,
            f"{p.base_url} carries a query string or fragment",
            "remove everything after '?' (tracking/UTM parameters belong to web pages, not API base URLs)",
        )
    path = u.path.rstrip("/")
    if p.protocol == "openai":
        if path.endswith(("/chat/completions", "/completions", "/models")):
            return Check(
                name,
                FAIL,
                f"{p.base_url} includes an endpoint path",
                "cut base_url back to the API root, e.g. https://host/api/v1 (the SDK appends /chat/completions)",
            )
        if not path.endswith("/v1"):
            return Check(
                name,
                WARN,
                f"{p.base_url} does not end in /v1",
                "most OpenAI-compatible servers expect .../v1 (e.g. https://host/api/v1, not /api); "
                "keep it only if your provider documents this path",
            )
    else:
        if path.endswith(("/v1", "/v1/messages", "/messages")):
            return Check(
                name,
                FAIL,
                f"{p.base_url} ends in {path[path.rfind('/v1') :] or '/v1'}",
                f"Anthropic-protocol clients append /v1/messages themselves: use "
                f"{p.base_url[: p.base_url.rfind('/v1')] or 'https://host/api'}",
            )
    if u.scheme == "http" and u.hostname not in ("127.0.0.1", "localhost", "::1"):
        return Check(
            name,
            WARN,
            f"{p.base_url} is plain http to a remote host: the key travels unencrypted",
            "use https://",
        )
    return Check(name, PASS, p.base_url)


def _fix_for(err: ProviderError, p: Profile) -> str:
    cls = err.error_class
    if cls == "credential" and err.status == 429:
        return f"the account behind ${p.api_key_env} has no quota left: add credit or use another key"
    if cls == "credential" and err.status == 403:
        return (
            f"give this key access to model '{p.model}' (provider console: project / model permissions), "
            f"or put a key that has it in ${p.api_key_env}"
        )
    if cls == "credential":
        return (
            f"the server rejected the key in ${p.api_key_env}: create or copy a key for THIS provider and "
            f"re-export it; a key that works elsewhere means base_url and key belong to different providers"
        )
    if cls == "endpoint" and err.code == "model_not_found":
        return "set `model` in the profile to a name the server lists (GET /models); Claude Code also needs ANTHROPIC_MODEL"
    if cls == "endpoint":
        return (
            "check the base_url path: OpenAI-compatible servers usually need /v1 (e.g. /api/v1), Anthropic-protocol "
            "ones stop before /v1 (e.g. /api); then check the model name"
        )
    if cls == "rate_limit":
        return "already rate limited: wait, or lower rpm/tpm in the profile"
    if cls in ("transient", "unreachable"):
        return (
            f"is the server up and reachable from here? try `curl {p.base_url.rstrip('/')}/models`; check proxies "
            f"and firewalls; a slow server needs a larger `timeout` (now {p.timeout:g}s)"
        )
    return "the server refused the request as sent; read its message above"


def _detail(e: ProviderError) -> str:
    n = e.attempts
    return f"{e.message} [{n} attempt{'s' if n != 1 else ''}]"


def _check_completion(client: ProviderClient, p: Profile) -> Check:
    """One short completion: passes with the server's usage, fails without it or on a provider error."""
    from elo_per_token.egress.errors import ProviderError

    try:
        r = client.chat(
            [{"role": "user", "content": "Reply with the word OK."}],
            max_tokens=16,
            temperature=0.0,
            meta={"Role": "doctor"},
        )
    except ProviderError as e:
        return Check(COMPLETION_CHECK, FAIL, _detail(e), _fix_for(e, p))
    if r.usage is None:
        return Check(
            COMPLETION_CHECK,
            FAIL,
            f"answered in {r.latency_s:.2f}s but sent no usage",
            "token accounting needs the server's usage; enable it on the provider/gateway (some "
            "proxies strip it), or pick another endpoint",
        )
    u = r.usage
    return Check(
        COMPLETION_CHECK,
        PASS,
        f"prompt_tokens={u.get('prompt_tokens')} completion_tokens={u.get('completion_tokens')} "
        f"in {r.latency_s:.2f}s",
    )


def run_checks(profile: Profile, *, timeout: float = 20.0, backoff_base: float = 0.2) -> list[Check]:
    """All five checks; network checks are skipped when the key or base_url check fails."""
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.egress.errors import ProviderError

    key = profile.api_key()
    checks = [check_key(profile), check_base_url(profile)]
    if any(c.status == FAIL for c in checks):
        reason = "fix the checks above first"
        return checks + [
            Check(n, SKIP, reason) for n in (MODELS_CHECK, MODEL_LISTED_CHECK, COMPLETION_CHECK, N_CHECK)
        ]

    p = dataclasses.replace(
        profile, timeout=min(profile.timeout, timeout), max_retries=min(profile.max_retries, 1)
    )
    client = ProviderClient(p, backoff_base=backoff_base, backoff_cap=2.0, retry_after_cap=5.0)
    models: list[str] | None = None
    models_error: ProviderError | None = None
    try:
        models = client.list_models()
        checks.append(Check(MODELS_CHECK, PASS, f"{len(models)} model(s) listed"))
    except ProviderError as e:
        models_error = e
        checks.append(Check(MODELS_CHECK, FAIL, _detail(e), _fix_for(e, p)))
    if models is None:
        checks.append(Check(MODEL_LISTED_CHECK, SKIP, "no model list"))
    elif not models:
        checks.append(Check(MODEL_LISTED_CHECK, SKIP, "the server lists no models"))
    elif profile.model in models:
        checks.append(Check(MODEL_LISTED_CHECK, PASS, profile.model))
    else:
        shown = ", ".join(models[:10]) + (" …" if len(models) > 10 else "")
        checks.append(
            Check(
                MODEL_LISTED_CHECK,
                FAIL,
                f"'{profile.model}' is not among: {shown}",
                "set model = one of the listed names in the profile (a wrong model name is the other "
                "common cause of 404; Claude Code also needs ANTHROPIC_MODEL)",
            )
        )
    checks.append(_check_completion(client, p))
    completion_ok = _named(checks, COMPLETION_CHECK).status == PASS
    checks.append(check_n(client, profile, completion_ok))
    # A server without a model list is fine if completions work.
    if completion_ok and models_error is not None and models_error.status == 404:
        checks = [
            dataclasses.replace(c, status=WARN, fix="this server does not serve /models; completions work")
            if c.name == MODELS_CHECK
            else c
            for c in checks
        ]
    return [dataclasses.replace(c, detail=scrub(c.detail, [key]), fix=scrub(c.fix, [key])) for c in checks]


def _named(checks: list[Check], name: str) -> Check:
    return next(c for c in checks if c.name == name)


def check_n(client: ProviderClient, p: Profile, completion_works: bool) -> Check:
    """Does n=2 return 2 choices? `supports_n = true` against a server that ignores n still yields k samples
    (ept asks again for the shortfall) but wastes a request per sample; `false` against one that honours it
    pays the prompt k times. Either disagreement is a warning, never a failure."""
    from elo_per_token.egress.errors import ProviderError

    name = N_CHECK
    if p.protocol != "openai":
        return Check(name, SKIP, "the Anthropic protocol has no n: ept makes one request per sample")
    if not completion_works:
        return Check(name, SKIP, "the tiny completion failed")
    try:
        r = client.chat(
            [{"role": "user", "content": "Reply with the word OK."}],
            max_tokens=8,
            temperature=0.7,
            n=2,
            meta={"Role": "doctor"},
        )
    except ProviderError as e:
        return Check(name, WARN, _detail(e), "set supports_n = false in the profile (one request per sample)")
    got = r.n_returned
    if got >= 2 and not p.supports_n:
        return Check(
            name,
            WARN,
            f"the server returned {got} choices but the profile says supports_n = false",
            "set supports_n = true: one request per n samples saves the repeated prompt tokens",
        )
    if got < 2 and p.supports_n:
        return Check(
            name,
            WARN,
            f"the server returned {got} choice for n=2 but the profile says supports_n = true",
            "set supports_n = false: this server ignores n (ept would ask again for every missing sample)",
        )
    return Check(name, PASS, f"{got} choice(s) for n=2; supports_n = {str(p.supports_n).lower()} agrees")


def client_config_paths() -> list[Path]:
    """Client configs `ept profiles export` writes: $EPT_CLIENT_CONFIGS (os.pathsep-separated), else the
    default locations of Claude Code and Codex."""
    env = read_str("EPT_CLIENT_CONFIGS")
    if env:
        return [Path(x).expanduser() for x in env.split(os.pathsep) if x]
    return [Path("~/.claude/settings.json").expanduser(), Path("~/.codex/config.toml").expanduser()]


def _placeholder_spots(path: Path) -> list[str]:
    """Where a placeholder key sits in a config: JSON values (Claude Code's env block), or non-comment lines."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if data is not None:
            found: list[str] = []

            def walk(x: object, where: str) -> None:
                if isinstance(x, dict):
                    for k, v in x.items():
                        walk(v, f"{where}.{k}" if where else str(k))
                elif isinstance(x, list):
                    for i, v in enumerate(x):
                        walk(v, f"{where}[{i}]")
                elif isinstance(x, str) and x.strip() in PLACEHOLDERS:
                    found.append(where)

            walk(data, "")
            return found
    return [
        f"line {i}"
        for i, ln in enumerate(text.splitlines(), 1)
        if not ln.lstrip().startswith("#") and any(ph in ln for ph in PLACEHOLDERS[:1])
    ]


def check_client_configs(paths: list[Path] | None = None) -> Check:
    """A placeholder key left in a client config makes the client send YOUR_API_KEY and retry 401s silently
    (Claude Code does so for minutes): a warning naming the file and the field."""
    name = "client configs hold no placeholder key"
    hits = []
    checked = 0
    for p in paths if paths is not None else client_config_paths():
        if not p.is_file():
            continue
        checked += 1
        hits += [f"{p}: {spot}" for spot in _placeholder_spots(p)]
    if hits:
        return Check(
            name,
            WARN,
            f"{PLACEHOLDERS[0]} still in " + "; ".join(hits),
            "replace the placeholder with the real key (or remove the entry and export the variable)",
        )
    return Check(
        name, PASS if checked else SKIP, f"{checked} config file(s) checked" if checked else "none found"
    )


def ok(checks: list[Check]) -> bool:
    return not any(c.status == FAIL for c in checks)


_MARK = {
    PASS: "[green]✓ PASS[/]",
    WARN: "[yellow]! WARN[/]",
    FAIL: "[bold red]✗ FAIL[/]",
    SKIP: "[dim]- SKIP[/]",
}


def render(profile: Profile, checks: list[Check]) -> list[str]:
    """Rich-markup lines of the checklist."""
    from rich.markup import escape

    lines = [
        f"[bold]ept doctor[/] — profile [bold]{escape(profile.name)}[/] ({profile.protocol}, "
        f"model {escape(profile.model)}, key from ${profile.api_key_env})"
    ]
    for i, c in enumerate(checks, 1):
        lines.append(f"{_MARK[c.status]}  {i}. {escape(c.name)}: {escape(c.detail)}")
        if c.fix and c.status in (FAIL, WARN):
            lines.append(f"          fix: {escape(c.fix)}")
    n_fail = sum(c.status == FAIL for c in checks)
    lines.append(
        "[bold green]All checks passed.[/]" if not n_fail else f"[bold red]{n_fail} check(s) failed.[/]"
    )
    return lines
