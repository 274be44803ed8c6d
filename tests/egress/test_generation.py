"""Generation settings and failures that count, over real HTTP against the simulator.

- max_tokens / top_p / stop / reasoning_effort / thinking_budget set per profile, plan and arm reach the server
  (the simulator counts what it received) and are recorded in every call record;
- a short max_tokens gives finish_reason=length, counted per arm in the report;
- a context overflow (400 context_length_exceeded) becomes a scored loss that keeps its tokens;
- reasoning arms record reasoning_tokens as returned, and cost per task from prices equals a hand computation.
"""

from __future__ import annotations

import json

import pytest
from fixtures_sim import SIM_KEY

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.jobs import Job
from elo_per_token.coordinator.expand import expand
from elo_per_token.coordinator.plan import parse_plan
from elo_per_token.egress.client import ProviderClient
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.job import run_job

MATH = load_builtin_suite("math")

PLAN = """
name = "gen"
profile = "simulator"
suites = ["math"]
tasks_per_family = 3

[generation]
max_tokens = 300
top_p = 0.9

[[arms]]
strategy = "greedy"
budgets = [1]

[[arms]]
strategy = "majority"
budgets = [2]
reasoning_effort = ["low", "high"]
max_tokens = 64
"""


def client(sim, **kw) -> ProviderClient:
    return ProviderClient(sim.profile(**kw), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)


def test_plan_arms_and_generation_levels():
    plan = parse_plan(PLAN, file="gen.toml")
    assert plan.generation == {"max_tokens": 300, "top_p": 0.9}
    jobs = expand(plan, MATH[:1])
    arms = [j.arm for j in jobs]
    # A list is an arm dimension; arm-level settings name the arm, plan-level ones do not.
    assert arms == [
        "greedy@1",
        "majority@2[max_tokens=64,effort=low]",
        "majority@2[max_tokens=64,effort=high]",
    ]
    assert all(j.base_gen == {"max_tokens": 300, "top_p": 0.9} for j in jobs)
    assert jobs[1].gen == {"max_tokens": 64, "reasoning_effort": "low"}
    assert len({j.key for j in jobs}) == 3 and all("[" not in j.key for j in jobs)
    # A plan without generation settings keeps its digest (resume of older runs).
    base = PLAN.split("[generation]")[0] + '[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n'
    assert parse_plan(base).digest == parse_plan(base).digest
    assert parse_plan(PLAN).digest != parse_plan(PLAN.replace("max_tokens = 300", "max_tokens = 301")).digest


@pytest.mark.parametrize(
    ("snippet", "field", "msg"),
    [
        ("[generation]\nmax_tokens = 0\n", "generation.max_tokens", ">= 1"),
        ('[generation]\nreasoning_effort = "extreme"\n', "generation.reasoning_effort", "one of"),
        ("[generation]\nbogus = 1\n", "generation.bogus", "unknown generation setting"),
        (
            '[[arms]]\nstrategy = "greedy"\nbudgets = [1]\nthinking_budget = [1024, 1024]\n',
            "arms[2].thinking_budget",
            "distinct",
        ),
    ],
)
def test_bad_generation_settings_name_file_line_and_field(snippet, field, msg):
    text = PLAN.replace("[generation]\nmax_tokens = 300\ntop_p = 0.9\n", "") + snippet
    with pytest.raises(InputError) as ei:
        parse_plan(text, file="gen.toml")
    assert ei.value.field == field and msg in ei.value.message and ei.value.file == "gen.toml"
    assert ei.value.line is not None and text.splitlines()[ei.value.line - 1].split("=")[0].strip() in field


def test_profile_generation_fields_parse_and_fail_cleanly(tmp_path):
    from elo_per_token.egress.profiles import load_profiles

    f = tmp_path / "p.toml"
    f.write_text(
        '[profiles.x]\nbase_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\nmax_tokens = 512\n'
        'reasoning_effort = "low"\nprice_in_per_1m = 1.0\nprice_cached_in_per_1m = 0.5\n'
    )
    p = load_profiles(f)["x"]
    assert p.generation == {"max_tokens": 512, "reasoning_effort": "low"} and p.price_cached_in_per_1m == 0.5
    f.write_text('[profiles.x]\nbase_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\ntop_p = 2\n')
    with pytest.raises(InputError) as ei:
        load_profiles(f)
    assert ei.value.field == "profiles.x.top_p" and ei.value.line == 5


def test_settings_reach_the_server_narrowest_level_wins_and_are_recorded(sim):
    # profile: max_tokens 500 + stop; plan: max_tokens 300, top_p; arm: max_tokens 64, effort low.
    c = client(sim, generation={"max_tokens": 500, "stop": ["\nZZZ"]})
    job = Job(
        "r",
        MATH[0],
        "greedy",
        1,
        gen={"max_tokens": 64, "reasoning_effort": "low"},
        base_gen={"max_tokens": 300, "top_p": 0.9},
    )
    res = run_job(job, c)
    by_gen = sim.control.stats()["by_gen"]
    assert by_gen == {"max_tokens=64": 1, "reasoning_effort=low": 1, "top_p=0.9": 1, 'stop=["\\nZZZ"]': 1}, (
        by_gen
    )
    (call,) = res.calls
    assert call.gen == {
        "temperature": 0.0,
        "max_tokens": 64,
        "reasoning_effort": "low",
        "top_p": 0.9,
        "stop": ["\nZZZ"],
    }
    line = next(x for x in res.to_lines() if x["kind"] == "call")
    assert line["gen"]["max_tokens"] == 64 and line["finish_reasons"] == [call.finish_reason]


def test_short_max_tokens_gives_length_and_the_report_counts_it(sim, tmp_path):
    from elo_per_token.analysis.pipeline import AnalysisOptions, analyze

    c = client(sim)
    lines = []
    for t in MATH[:6]:
        for gen in ({}, {"max_tokens": 20}):
            lines += run_job(Job("r", t, "greedy", 1, gen=gen), c).to_lines()
    f = tmp_path / "calls.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    cut = [x for x in lines if x["kind"] == "call" and x["gen"].get("max_tokens") == 20]
    assert cut and all(x["finish_reason"] == "length" and x["usage"]["completion_tokens"] <= 20 for x in cut)
    res = analyze([str(f)], AnalysisOptions(rounds=0))
    b = {r["arm"]: r for r in res.breakdown.to_dicts()}
    assert b["greedy@1[max_tokens=20]"]["calls_cut_by_max_tokens"] == 6
    assert b["greedy@1"]["calls_cut_by_max_tokens"] == 0


def test_context_overflow_is_a_scored_loss_with_its_tokens(make_sim, tmp_path):
    from elo_per_token.analysis.pipeline import AnalysisOptions, analyze
    from elo_per_token.coordinator.sweep_tally import DETERMINISTIC

    # A window that fits one solve prompt but not a verifier prompt carrying a long candidate (best_of_n):
    # the samples are paid for, then the verifier call overflows.
    sim = make_sim(context_length=650)
    c = client(sim, supports_n=False)
    lines = []
    for t in MATH[:4]:
        lost = run_job(Job("r", t, "best_of_n", 2, gen={"max_tokens": 400}), c)
        assert lost.outcome.score == 0.0 and lost.outcome.error is None, lost.outcome
        assert (
            lost.outcome.failure["class"] == "context_overflow" and lost.outcome.failure["scored"] == "loss"
        )
        assert "maximum context length" in lost.outcome.failure["message"]
        assert lost.tokens > 0 and any(x.error and x.error["class"] == "context_overflow" for x in lost.calls)
        lines += lost.to_lines() + run_job(Job("r", t, "greedy", 1), c).to_lines()
    assert "context_overflow" in DETERMINISTIC  # not suggested for `ept retry`
    f = tmp_path / "calls.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = analyze([str(f)], AnalysisOptions(rounds=0))
    arm = "best_of_n@2[max_tokens=400]"
    assert arm in res.arms  # compared (as losses), not dropped
    b = {r["arm"]: r for r in res.breakdown.to_dicts()}
    assert b[arm]["tasks_attempted"] == 4 and b[arm]["tasks_lost"] == 4 and b[arm]["tasks_answered"] == 0
    assert b[arm]["failed_by_class"] == "context_overflow:4"
    # Its tokens count: the failed call is not "missing usage", and the arm's cost is the samples it paid for.
    tok = {r["arm"]: r for r in res.tokens.to_dicts()}
    paid = sum(
        x["usage"]["prompt_tokens"] + x["usage"]["completion_tokens"]
        for x in lines
        if x["kind"] == "call" and x["arm"] == arm and x["usage"]
    )
    assert tok[arm]["total_tokens"] == paid and tok[arm]["calls_missing_usage"] == 0
    assert tok[arm]["avg_tokens_per_task"] == pytest.approx(paid / 4)

    # The same run as ledger objects, compacted into a Parquet segment: the losses and their classes survive.
    from elo_per_token.ledger import open_ledger
    from elo_per_token.ledger.segments import compact_run

    led = open_ledger(tmp_path / "ledger")
    by_key: dict[str, list[str]] = {}
    for x in lines:
        by_key.setdefault(x["job_key"], []).append(json.dumps(x) + "\n")
    for k, v in by_key.items():
        led.put_job("r", k, "".join(v).encode())
    compact_run(led, "r")
    assert list((tmp_path / "ledger" / "runs" / "r" / "compact").glob("*.parquet"))
    again = analyze([led.run_url("r")], AnalysisOptions(rounds=0))
    b2 = {r["arm"]: r for r in again.breakdown.to_dicts()}
    assert b2[arm] == b[arm]


def test_reasoning_arms_record_reasoning_tokens_and_cost_matches_hand_computation(make_sim, tmp_path):
    from elo_per_token.analysis.pipeline import AnalysisOptions, analyze

    sim = make_sim(prompt_cache=True)
    c = client(sim, supports_n=False)
    lines = []
    for t in MATH[:8]:
        for gen in ({}, {"reasoning_effort": "high"}):
            lines += run_job(Job("r", t, "majority", 2, gen=gen), c).to_lines()
    calls = [x for x in lines if x["kind"] == "call"]
    high = [x for x in calls if x["gen"].get("reasoning_effort") == "high"]
    plain = [x for x in calls if "reasoning_effort" not in x["gen"]]
    # all() over an empty list is True: both kinds of call must be there for the checks below to mean anything.
    assert len(high) >= 8 and len(plain) >= 8, (len(high), len(plain))
    assert all(x["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0 for x in high)
    assert all(x["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0 for x in plain)
    # Repeated prompts (the second sample of each task) report cached input tokens.
    assert any(x["usage"]["prompt_tokens_details"]["cached_tokens"] > 0 for x in calls)
    f = tmp_path / "calls.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = analyze([str(f)], AnalysisOptions(rounds=50, prices="in=2,cached=0.5,out=8"))
    b = {r["arm"]: r for r in res.breakdown.to_dicts()}
    arm = "majority@2[effort=high]"
    mine = [x for x in calls if x["arm"] == arm]
    reasoning = sum(x["usage"]["completion_tokens_details"]["reasoning_tokens"] for x in mine)
    completion = sum(x["usage"]["completion_tokens"] for x in mine)
    assert b[arm]["reasoning_tokens"] == reasoning and b[arm]["reasoning_share"] == pytest.approx(
        reasoning / completion
    )
    by_task: dict[str, float] = {}
    for x in mine:
        u = x["usage"]
        cached = u["prompt_tokens_details"]["cached_tokens"]
        usd = ((u["prompt_tokens"] - cached) * 2 + cached * 0.5 + u["completion_tokens"] * 8) / 1e6
        by_task[x["task_id"]] = by_task.get(x["task_id"], 0.0) + usd
    assert b[arm]["cost_per_task"] == pytest.approx(sum(by_task.values()) / len(by_task), rel=1e-12)
    ct = {r["arm"]: r for r in res.cost_table.to_dicts()}
    assert ct[arm]["cost_per_task"] == pytest.approx(b[arm]["cost_per_task"])
    assert ct[arm]["d_elo_per_usd_lo"] <= ct[arm]["d_elo_per_usd"] <= ct[arm]["d_elo_per_usd_hi"]
    # The split and the cost reach every output: report.json, report.md and the HTML report.
    from elo_per_token.analysis.html_gather import write_html
    from elo_per_token.analysis.report_markdown import markdown

    assert res.to_json()["breakdown"] and res.to_json()["cost_table"]
    assert "ΔElo per $1" in markdown(res) and "| reasoning |" in markdown(res)
    page = write_html(res, tmp_path / "r.html").read_text()
    assert 'id="breakdown-table"' in page and f'data-arm="{arm}"' in page
    assert 'id="cost-elo-table"' in page and repr(float(ct[arm]["cost_per_task"])) in page

    # Compacted into a Parquet segment, the usage details (reasoning, cached) are kept.
    from elo_per_token.ledger import open_ledger
    from elo_per_token.ledger.segments import compact_run

    led = open_ledger(tmp_path / "ledger")
    by_key: dict[str, list[str]] = {}
    for x in lines:
        by_key.setdefault(x["job_key"], []).append(json.dumps(x) + "\n")
    for k, v in by_key.items():
        led.put_job("r", k, "".join(v).encode())
    compact_run(led, "r")
    assert list((tmp_path / "ledger" / "runs" / "r" / "compact").glob("*.parquet"))
    again = analyze([led.run_url("r")], AnalysisOptions(rounds=0, prices="in=2,cached=0.5,out=8"))
    b2 = {r["arm"]: r for r in again.breakdown.to_dicts()}
    assert b2[arm]["reasoning_tokens"] == reasoning and b2[arm]["cost_per_task"] == pytest.approx(
        b[arm]["cost_per_task"]
    )


def test_anthropic_thinking_budget_reaches_the_server_and_usage_keeps_cache_fields(make_sim):
    sim = make_sim()
    c = ProviderClient(sim.profile("anthropic"), api_key=SIM_KEY)
    r = c.chat([{"role": "user", "content": "What is 6 times 7?"}], gen={"thinking_budget": 2048})
    assert sim.control.stats()["by_gen"] == {"thinking_budget=2048": 1, f"max_tokens={2048 + 1024}": 1}
    assert set(r.usage) >= {
        "prompt_tokens",
        "completion_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    }
    assert r.usage["completion_tokens"] > 1000  # thinking counts in output_tokens


def test_a_known_context_length_lowers_max_tokens_and_refuses_prompts_that_cannot_fit(make_sim):
    sim = make_sim(context_length=400)
    c = client(sim, context_length=400)
    res = run_job(Job("r", MATH[0], "greedy", 1, gen={"max_tokens": 2000}), c)
    (call,) = res.calls
    # Lowered before sending, so the server took it (no 400) and the record says what was sent.
    assert call.error is None and call.gen["max_tokens"] < 400 and res.outcome.score is not None
    assert sim.control.stats()["by_gen"] == {f"max_tokens={call.gen['max_tokens']}": 1}
    tiny = client(sim, context_length=40)
    lost = run_job(Job("r", MATH[0], "greedy", 1), tiny)
    assert (
        lost.outcome.failure["class"] == "context_overflow" and "not sent" in lost.outcome.failure["message"]
    )
    assert sim.control.stats()["completion_requests"] == 1  # the refused prompt never reached the server
