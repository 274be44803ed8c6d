"""Settings checked by models (issue 35): the simulator config, provider profiles, plans and their [adaptive],
[budget] and [rate_limits] tables are validated by their dataclasses' annotations (common/checked.py).

Hostile TOML (deep nesting, huge strings and integers, wrong types, NaN and infinities, unknown keys) fed to
each loader either loads or fails with an InputError naming the file and the field, quickly and in bounded
memory; never another exception.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toml_gen import toml_value as _toml_value

from elo_per_token.contracts.errors import InputError

# Keys each loader knows, so generated tables hit real fields (wrong types, bounds) as well as unknown ones.
SIM_KEYS = ["seed", "latency_ms", "latency_dist", "api_key", "models", "rate_429", "script", "degrade",
            "context_length", "prompt_cache", "reject_params", "hang_s", "strict_models"]  # fmt: skip
PROFILE_KEYS = ["protocol", "timeout", "max_retries", "rpm", "headers", "supports_n", "price_in_per_1m",
                "context_length", "patience", "max_response_mb", "small_fast_model"]  # fmt: skip
PLAN_KEYS = ["profile", "replicates", "seed", "tasks_per_family", "ledger", "executor", "concurrency", "queue",
             "batch_size", "bootstrap_rounds", "anchor", "max_jobs", "transcripts"]  # fmt: skip
ADAPTIVE_KEYS = ["alpha", "rounds", "min_rounds", "width", "max_tokens", "futility", "futility_power",
                 "epsilon_elo", "epsilon_tokens", "delta", "seed"]  # fmt: skip


def toml_value(v: Any) -> str:
    return _toml_value(v, ascii_only=True)


_scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.text(max_size=8), st.sampled_from(["", "  ", "warm", "openai", "celery", "429", "sk-secret-ABCD"]),
)  # fmt: skip
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                       st.dictionaries(st.text(max_size=5), inner, max_size=3)), max_leaves=8)  # fmt: skip


def _table(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(
        st.one_of(st.sampled_from(keys), st.text(min_size=1, max_size=6)), _values, max_size=5
    )


# Degenerate documents no generated table reaches: nesting past the parser's recursion, megabyte strings,
# integers past Python's digit limit, a lone NaN.
MONSTERS = [
    "x = " + "[" * 5000 + "]" * 5000,
    "x = " + "{a = " * 3000 + "1" + "}" * 3000,
    'x = "' + "A" * 2_000_000 + '"',
    "x = " + "1" * 5000,
    "x = nan",
]


def _check(load: Any, path: Path, text: str) -> None:
    """`load(path)` loads or raises an InputError naming the file (and a field, unless the TOML is broken)."""
    path.write_text(text, encoding="utf-8")
    try:
        bounded(lambda: load(path), time_s=3, memory_mb=96)
    except InputError as e:
        assert e.file == str(path), e
        assert e.field or "TOML" in e.message or "table" in e.message, e
        assert "sk-secret-ABCD" not in str(e)


def _sim(text: str, tmp: Path) -> None:
    from elo_per_token.simulator.config import load_config

    _check(load_config, tmp / "sim.toml", text)


def _profiles(text: str, tmp: Path) -> None:
    from elo_per_token.egress.profiles import load_profiles

    _check(load_profiles, tmp / "profiles.toml", text)


def _plan(text: str, tmp: Path) -> None:
    from elo_per_token.coordinator.plan import load_plan

    _check(load_plan, tmp / "plan.toml", text)


def _lines(table: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in table.items())


PLAN_HEAD = 'name = "x"\nsuites = ["math"]\n'
PLAN_ARMS = '[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n'
PROFILE_HEAD = '[profiles.p]\nbase_url = "http://h/v1"\napi_key_env = "K"\nmodel = "m"\n'


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sim=_table(SIM_KEYS), prof=_table(PROFILE_KEYS), plan=_table(PLAN_KEYS), adaptive=_table(ADAPTIVE_KEYS)
)
def test_hostile_tables_load_or_name_file_and_field_in_bounded_time_and_memory(
    tmp_path_factory: pytest.TempPathFactory,
    sim: dict[str, Any],
    prof: dict[str, Any],
    plan: dict[str, Any],
    adaptive: dict[str, Any],
) -> None:
    tmp = tmp_path_factory.mktemp("hostile")
    _sim(_lines(sim), tmp)
    _sim("[simulator]\n" + _lines(sim), tmp)
    _profiles(PROFILE_HEAD + _lines(prof), tmp)
    top = {k: v for k, v in plan.items() if k not in ("name", "suites", "arms")}
    _plan(PLAN_HEAD + _lines(top) + PLAN_ARMS + "[adaptive]\n" + _lines(adaptive), tmp)


@pytest.mark.slow
@pytest.mark.parametrize(
    "monster", MONSTERS, ids=["deep-array", "deep-table", "2MB-string", "5000-digits", "nan"]
)
@pytest.mark.parametrize("load", [_sim, _profiles, _plan], ids=["simulator", "profiles", "plan"])
def test_degenerate_toml_is_refused_with_its_file_in_bounded_time_and_memory(tmp_path, load, monster):
    load(monster, tmp_path)


@pytest.mark.parametrize(
    ("text", "field", "line", "words"),
    [
        ("seed = 1\nrate_429 = 1.5\n", "rate_429", 2, "must be a number in 0..1, got 1.5"),
        ("[simulator]\nlatency_ms = nan\n", "latency_ms", 2, "must be a non-negative number, got nan"),
        ('script = ["ok", "boom"]\n', "script", 1, "must be a list of faults from 429"),
        ('[degrade]\n"greedy@1" = 2\n', "degrade", 1, "arm labels to numbers in 0..1"),
        ("sed = 3\n", "sed", 1, "unknown field (known: api_key"),
        ('api_key = ["sk-secret-ABCD"]\n', "api_key", 1, "must be a non-empty string or null"),
    ],
)
def test_simulator_config_errors_name_file_line_and_field(tmp_path, text, field, line, words):
    from elo_per_token.simulator.config import load_config

    p = tmp_path / "sim.toml"
    p.write_text(text)
    with pytest.raises(InputError) as ei:
        load_config(p)
    assert (ei.value.file, ei.value.field, ei.value.line) == (str(p), field, line)
    assert words in ei.value.message and "sk-secret" not in str(ei.value)


def test_simulator_runtime_updates_are_checked_by_the_same_model():
    from elo_per_token.simulator.config import SimConfig, apply_updates

    cfg = apply_updates(SimConfig(), {"rate_500": 1, "degrade": {"a": 0}, "prompt_cache": "warm"})
    assert (cfg.rate_500, cfg.degrade, cfg.prompt_cache) == (1.0, {"a": 0.0}, "warm")
    assert isinstance(cfg.rate_500, float)
    for bad in ({"seed": True}, {"hang_s": float("inf")}, {"models": []}, {"context_length": 0}, {"x": 1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            apply_updates(cfg, bad)


def test_plan_and_profile_errors_state_the_rule_and_the_value():
    from elo_per_token.coordinator.plan import parse_plan

    with pytest.raises(InputError) as ei:
        parse_plan(PLAN_HEAD + "replicates = 10001\n" + PLAN_ARMS, file="p.toml")
    assert (ei.value.field, ei.value.line) == ("replicates", 3)
    assert ei.value.message == "must be an integer in 1..10,000, got 10001"
    with pytest.raises(InputError) as ei:
        parse_plan(PLAN_HEAD + PLAN_ARMS + "[budget]\nmax_cost = inf\n", file="p.toml")
    assert (ei.value.field, ei.value.line) == ("budget.max_cost", 7) and "got inf" in ei.value.message
    with pytest.raises(InputError) as ei:
        parse_plan(PLAN_HEAD + PLAN_ARMS + "[rate_limits.sim]\nrpm = 10\nrpx = 1\n", file="p.toml")
    assert (ei.value.field, ei.value.line) == (
        "rate_limits.sim.rpx",
        8,
    ) and "known: rpm, tpm" in ei.value.message
    plan = parse_plan(PLAN_HEAD + 'profile = " sim "\n' + PLAN_ARMS + "[budget]\nmax_tokens = 5\n")
    assert (plan.profile, plan.max_total_tokens, plan.max_cost) == ("sim", 5, None)


def test_profile_headers_and_prices_are_checked_and_header_values_never_shown(tmp_path):
    from elo_per_token.egress.profiles import load_profiles

    p = tmp_path / "profiles.toml"
    for extra, field in (('headers = {"X-Org" = ["sk-secret-ABCD"]}\n', "headers"), ("price_in_per_1m = inf\n",
                                                                                      "price_in_per_1m")):  # fmt: skip
        p.write_text(PROFILE_HEAD + extra)
        with pytest.raises(InputError) as ei:
            load_profiles(p)
        assert (ei.value.field, ei.value.line) == (f"profiles.p.{field}", 5) and "sk-secret" not in str(
            ei.value
        )


def test_loaders_keep_pydantic_off_the_tokens_path():
    """`ept --version` (and so `ept tokens`' start) imports no pydantic nor annotated_types: the models are
    built lazily, inside the loaders."""
    import subprocess
    import sys

    code = ("import sys, elo_per_token.ept.cli, elo_per_token.coordinator.adaptive.settings, "
            "elo_per_token.coordinator.plan; print(sorted(m for m in sys.modules if m.startswith(('pydantic', "
            "'annotated_types'))))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
