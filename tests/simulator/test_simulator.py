"""The simulator as an HTTP server: routes, auth, token counts, determinism, faults, config, stats, concurrency."""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor, wait

import pytest
from fixtures_sim import SIM_KEY

from elo_per_token.contracts.errors import InputError
from elo_per_token.simulator.config import load_config
from elo_per_token.simulator.control import start_in_thread
from elo_per_token.simulator.generic import BrainReply, BrainRequest


def call(
    url: str,
    body: dict | None = None,
    key: str | None = SIM_KEY,
    headers: dict | None = None,
    method: str | None = None,
) -> tuple[int, dict, dict]:
    h = {"Content-Type": "application/json", **(headers or {})}
    if key:
        h["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=h, method=method or ("POST" if data else "GET"))
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def chat_body(content: str = "hello", **kw) -> dict:
    return {"model": "ept-sim-1", "messages": [{"role": "user", "content": content}], **kw}


def test_models_say_simulator_on_both_prefixes(sim):
    for prefix in ("/v1", "/api/v1"):
        status, body, _ = call(sim.root + prefix + "/models")
        assert status == 200
        assert [m["id"] for m in body["data"]] == ["ept-sim-1", "ept-sim-large"]
        assert all(m["owned_by"] == "ept-simulator" for m in body["data"])


def test_routes_exist_under_api_v1_and_not_under_api(sim):
    assert call(sim.root + "/api/v1/chat/completions", chat_body())[0] == 200
    assert call(sim.root + "/api/v1/messages", {**chat_body(), "max_tokens": 50})[0] == 200
    status, body, _ = call(sim.root + "/api/chat/completions", chat_body())
    assert status == 404 and body["error"]["code"] == "not_found"


def test_wrong_key_gets_openai_style_401_with_masked_key(sim_keyed):
    wrong = "sk-canary-abcdefabcdefabcdef-9876"
    status, body, _ = call(sim_keyed.url + "/chat/completions", chat_body(), key=wrong)
    assert status == 401
    assert body["error"]["code"] == "invalid_api_key" and body["error"]["type"] == "invalid_request_error"
    assert "sk-…9876" in body["error"]["message"] and wrong not in json.dumps(body)
    assert call(sim_keyed.url + "/models", key=None)[0] == 401
    # Anthropic-style key header and error body on the messages route
    status, body, _ = call(
        sim_keyed.root + "/v1/messages",
        {**chat_body(), "max_tokens": 10},
        key=None,
        headers={"x-api-key": wrong},
    )
    assert status == 401 and body["type"] == "error" and body["error"]["type"] == "authentication_error"
    assert (
        call(
            sim_keyed.root + "/v1/messages",
            {**chat_body(), "max_tokens": 10},
            key=None,
            headers={"x-api-key": SIM_KEY},
        )[0]
        == 200
    )


def test_prompt_tokens_hand_computed(sim):
    # 40 characters -> 10 tokens; + 4 per message + 3 per request.
    _, body, _ = call(sim.url + "/chat/completions", chat_body("abcd" * 10))
    assert body["usage"]["prompt_tokens"] == 3 + 4 + 10
    # system prompt counts too: + 4 + ceil(5/4)
    _, body2, _ = call(
        sim.url + "/chat/completions",
        {
            "model": "m",
            "messages": [{"role": "system", "content": "terse"}, {"role": "user", "content": "abcd" * 10}],
        },
    )
    assert body2["usage"]["prompt_tokens"] == 17 + 4 + 2
    # tool definitions count: + ceil(len(json(tools)) / 4)
    tools = [
        {
            "type": "function",
            "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    _, body3, _ = call(sim.url + "/chat/completions", chat_body("abcd" * 10, tools=tools))
    assert body3["usage"]["prompt_tokens"] == 17 + math.ceil(len(json.dumps(tools)) / 4)
    u = body["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]


def test_anthropic_usage_counts_system_once(sim):
    _, body, _ = call(
        sim.root + "/v1/messages",
        {
            "model": "m",
            "max_tokens": 100,
            "system": "terse",
            "messages": [{"role": "user", "content": "abcd" * 10}],
        },
    )
    assert body["usage"]["input_tokens"] == 17 + 4 + 2
    assert body["type"] == "message" and body["content"][0]["type"] == "text"


def test_completion_tokens_sum_over_choices(generic_sim):
    sim = generic_sim  # GenericBrain leaves completion_tokens to the server's estimate
    _, body, _ = call(sim.url + "/chat/completions", chat_body(n=3, seed=4, temperature=0.7))
    per_choice = [math.ceil(len(c["message"]["content"]) / 4) for c in body["choices"]]
    assert body["usage"]["completion_tokens"] == sum(per_choice)


def test_determinism_across_server_instances(make_sim):
    a, b = make_sim(seed=7), make_sim(seed=7)  # the default brain, whichever it is
    ra = call(a.url + "/chat/completions", chat_body(n=2, seed=3, temperature=0.7))[1]
    rb = call(b.url + "/chat/completions", chat_body(n=2, seed=3, temperature=0.7))[1]
    assert ra["choices"] == rb["choices"] and ra["usage"] == rb["usage"]


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
def test_fault_rates_are_seeded_and_close_to_configured(make_sim):
    def sequence(seed: int) -> list[int]:
        s = make_sim(seed=seed, rate_500=0.3, rate_429=0.1, retry_after=0)
        return [call(s.url + "/chat/completions", chat_body(seed=i))[0] for i in range(300)]

    s1, s2, s3 = sequence(1), sequence(1), sequence(2)
    assert s1 == s2 and s1 != s3
    n = len(s1)
    for status, p in ((500, 0.3), (429, 0.1)):
        k = s1.count(status)
        assert abs(k - n * p) < 4 * math.sqrt(n * p * (1 - p)), (status, k)


def test_script_runs_in_order_then_rates_apply(sim):
    sim.control.set(script=["500", "429", "ok", "403"], retry_after=0.5)
    got = [call(sim.url + "/chat/completions", chat_body())[0] for _ in range(5)]
    assert got == [500, 429, 200, 403, 200]
    st = sim.control.stats()
    assert st["by_status"] == {"500": 1, "429": 1, "200": 2, "403": 1}


def test_429_carries_retry_after_headers(sim):
    sim.control.set(script=["429"], retry_after=1.5)
    status, body, headers = call(sim.url + "/chat/completions", chat_body())
    assert status == 429 and headers["Retry-After"] == "2" and headers["retry-after-ms"] == "1500"
    assert body["error"]["code"] == "rate_limit_exceeded"


def test_missing_usage_fewer_choices_malformed(sim):
    sim.control.set(script=["missing_usage", "fewer_choices", "malformed_json"])
    _, b1, _ = call(sim.url + "/chat/completions", chat_body(n=2))
    assert "usage" not in b1 and len(b1["choices"]) == 2
    _, b2, _ = call(sim.url + "/chat/completions", chat_body(n=5))
    assert len(b2["choices"]) == 1 and b2["usage"]["completion_tokens"] > 0
    req = urllib.request.Request(
        sim.url + "/chat/completions",
        data=json.dumps(chat_body()).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        raw = r.read()
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)


def test_latency_is_added(make_sim):
    s = make_sim(latency_ms=150)
    t0 = time.perf_counter()
    call(s.url + "/chat/completions", chat_body())
    assert time.perf_counter() - t0 >= 0.15


def test_serves_concurrent_requests_without_serialising(make_sim):
    # 40 requests of 300 ms each: serially 12 s; an async server overlaps them.
    s = make_sim(latency_ms=300)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(40) as ex:
        codes = list(ex.map(lambda i: call(s.url + "/chat/completions", chat_body(seed=i))[0], range(40)))
    assert codes == [200] * 40
    assert time.perf_counter() - t0 < 9.0  # serial would be 12 s


def test_config_endpoint_validates_and_never_echoes_key(sim_keyed):
    status, body, _ = call(sim_keyed.root + "/_sim/config", {"rate_500": 2}, key=None)
    assert status == 400 and "rate_500" in body["error"]["message"]
    status, body, _ = call(sim_keyed.root + "/_sim/config", {"bogus": 1}, key=None)
    assert status == 400 and "bogus" in body["error"]["message"]
    cfg = sim_keyed.control.config()
    assert cfg["api_key"] == "<set>" and SIM_KEY not in json.dumps(cfg)


def test_stats_per_job_arm_and_reset(sim):
    for job, arm in (("j1", "a@1"), ("j1", "a@1"), ("j2", "b@4")):
        call(sim.url + "/chat/completions", chat_body(), headers={"X-EPT-Job": job, "X-EPT-Arm": arm})
    st = sim.control.stats()
    assert st["by_job"] == {"j1": 2, "j2": 1} and st["by_arm"] == {"a@1": 2, "b@4": 1}
    assert st["completion_requests"] == 3 and st["tokens"]["prompt_tokens"] > 0
    sim.control.reset()
    st = sim.control.stats()
    assert st["requests"] == 0 and st["by_job"] == {}


class RecordingBrain:
    def __init__(self) -> None:
        self.requests: list[BrainRequest] = []

    def respond(self, req: BrainRequest) -> BrainReply:
        self.requests.append(req)
        return BrainReply(text="Answer: 1", completion_tokens=123)


def test_brain_gets_seed_per_choice_meta_and_degrade():
    brain = RecordingBrain()
    s = start_in_thread({"degrade": {"majority@8": 0.25}}, brain=brain)
    try:
        _, body, _ = call(
            s.url + "/chat/completions",
            chat_body(n=3, seed=42, temperature=0.7),
            headers={"X-EPT-Arm": "majority@8", "X-EPT-Job": "j"},
        )
        call(s.url + "/chat/completions", chat_body(seed=42), headers={"X-EPT-Arm": "greedy@1"})
    finally:
        s.stop()
    r = brain.requests
    assert [x.degrade for x in r] == [0.25, 0.25, 0.25, 0.0]
    assert r[0].meta == {"Arm": "majority@8", "Job": "j"} and r[0].temperature == 0.7
    assert len({x.seed for x in r[:3]}) == 3 and r[3].seed == r[0].seed  # choice 0 seed = f(request seed, 0)
    assert body["usage"]["completion_tokens"] == 3 * 123  # the brain's own count is used when given


def test_stop_is_prompt_even_with_a_hanging_request():
    s = start_in_thread({"rate_hang": 1.0, "hang_s": 60})
    with ThreadPoolExecutor(1) as ex:
        fut = ex.submit(lambda: call(s.url + "/chat/completions", chat_body()))
        time.sleep(0.3)
        t0 = time.perf_counter()
        s.stop()
        assert time.perf_counter() - t0 < 5
        # the hanging client is released (answered or cut off) instead of waiting 60 s
        done, _ = wait([fut], timeout=10)
        assert done


def test_config_file_errors_name_file_and_field(tmp_path):
    good = tmp_path / "sim.toml"
    good.write_text('seed = 3\nlatency_ms = 20\napi_key = "sk-x-123456789"\n[degrade]\n"greedy@1" = 0.2\n')
    cfg = load_config(good)
    assert (cfg.seed, cfg.latency_ms, cfg.degrade) == (3, 20.0, {"greedy@1": 0.2})
    bad = tmp_path / "bad.toml"
    bad.write_text("rate_429 = 1.5\n")
    with pytest.raises(InputError) as ei:
        load_config(bad)
    assert ei.value.file == str(bad) and ei.value.field == "rate_429"


def test_bad_requests_are_400(sim):
    for body in (
        {"model": "m"},
        {"model": "m", "messages": ["hi"]},
        {"messages": [{"role": "user", "content": "x"}]},
        chat_body(n=0),
    ):
        status, err, _ = call(sim.url + "/chat/completions", body)
        assert status == 400 and err["error"]["type"] == "invalid_request_error"
    status, _, _ = call(sim.root + "/v1/messages", chat_body())  # Anthropic requires max_tokens
    assert status == 400


def test_ept_simulate_command_serves_with_config(tmp_path):
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from fixtures_services import free_port

    cfg = tmp_path / "sim.toml"
    cfg.write_text(f'api_key = "{SIM_KEY}"\nmodels = ["only-model"]\n')
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "elo_per_token",
            "simulate",
            "--port",
            str(port),
            "--config",
            str(cfg),
            "--seed",
            "5",
        ],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 60
        while True:
            try:
                status, body, _ = call(f"http://127.0.0.1:{port}/v1/models")
                break
            except OSError:
                assert time.time() < deadline and proc.poll() is None, (
                    proc.stderr.read() if proc.stderr else ""
                )
                time.sleep(0.2)
        assert status == 200 and [m["id"] for m in body["data"]] == ["only-model"]
        assert call(f"http://127.0.0.1:{port}/v1/models", key="sk-wrong-000000000000")[0] == 401
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert "simulator" in err and "not a real model" in err and SIM_KEY not in err


def test_ept_simulate_bad_config_exits_2(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    cfg = tmp_path / "sim.toml"
    cfg.write_text("latency_dist = 'gamma'\n")
    r = subprocess.run(
        [sys.executable, "-m", "elo_per_token", "simulate", "--config", str(cfg)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
    )
    assert r.returncode == 2 and "latency_dist" in r.stderr


_SYSTEM = {
    "role": "system",
    "content": "You are a careful solver. Think step by step and answer briefly. " * 3,
}


def _conversations() -> list[list[dict]]:
    convs = []
    for i in range(6):
        user = {"role": "user", "content": f"task {i}: what is {i} + {i}?"}
        convs.append([_SYSTEM, user])
        convs.append(
            [
                _SYSTEM,
                user,
                {"role": "assistant", "content": str(2 * i)},
                {"role": "user", "content": "sure?"},
            ]
        )
    return convs


def _cached(url: str, messages: list[dict]) -> int:
    status, body, _ = call(url + "/chat/completions", {"model": "ept-sim-1", "messages": messages})
    assert status == 200, body
    return body["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_warm_prompt_cache_depends_on_the_request_only(make_sim):
    """ "warm" (the demo's cache): the same requests report the same cached tokens in any order and at any
    concurrency — so a demo run is reproducible — and earlier messages count as cached from the first request."""
    convs = _conversations()
    a, b = make_sim(api_key=SIM_KEY, prompt_cache="warm"), make_sim(api_key=SIM_KEY, prompt_cache="warm")
    in_order = [_cached(a.url, m) for m in convs]
    with ThreadPoolExecutor(8) as pool:  # reversed and concurrent on a fresh simulator
        rev = list(pool.map(lambda m: _cached(b.url, m), list(reversed(convs))))
    assert in_order == list(reversed(rev))
    assert all(c > 0 for c in in_order)  # the system prompt is in the warmed cache from the start
    # A longer conversation has more cached (its earlier turns), never the newest message.
    assert all(in_order[2 * i + 1] > in_order[2 * i] for i in range(6))
    _, body, _ = call(a.url + "/chat/completions", {"model": "ept-sim-1", "messages": convs[1]})
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] < body["usage"]["prompt_tokens"]


def test_seen_prompt_cache_counts_what_was_sent_before(make_sim):
    """true / "seen": the first request of a prefix misses, a repeat hits (order-dependent by design)."""
    s = make_sim(api_key=SIM_KEY, prompt_cache=True)
    conv = _conversations()[0]
    assert _cached(s.url, conv) == 0
    assert _cached(s.url, conv) > 0


def test_prompt_cache_mode_is_checked(tmp_path):
    f = tmp_path / "sim.toml"
    f.write_text('prompt_cache = "cold"\n')
    with pytest.raises(InputError, match="prompt_cache"):
        load_config(f)
