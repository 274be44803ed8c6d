"""Issue 36 (trust boundaries, round two), the worker/egress/coordinator share; each test fails on c02c156.

1. The spending cap counts a call without usable usage at its upper bound (prompt estimate + max_tokens x n),
   flags it, and the summary says how much of the spend is estimated: a capped sweep against a provider that
   sends no usage stops within one job's bound (40 of 40 jobs ran before).
2. One scrub, one secret set: the profile key, key-like environment values and the passwords of URL-valued
   variables, masked as written, split across fields, base64-, URL- and JSON-encoded (hypothesis, bounded);
   a transcript round trip over real HTTP with the AWS secret, the Redis password and a URL password echoed
   in the completion, the reasoning and the tool-call arguments stores none of them.
6. Reasoning text is stored (scrubbed), on both protocols, plain and streamed, over real HTTP.
11. A 307 to another host is not followed; `--max-cost inf` (nan, negative) is a one-line error, exit 2.
"""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest
from bounds import bounded
from hostile_provider import start_hostile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.contracts import transcripts as tr
from elo_per_token.contracts.secrets import RUN_CHARS, scrub
from elo_per_token.egress.client import ProviderClient
from elo_per_token.egress.profiles import Profile

KEY = "sk-trust-0123456789abcdefWXYZ"
AWS = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzq9Xw7EXAMPLE"
REDIS_PW = "r3dis-Pa55w0rd-9f8e7d6c5b4a"
URL_PW = "s3-url-Secret-77aa88bb99cc"
ENV = {
    "AWS_SECRET_ACCESS_KEY": AWS,
    "EPT_BROKER_URL": f"redis://:{REDIS_PW}@127.0.0.1:6390/0",  # a URL-valued variable: its password
    "EPT_S3_ENDPOINT": f"https://ept:{URL_PW}@s3.internal.example:9000",
}
SECRETS = (AWS, REDIS_PW, URL_PW)
TOKEN_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/=_-"


@pytest.fixture
def secret_env(monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


# ---- 2. one scrub, one secret set ---------------------------------------------------------------------------


def test_env_secrets_are_masked_even_when_a_key_is_given(secret_env) -> None:
    """Before: a non-empty secret list (the profile key) replaced the environment's secrets, and a password
    inside a URL-valued variable was never collected."""
    text = f"aws={AWS} redis={REDIS_PW} s3={URL_PW} key={KEY}"
    for out in (scrub(text, [KEY]), tr.scrub_text(text, [KEY])):
        assert not any(s in out for s in (*SECRETS, KEY)), out


def _encoded(secret: str, how: str, pre: bytes) -> str:
    if how == "url":
        return quote(secret, safe="")
    if how == "json":
        return json.dumps({"v": secret})
    if how == "b64":  # inside a longer blob, at any byte alignment
        return base64.b64encode(pre + secret.encode() + b"tail").decode()
    if how == "b64url":
        return base64.urlsafe_b64encode(pre + secret.encode()).decode()
    return secret


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    secret=st.text(TOKEN_ALPHABET, min_size=16, max_size=64).filter(lambda s: len(set(s)) >= 8),
    how=st.sampled_from(["plain", "url", "json", "b64", "b64url"]),
    pre=st.binary(max_size=5),
    before=st.text(max_size=200),
    after=st.text(max_size=200),
)
def test_echoed_encoded_secrets_never_survive(monkeypatch, secret, how, pre, before, after) -> None:
    monkeypatch.setenv("EPT_PROP_API_TOKEN", secret)
    enc = _encoded(secret, how, pre)
    out = bounded(lambda: scrub(before + enc + after, [KEY]), 2.0, 16)
    assert secret not in out
    if how in ("url", "json"):
        assert enc not in out
    if how.startswith("b64"):  # no 12-character piece of the secret's encoding survives in the blob
        core = base64.b64encode(secret.encode()).decode()[:12]
        assert enc not in out and (core not in enc or core not in out)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # Token-shaped (contracts.secrets: not a path, so not starting with "/"); an AWS secret key has "/" and "+".
    secret=st.text(TOKEN_ALPHABET, min_size=36, max_size=80).filter(
        lambda s: len(set(s)) >= 10 and s[0] != "/"
    ),
    cuts=st.lists(st.integers(RUN_CHARS, 40), min_size=1, max_size=2),
    noise=st.text(max_size=60),
)
def test_a_secret_split_across_fields_leaves_no_long_piece(monkeypatch, secret, cuts, noise) -> None:
    """The secret cut into pieces of RUN_CHARS or more, one per transcript field (completion, reasoning, a
    tool call's arguments): no field keeps any run of RUN_CHARS characters of it."""
    monkeypatch.setenv("EPT_PROP_SECRET", secret)
    pieces, at = [], 0
    for c in cuts:
        if len(secret) - at - c >= RUN_CHARS:
            pieces.append(secret[at : at + c])
            at += c
    pieces.append(secret[at:])
    fields = pieces + [""] * (3 - len(pieces))
    doc = {"job_key": "f/t/a/r0", "calls": [{"call_index": 0, "role": "sample", "completion": noise + fields[0],
           "reasoning": fields[1] + noise, "tool_calls": [{"arguments": json.dumps({"x": fields[2]})}]}]}  # fmt: skip
    back = bounded(lambda: tr.bounded(doc), 2.0, 16)
    for s in _strings(back):
        assert not any(secret[i : i + RUN_CHARS] in s for i in range(len(secret) - RUN_CHARS + 1)), (
            s,
            secret,
        )


def test_scrub_is_bounded_on_a_degenerate_secret_and_text(monkeypatch) -> None:
    """A secret of repeated blocks against a long text of the same characters: one pass per block."""
    monkeypatch.setenv("EPT_PROP_TOKEN", "abcdef" * 20 + "XYZ123")
    text = "abcdef" * 200_000
    out = bounded(lambda: scrub(text), 5.0, 64)
    assert "abcdef" * 2 not in out


def _strings(x) -> list[str]:
    if isinstance(x, str):
        return [x]
    if isinstance(x, dict):
        return [s for k, v in x.items() for s in (k, *_strings(v))]
    if isinstance(x, list):
        return [s for v in x for s in _strings(v)]
    return []


# ---- 2 + 6. the transcript round trip over real HTTP, both protocols, plain and streamed --------------------

COMBOS = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]


@pytest.fixture(scope="module")
def echo():
    h = start_hostile(key=KEY, force="echo_secrets")
    yield h
    h.stop()


def _client(h, protocol: str, stream: bool) -> ProviderClient:
    prof = Profile(name=f"echo-{protocol}", protocol=protocol, base_url=h.url if protocol == "openai" else h.root,
                   api_key_env="EPT_ECHO_KEY", model="hostile-1", timeout=5.0, max_retries=0, stream=stream,
                   supports_n=False)  # fmt: skip
    return ProviderClient(prof, api_key=KEY, backoff_base=0.01, backoff_cap=0.05)


@pytest.mark.parametrize("protocol,stream", COMBOS)
def test_transcript_round_trip_stores_reasoning_and_no_secret(echo, secret_env, tmp_path, protocol, stream):
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.ledger import FileLedger
    from elo_per_token.worker.lifecycle import perform_job

    b64 = base64.b64encode(AWS.encode()).decode()
    echo.payload = (f"thinking about aws {AWS}, redis {REDIS_PW}, url {URL_PW}, key {KEY}, "
                    f"b64 {b64}, urlenc {quote(AWS, safe='')}")  # fmt: skip
    led = FileLedger(tmp_path / "ledger")
    task = {"task_id": "math-001", "family": "math", "prompt": "What is 1 + 3? End with 'Answer: N'.",
            "reference": "4", "grader": {"type": "numeric"}}  # fmt: skip
    job = Job("echo", task, "greedy", 1, seed=1)
    summary = perform_job(job, led, _client(echo, protocol, stream), transcripts=True, api_key=KEY)
    assert summary["status"] == "done", summary
    blob = led.get_blob("echo", tr.blob_name(job.key))
    assert blob is not None
    import gzip

    raw = gzip.decompress(blob).decode()
    stored = raw + led.get_job("echo", job.key).decode()
    for s in (*SECRETS, KEY, b64, quote(AWS, safe="")):
        assert s not in stored and json.dumps(s)[1:-1] not in stored, s
    call = tr.decode(blob)["calls"][0]
    # Item 6: the reasoning is stored (scrubbed), as are the text and the tool call.
    assert call["reasoning"] and "thinking about aws" in call["reasoning"], call
    assert "redis " in call["reasoning"] and "sk-…WXYZ" in call["reasoning"]
    assert "thinking about aws" in str(call["completion"])
    args = json.loads(call["tool_calls"][0]["arguments"])
    assert "thinking about aws" in args["note"]


# ---- 1. the cap counts calls without usage at their upper bound ----------------------------------------------


@pytest.mark.parametrize("fault", ["missing", "usage_negative", "usage_nan"])
def test_cap_stops_within_one_job_bound_when_the_provider_sends_no_usable_usage(tmp_path, make_sim, monkeypatch,
                                                                               fault):  # fmt: skip
    """Before: `--max-tokens 100` against a provider with no (or junk) usage ran every job, "0 tokens"."""
    import dataclasses
    import io

    from fixtures_faults import FAULT_KEY, fault_rig
    from rich.console import Console

    from elo_per_token.coordinator.sweep import execute, print_summary
    from elo_per_token.egress.profiles import get_profile

    opts = {"rate_missing_usage": 1.0} if fault == "missing" else {"script": [fault] * 400}
    sim = make_sim(api_key=FAULT_KEY, seed=3, **opts)
    rig = fault_rig(tmp_path, sim.url, name="capnousage", ledger=str(tmp_path / "ledger"), executor="local",
                    per_family=7, concurrency=2, timeout=5.0, max_retries=0)  # fmt: skip
    rig.use_in_process(monkeypatch)
    plan = dataclasses.replace(rig.plan, max_total_tokens=100)
    out = execute(plan, rig.jobs, profile=get_profile("fault-sim"), analyze=False)
    led = rig.open_ledger()
    done = led.list_jobs(plan.run_id)
    assert len(rig.jobs) >= 40 and out.stopped_for_budget, (len(done), out.tally)
    # Within one job's bound per worker thread: every job's bound alone is over the cap, so at most the jobs
    # in flight when the first one finished ran.
    assert 1 <= len(done) <= plan.concurrency, len(done)
    lines = [json.loads(x) for k in done for x in led.get_job(plan.run_id, k).decode().splitlines()]
    calls = [x for x in lines if x.get("kind") == "call"]
    assert calls and all(c["usage"] is None and c["usage_missing"] and c["usage_estimate"] > 0 for c in calls)
    assert out.tally.est_tokens == sum(c["usage_estimate"] for c in calls) and out.tally.tokens == 0
    buf = io.StringIO()
    print_summary(out, Console(file=buf, width=400, color_system=None))
    text = buf.getvalue()
    assert "estimated spend" in text and f"{out.tally.est_tokens:,}" in text, text
    # The next session counts this one's estimate: nothing more runs under the same cap.
    sim.control.reset()
    again = execute(plan, rig.jobs, profile=get_profile("fault-sim"), analyze=False)
    assert again.tally.done == 0 and sim.control.stats()["requests"] == 0


# ---- 11. a redirect to another host; --max-cost inf -----------------------------------------------------------


def _redirector(target: str | None):
    """A loopback server: POST .../chat/completions answers 307 to `target` (None: to its own /v2 path, where it
    answers a normal reply); it counts the requests it gets."""
    import http.server
    import threading

    seen: list[str] = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.path)
            self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path.startswith("/v1/"):
                self.send_response(307)
                self.send_header("Location", (target or "") + self.path.replace("/v1/", "/v2/", 1))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.dumps({"id": "c", "object": "chat.completion", "model": "m", "usage": {
                "prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}, "choices": [{"index": 0, "message": {
                "role": "assistant", "content": "Answer: 4"}, "finish_reason": "stop"}]}).encode()  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, seen


def _redirect_client(port: int) -> ProviderClient:
    prof = Profile(name="redir", protocol="openai", base_url=f"http://127.0.0.1:{port}/v1", api_key_env="EPT_R_KEY",
                   model="m", timeout=5.0, max_retries=0, stream=False)  # fmt: skip
    return ProviderClient(prof, api_key=KEY, backoff_base=0.01, backoff_cap=0.05)


def test_a_redirect_to_another_host_is_not_followed_and_one_within_the_endpoint_is() -> None:
    from elo_per_token.egress.errors import ProviderError

    other, other_seen = _redirector(None)
    srv, seen = _redirector(f"http://127.0.0.1:{other.server_address[1]}")
    try:
        with pytest.raises(ProviderError) as ei:
            _redirect_client(srv.server_address[1]).chat([{"role": "user", "content": "1 + 3?"}])
        assert (
            ei.value.error_class == "endpoint"
            and "307" in ei.value.message
            and "not followed" in ei.value.message
        )
        assert len(seen) == 1 and other_seen == []  # the prompt never reached the other host
        resp = _redirect_client(other.server_address[1]).chat([{"role": "user", "content": "1 + 3?"}])
        assert resp.choices[0].text == "Answer: 4" and other_seen == [
            "/v1/chat/completions",
            "/v2/chat/completions",
        ]
    finally:
        srv.shutdown()
        other.shutdown()


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "-inf"])
def test_max_cost_that_is_not_a_finite_positive_number_is_a_one_line_error(tmp_path, value) -> None:
    from cli_runner import run_ept
    from fixtures_faults import write_plan, write_suite

    suite = write_suite(tmp_path / "s.jsonl", per_family=1)
    plan = write_plan(
        tmp_path / "p.toml", name="mc", suite=suite, ledger=str(tmp_path / "led"), executor="local"
    )
    r = run_ept("sweep", str(plan), "--max-cost", value, env={"EPT_SIM_API_KEY": "x"})
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out and "--max-cost" in out, out
    assert not (tmp_path / "led").exists() or not any((tmp_path / "led").rglob("*.json*"))


def test_log_records_are_scrubbed(secret_env, caplog) -> None:
    """Logs: a record whose arguments carry the Redis password or the AWS secret is stored masked."""
    import logging

    from elo_per_token.contracts.secrets import scrub_log_records

    scrub_log_records()
    with caplog.at_level(logging.WARNING, logger="ept.test"):
        logging.getLogger("ept.test").warning("broker %s refused; aws %s", ENV["EPT_BROKER_URL"], AWS)
    text = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "broker redis://:" in text and not any(s in text for s in SECRETS), text
