"""Regenerate docs/doctor.md: run the real `ept doctor` against the simulator for each failure class.

    python docs/make_doctor_docs.py            # writes docs/doctor.md next to this script

Every block in the page is the command's actual output (a subprocess), not hand-written text.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from elo_per_token.simulator.control import start_in_thread  # noqa: E402

DOC_KEY = "sk-sim-docs-example-key-7f3a"  # a dummy key the doc simulator accepts; shown masked as sk-…7f3a
PORT = 18765


@dataclass
class Scenario:
    title: str
    why: str
    profile: str  # TOML body of [profiles.demo] ({url} / {root} / {dead} are filled in)
    env_key: str | None = DOC_KEY
    sim: dict = field(default_factory=dict)
    args: tuple[str, ...] = ()


SCENARIOS = [
    Scenario(
        "All checks pass",
        "A profile pointing at the simulator with the right key (the simulator honours `n`).",
        'base_url = "{url}"\nmodel = "ept-sim-1"\nsupports_n = true',
    ),
    Scenario(
        "Proxy answers a bad key with 400 (LiteLLM, credential)",
        "LiteLLM's proxy answers a key it cannot check with `400 … No connected db`, not 401. A 4xx on GET /models "
        "(no body that could be malformed) is reported as credential or access, naming the key variable.",
        'base_url = "{url}"\nmodel = "ept-sim-1"',
        env_key="sk-someone-elses-key-from-laptop-91c2",
        sim={"auth_style": "litellm"},
    ),
    Scenario(
        "Server ignores n (warning)",
        "The profile says `supports_n = true` but the server returns one choice for n=2 (some llama.cpp builds): "
        "ept still gets every sample by asking again, but each request costs a prompt.",
        'base_url = "{url}"\nmodel = "ept-sim-1"\nsupports_n = true',
        sim={"ignore_n": True},
    ),
    Scenario(
        "Key variable not set",
        "The profile names `$DEMO_API_KEY`, but this shell (or CI job) never exported it "
        "— the classic 401 on a build machine. Network checks are skipped until it is fixed.",
        'base_url = "{url}"\nmodel = "ept-sim-1"',
        env_key=None,
    ),
    Scenario(
        "Wrong key (401, credential)",
        "The variable is set, but the server rejects the key: it belongs to another provider or was revoked.",
        'base_url = "{url}"\nmodel = "ept-sim-1"',
        env_key="sk-someone-elses-key-from-laptop-91c2",
    ),
    Scenario(
        "Key not allowed for this model (403, credential)",
        "The key is valid but lacks permission (a restricted project key, a model not enabled for the account).",
        'base_url = "{url}"\nmodel = "ept-sim-1"',
        sim={"script": ["403"]},
    ),
    Scenario(
        "base_url without /v1 (404, endpoint)",
        "An OpenAI-compatible gateway configured as `/api` instead of `/api/v1` (a missing or extra `/v1` is the most common 404).",
        'base_url = "{root}/api"\nmodel = "ept-sim-1"',
    ),
    Scenario(
        "Model name not served (404 / not listed)",
        "The base_url is right but the model name was never changed from another provider's.",
        'base_url = "{url}"\nmodel = "gpt-4o"',
        sim={"strict_models": True},
    ),
    Scenario(
        "Anthropic protocol with /v1 in base_url",
        "Anthropic-protocol clients (Claude Code, the anthropic SDK) append `/v1/messages` themselves.",
        'protocol = "anthropic"\nbase_url = "{url}"\nmodel = "ept-sim-1"',
    ),
    Scenario(
        "Server not reachable (unreachable)",
        "Nothing listens on the port (proxy not started, wrong host).",
        'base_url = "{dead}/v1"\nmodel = "ept-sim-1"',
    ),
    Scenario(
        "Server hangs past the timeout (transient)",
        "Requests queue longer than the client waits; run with `--timeout 1` here.",
        'base_url = "{url}"\nmodel = "ept-sim-1"',
        sim={"rate_hang": 1.0, "hang_s": 30},
        args=("--timeout", "1"),
    ),
    Scenario(
        "Rate limited (429)",
        "Every completion gets 429 with Retry-After: 1; the doctor retries once.",
        'base_url = "{url}"\nmodel = "ept-sim-1"',
        sim={"rate_429": 1.0, "retry_after": 1},
    ),
    Scenario(
        "Request rejected (400, permanent)",
        "The server refuses the request itself (unsupported parameter, malformed body): not retried, since "
        "sending it again cannot help.",
        'base_url = "{url}"\nmodel = "ept-sim-1"',
        sim={"script": ["400"]},
    ),
    Scenario(
        "No usage in the response",
        "The endpoint answers but strips `usage` (some proxies do): token accounting would be impossible.",
        'base_url = "{url}"\nmodel = "ept-sim-1"',
        sim={"rate_missing_usage": 1.0},
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(sc: Scenario, tmp: Path, root: str, dead: str) -> tuple[str, int]:
    body = sc.profile.format(url=root + "/v1", root=root, dead=dead)
    pf = tmp / "profiles.toml"
    pf.write_text(f'[profiles.demo]\napi_key_env = "DEMO_API_KEY"\ntimeout = 10\n{body}\n')
    env = {k: v for k, v in os.environ.items() if k != "DEMO_API_KEY"}
    env.update(
        {
            "NO_COLOR": "1",
            "TERM": "dumb",
            "COLUMNS": "120",
            "PYTHONPATH": str(REPO),
            "EPT_CLIENT_CONFIGS": str(tmp / "no-client-config.json"),
        }
    )  # check 7 does not read this machine's
    if sc.env_key:
        env["DEMO_API_KEY"] = sc.env_key
    cmd = [
        sys.executable,
        "-m",
        "elo_per_token",
        "doctor",
        "--profile",
        "demo",
        "--profiles",
        str(pf),
        *sc.args,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    out = (r.stdout + r.stderr).replace(str(pf), "profiles.toml")
    for secret in (DOC_KEY, sc.env_key):
        if secret and secret in out:  # not an assert: `python -O` would strip it
            raise RuntimeError("a key leaked into doctor output")
    return out.rstrip() + "\n", r.returncode


def main() -> None:
    try:
        sim = start_in_thread({"api_key": DOC_KEY}, port=PORT)
    except OSError:
        sim = start_in_thread({"api_key": DOC_KEY})
    dead = f"http://127.0.0.1:{free_port()}"
    parts = [HEADER]
    try:
        with tempfile.TemporaryDirectory() as t:
            for sc in SCENARIOS:
                sim.control.set(
                    **{
                        "strict_models": False,
                        "auth_style": "openai",
                        "ignore_n": False,
                        "rate_hang": 0.0,
                        "rate_429": 0.0,
                        "rate_missing_usage": 0.0,
                        "script": [],
                        **sc.sim,
                    }
                )
                t0 = time.perf_counter()
                out, rc = run(sc, Path(t), sim.root, dead)
                print(f"{sc.title}: exit {rc} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
                profile = sc.profile.format(url=sim.url, root=sim.root, dead=dead)
                env_line = (
                    "export DEMO_API_KEY=sk-…" + sc.env_key[-4:] if sc.env_key else "unset DEMO_API_KEY"
                )
                parts.append(
                    f'## {sc.title}\n\n{sc.why}\n\n```toml\n[profiles.demo]\napi_key_env = "DEMO_API_KEY"\n'
                    f"timeout = 10\n{profile}\n```\n\n```console\n$ {env_line}\n"
                    f"$ ept doctor --profile demo{' ' + ' '.join(sc.args) if sc.args else ''}\n{out}"
                    f"$ echo $?\n{rc}\n```\n"
                )
    finally:
        sim.stop()
    (REPO / "docs" / "doctor.md").write_text("\n".join(parts))


HEADER = """# `ept doctor`: credentials and egress before evaluation

A 401 or 404 is an egress problem (profile, key, URL), not an evaluation problem. `ept doctor` checks a
profile local checks first, then the network, and prints a concrete fix for each failure:

1. **key variable** — the variable named by `api_key_env` is set, non-empty, unquoted, not the placeholder;
2. **base_url** — an http(s) URL without query string; OpenAI-compatible ones usually end in `/v1`
   (a warning otherwise), Anthropic-protocol ones must not (the SDK appends `/v1/messages`);
3. **GET /models** — reachable with this key (network, TLS, credentials, path);
4. **model listed** — the profile's model is among the listed ones (skipped if the server lists none);
5. **tiny completion returns usage** — one 16-token call; the answer must carry `usage`, which is what
   every token count in this project is built from;
6. **n=2 returns 2 choices** — a warning when the profile's `supports_n` disagrees with the server;
7. **client configs hold no placeholder key** — a warning when `YOUR_API_KEY` (from `ept profiles export`) is
   still in `~/.claude/settings.json`, `~/.codex/config.toml` or the files in `$EPT_CLIENT_CONFIGS`.

A 4xx on GET /models — or on a profile's first request — that is not 401/403 is reported as a credential or
access problem naming the key variable (proxies such as LiteLLM answer a bad key with 400). Exit code 0 only
when no check fails (warnings allowed); 1 otherwise; 2 for a bad profile file. Checks 3-6 are skipped when 1 or
2 fail. Network checks retry once (rate limits honour `Retry-After`,
capped at 5 s) with a per-request timeout of `--timeout` seconds (default 20). Keys are only ever shown
masked (`sk-…abcd`).

```
ept doctor [--profile NAME] [--profiles FILE] [--timeout SECONDS]
```

Everything below is real output: `python docs/make_doctor_docs.py` runs `ept doctor` against the bundled
simulator (started with a key check on) once per failure class and rewrites this page.
"""


if __name__ == "__main__":
    main()
