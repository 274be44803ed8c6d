"""Hostile task files, plans, providers and names (issue 11, items 5-10): each attack is reproduced through the
real entry points (the `ept` CLI in a subprocess, the simulator over HTTP, real S3) and must end in a clean
result or a clean exit-2 error — never a write outside the run, a traceback, or a wrong token count."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_ept, run_ept_process
from fixtures_sim import SIM_KEY

from elo_per_token.contracts.jobs import Job
from elo_per_token.ledger import open_ledger

REPO = Path(__file__).resolve().parents[2]


# The CLI in this process (testkit/cli_runner.py), at a terminal width wide enough for its tables.
_ept = functools.partial(run_ept, columns=200)
# A child process where the test bounds the command's time (hostile input must not hang it).
_ept_process = functools.partial(run_ept_process, columns=200)


def _math_task(task_id: str, family: str) -> dict:
    return {"task_id": task_id, "family": family, "prompt": "What is 2 + 3?", "reference": 5,
            "grader": {"type": "numeric"}}  # fmt: skip


def _profiles(tmp_path: Path, url: str, name: str = "simx") -> Path:
    p = tmp_path / "profiles.toml"
    p.write_text(f'[profiles.{name}]\nprotocol = "openai"\nbase_url = "{url}"\napi_key_env = "EPT_SIMX_KEY"\n'
                 'model = "ept-sim-1"\n')  # fmt: skip
    return p


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


# ---- item 5: ledger keys -------------------------------------------------------------------------------------


def test_safe_components_keep_todays_keys_and_unsafe_ones_are_encoded():
    from elo_per_token.contracts.keys import MAX_COMPONENT_BYTES, check_key, is_safe_component, key_component

    # Every key the built-in suites produce today is kept as is (existing ledgers stay readable).
    for s in ("math", "code-001", "tool_use", "q.1", "naïve", "my family"):
        assert key_component(s) == s
    hostile = [
        "..",
        ".",
        "/tmp/x",
        "../../../../x",
        "a/b",
        "a\\b",
        "x\x00y",
        ".tmp-1",
        " pad",
        "t" * 300,
        "é" * 60,
    ]
    out = [key_component(s) for s in hostile]
    assert len(set(out)) == len(out)  # the hash keeps distinct inputs distinct
    for s, k in zip(hostile, out, strict=True):
        assert is_safe_component(k), (s, k)
        assert len(k.encode()) <= MAX_COMPONENT_BYTES and "/" not in k and not k.startswith(".")
        assert key_component(s) == k  # deterministic
    j = Job("r", {"task_id": "..", "family": "../../../../x"}, "greedy", 1)
    assert check_key(j.key) == j.key and ".." not in j.key.split("/")
    with pytest.raises(Exception, match="unsafe ledger key"):
        open_ledger("/nonexistent-ledger").put_job("r", "../../x/t/greedy_n1/r0", b"{}")


def test_every_builtin_suite_key_is_unchanged():
    """Existing ledgers stay readable: the keys of the built-in suites are what the old formula gave."""
    from elo_per_token.suites.load import builtin_suite_names, load_builtin_suite

    def old_key(j: Job) -> str:  # the key formula before contracts/keys.py
        arm = j.arm.replace("@", "_n").replace("[", "_").replace("]", "").replace(",", "_").replace("=", "-")
        safe_task = "".join(c if c.isalnum() or c in "-_." else "_" for c in j.task_id)
        return f"{j.family}/{safe_task}/{arm}/r{j.replicate}"

    tasks = [t for name in builtin_suite_names() for t in load_builtin_suite(name)]
    assert len(tasks) >= 100
    for t in tasks:
        for strategy, params in (("greedy", {}), ("majority", {}), ("tree_search", {"depth": 2, "beam": 2})):
            j = Job("r", t, strategy, 4, 1, params)
            assert j.key == old_key(j)


def _hostile_suite(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside-abs"
    tasks = [
        _math_task("t-abs", str(outside)),  # an absolute family
        _math_task("t-up", "../../../../x"),  # climbs out of runs/<run>/jobs/ into the ledger's parent
        _math_task("..", "math"),  # a task id the old sanitiser let through
        _math_task("L" * 300, "math"),  # ENAMETOOLONG on main, after other jobs were written
        _math_task("ok-1", "math"),
    ]
    suite = tmp_path / "hostile.jsonl"
    suite.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return suite, outside


def test_hostile_suite_cannot_write_outside_the_run_prefix(tmp_path, make_sim):
    sim = make_sim(api_key=SIM_KEY)
    suite, outside = _hostile_suite(tmp_path)
    ledger = tmp_path / "in" / "ledger"
    plan = tmp_path / "plan.toml"
    plan.write_text(f'name = "h"\nprofile = "simx"\nsuites = ["{suite}"]\nledger = "{ledger}"\nbootstrap_rounds = 0\n'
                    '[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n')  # fmt: skip
    env = {"EPT_PROFILES": str(_profiles(tmp_path, sim.url)), "EPT_SIMX_KEY": SIM_KEY}
    before = _files_under(tmp_path)
    r = _ept("sweep", str(plan), "--no-analysis", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    new = _files_under(tmp_path) - before
    run_dir = ledger / "runs" / "h"
    assert new and all(run_dir in p.parents for p in new), [str(p) for p in new if run_dir not in p.parents]
    assert not outside.exists() and not (tmp_path / "in" / "x").exists()
    from elo_per_token.contracts.keys import check_key

    # Every job landed and is visible to `ept status`: nothing lost, nothing half-written.
    led = open_ledger(ledger)
    keys = led.list_jobs("h")
    assert len(keys) == 5 and all(check_key(k) for k in keys)
    st = _ept("status", "h", "--ledger", str(ledger), "--json", env=env)
    assert st.returncode == 0 and json.loads(st.stdout)["done"] == 5 and json.loads(st.stdout)["pending"] == 0


def test_hostile_keys_stay_inside_the_s3_run_prefix(tmp_path, make_sim, s3_env, s3_bucket, monkeypatch):
    from fixtures_services import s3_client

    from elo_per_token.coordinator.plan import parse_plan
    from elo_per_token.coordinator.sweep import execute, plan_jobs

    sim = make_sim(api_key=SIM_KEY)
    monkeypatch.setenv("EPT_SIM_API_KEY", SIM_KEY)
    suite, _ = _hostile_suite(tmp_path)
    plan = parse_plan(f'name = "h"\nprofile = "sim-openai"\nsuites = ["{suite}"]\nledger = "s3://{s3_bucket}/p"\n'
                      'bootstrap_rounds = 0\n[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n')  # fmt: skip
    out = execute(plan, plan_jobs(plan), profile=sim.profile(), analyze=False)
    assert out.completed and out.tally.done == 5 and out.tally.failed == 0
    c = s3_client(s3_env.endpoint)
    keys = [o["Key"] for o in c.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert len([k for k in keys if k.startswith("p/runs/h/jobs/")]) == 5 and "p/runs/h/manifest.json" in keys
    assert all(k.startswith("p/runs/h/") and "/../" not in k and "//" not in k for k in keys), keys


# ---- item 6: provider usage is checked before it is stored ---------------------------------------------------


def _plan_file(tmp_path: Path, suite: Path | str, ledger: Path | str, *, name: str = "u", concurrency: int = 1,
               extra: str = "", arms: str = '[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n') -> Path:  # fmt: skip
    plan = tmp_path / f"{name}.toml"
    plan.write_text(f'name = "{name}"\nprofile = "simx"\nsuites = ["{suite}"]\nledger = "{ledger}"\n'
                    f'concurrency = {concurrency}\nbootstrap_rounds = 0\n{extra}{arms}')  # fmt: skip
    return plan


def test_hostile_usage_is_flagged_not_stored_and_discarded_responses_are_counted(tmp_path, make_sim):
    from elo_per_token.contracts.usage import check_usage

    assert check_usage({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})[1] is None
    for bad in (-1, float("nan"), 2.5, "7", True, 10**12, None):
        assert check_usage({"prompt_tokens": bad, "completion_tokens": 4})[1], bad

    # One job per fault, in order (concurrency 1): the last job gets two billed-but-discarded responses first.
    sim = make_sim(api_key=SIM_KEY, script=["usage_negative", "usage_nan", "usage_float", "usage_huge",
                                            "no_choices", "malformed_json", "ok"])  # fmt: skip
    suite = tmp_path / "s.jsonl"
    suite.write_text("".join(json.dumps(_math_task(f"t{i}", "math")) + "\n" for i in range(5)))
    ledger = tmp_path / "led"
    env = {"EPT_PROFILES": str(_profiles(tmp_path, sim.url)), "EPT_SIMX_KEY": SIM_KEY}
    r = _ept("sweep", str(_plan_file(tmp_path, suite, ledger)), "--no-analysis", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.replace("\n", " ")
    assert "5 run now" in out and " 0 failed" in out and not re.search(r"-\d[\d,]* tokens", out)

    led = open_ledger(ledger)
    calls = {k: [json.loads(x) for x in led.get_job("u", k).decode().splitlines() if '"kind": "call"' in x]
             for k in led.list_jobs("u")}  # fmt: skip
    assert len(calls) == 5
    # Every request the provider answered (and billed) is a call in the ledger, discarded ones included.
    assert sim.control.stats()["by_job"] == {k: len(v) for k, v in calls.items()}
    flat = [c for v in calls.values() for c in v]
    invalid = [c for c in flat if c["usage_invalid"]]
    assert len(invalid) == 4 and all(c["usage"] is None and c["usage_missing"] for c in invalid)
    reasons = " ".join(c["usage_invalid"] for c in invalid)
    assert "negative" in reasons and "absurd" in reasons and "not an integer" in reasons
    discarded = [c for c in flat if c["error"] and c["error"]["class"] == "discarded"]
    assert len(discarded) == 2 and all(
        "billed response discarded" in c["error"]["message"] for c in discarded
    )
    assert sum(c["attempts"] for c in flat) == sum(sim.control.stats()["by_job"].values())
    assert [c["usage"] is not None for c in discarded].count(
        True
    ) == 1  # no_choices carried usage; truncated JSON none
    for c in flat:  # nothing stored is negative, fractional or NaN
        for v in (c["usage"] or {}).values():
            assert isinstance(v, int | dict) and (not isinstance(v, int) or v >= 0)

    # The ledger stays readable: analysis counts the flagged calls as missing usage instead of failing.
    a = _ept("tokens", str(ledger / "runs" / "u" / "jobs"), "--json", "-", env=env)
    assert a.returncode == 0, a.stderr
    arm = json.loads(a.stdout[a.stdout.index("{") :])["arms"][0]
    assert arm["calls"] == len(flat) and arm["calls_missing_usage"] == 5  # 4 invalid + the truncated body
    assert arm["prompt_tokens"] >= 0


# ---- item 8: upper bounds ------------------------------------------------------------------------------------

_BOUNDS = [
    # (plan lines, line number of the culprit, field named)
    ("replicates = 10000000000\n", 4, "replicates"),
    ("seed = 100000000000000000000000\n", 4, "seed"),
    ("bootstrap_rounds = 1000000000\n", 4, "bootstrap_rounds"),
    ("[weights]\nmath = nan\n", 5, "weights.math"),
    ("[weights]\nmath = inf\n", 5, "weights.math"),
    ("[weights]\nmath = -inf\n", 5, "weights.math"),
]


@pytest.mark.parametrize("extra,line,field", _BOUNDS, ids=[b[2] + "-" + b[0].split()[-1] for b in _BOUNDS])
def test_plan_upper_bounds_exit_2_with_file_line_field(tmp_path, extra, line, field):
    plan = tmp_path / "p.toml"
    head = 'name = "b"\nsuites = ["math"]\nledger = "led"\n'
    arms = '\n[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n'
    # Tables must come after top-level keys; arms go last either way.
    plan.write_text(head + extra + arms)
    r = _ept_process("sweep", str(plan), cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{plan}:{line}" in r.stderr and f"'{field}'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "led").exists()


def test_huge_budget_and_strategy_params_are_refused_before_anything_runs(tmp_path):
    plan = tmp_path / "p.toml"
    plan.write_text('name = "b"\nsuites = ["math"]\nledger = "led"\n\n[[arms]]\nstrategy = "majority"\n'
                    'budgets = [4, 1000000000]\n\n[[arms]]\nstrategy = "tree_search"\nbudgets = [2]\n')  # fmt: skip
    r = _ept_process("sweep", str(plan), cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and f"{plan}:7" in r.stderr and "arms[0].budgets" in r.stderr, r.stderr
    plan.write_text('name = "b"\nsuites = ["math"]\nledger = "led"\n\n[[arms]]\nstrategy = "tree_search"\n'
                    'budgets = [2]\nparams = { depth = 1000000000 }\n')  # fmt: skip
    r = _ept_process("sweep", str(plan), cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and f"{plan}:8" in r.stderr and "arms[0].params" in r.stderr, r.stderr
    assert not (tmp_path / "led").exists()


def test_jobs_per_plan_are_bounded_from_counts_with_an_override(tmp_path):
    from elo_per_token.coordinator.expand import expand
    from elo_per_token.coordinator.plan import check_job_count, parse_plan

    plan = tmp_path / "p.toml"
    plan.write_text('name = "b"\nsuites = ["math"]\nledger = "led"\nreplicates = 50\n\n[[arms]]\n'
                    'strategy = "majority"\nbudgets = [2, 4]\n')  # fmt: skip
    r = _ept_process("sweep", str(plan), "--max-jobs", "10", cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "'max_jobs'" in r.stderr and "over the limit of 10" in r.stderr, r.stderr
    assert "--max-jobs" in r.stderr and not (tmp_path / "led").exists()
    # 10^4 replicates x 10^4 tasks x 2 budgets = 2x10^8 jobs: refused from the counts, nothing built.
    p = parse_plan(plan.read_text().replace("replicates = 50", "replicates = 10000"), file=str(plan))
    tasks = [{"task_id": f"t{i}", "family": "f"} for i in range(10_000)]
    with pytest.raises(Exception, match="200,000,000 jobs"):
        expand(p, tasks)
    assert check_job_count(p.with_overrides(max_jobs=200_000_000), 10_000) == 200_000_000


# ---- item 9: a password inside base_url ------------------------------------------------------------------------

PW = "s3cretPassw0rd-9f8e7d"


def test_password_in_base_url_is_masked_everywhere(tmp_path, make_sim):
    from elo_per_token.contracts.secrets import mask_url, scrub

    assert mask_url(f"http://user:{PW}@h/v1") == "http://user:…7d@h/v1".replace("…7d", "…" + PW[-4:])
    assert PW not in scrub(f"cannot connect to https://u:{PW}@x.example/v1: refused", [])
    assert mask_url("http://host/a@b") == "http://host/a@b"  # '@' in a path is not userinfo
    from elo_per_token.egress.profiles import Profile

    assert PW not in repr(Profile("p", "openai", f"http://u:{PW}@h/v1", "K", "m"))  # reprs end up in logs

    sim = make_sim(strict_models=True)  # no key check: httpx turns the URL's userinfo into Basic auth
    url = sim.url.replace("http://", f"http://user:{PW}@")
    prof = tmp_path / "profiles.toml"
    prof.write_text(f'[profiles.simx]\nprotocol = "openai"\nbase_url = "{url}"\napi_key_env = "EPT_SIMX_KEY"\n'
                    'model = "ept-sim-1"\n\n[profiles.wrongmodel]\nprotocol = "openai"\n'
                    f'base_url = "{url}"\napi_key_env = "EPT_SIMX_KEY"\nmodel = "no-such-model"\n')  # fmt: skip
    bad_prof = tmp_path / "bad-profiles.toml"
    bad_prof.write_text(f'[profiles.badscheme]\nprotocol = "openai"\nbase_url = "ftp://user:{PW}@h/v1"\n'
                        'api_key_env = "EPT_SIMX_KEY"\nmodel = "m"\n')  # fmt: skip
    env = {"EPT_PROFILES": str(prof), "EPT_SIMX_KEY": SIM_KEY}
    seen: list[str] = []

    def run(*args: str, rc: int | None = None) -> subprocess.CompletedProcess:
        r = _ept(*args, env=env, cwd=tmp_path)
        seen.append(r.stdout + r.stderr)
        if rc is not None:
            assert r.returncode == rc, r.stdout + r.stderr
        return r

    assert "user:…" in run("profiles", "list", rc=0).stdout
    run("doctor", "--profile", "simx")
    run("doctor", "--profile", "wrongmodel")
    bad = run(
        "doctor", "--profile", "badscheme", "--profiles", str(bad_prof), rc=2
    ).stderr  # an error with the URL
    assert "base_url" in bad and "ftp://user:…" in bad
    suite = tmp_path / "s.jsonl"
    suite.write_text("".join(json.dumps(_math_task(f"t{i}", "math")) + "\n" for i in range(2)))
    ok_plan = _plan_file(tmp_path, suite, tmp_path / "led", name="ok")
    run("sweep", str(ok_plan), "--no-analysis", rc=0)
    bad_plan = _plan_file(tmp_path, suite, tmp_path / "led", name="bad")
    bad_plan.write_text(bad_plan.read_text().replace('profile = "simx"', 'profile = "wrongmodel"'))
    assert "endpoint" in run("sweep", str(bad_plan), "--no-analysis", rc=1).stdout
    run("status", "ok", "--ledger", str(tmp_path / "led"), rc=0)
    assert "endpoint" in run("status", "bad", "--ledger", str(tmp_path / "led"), rc=0).stdout
    # Nothing printed and nothing in the ledger (manifests, job objects, failure records) holds the password.
    assert all(PW not in out for out in seen), next(o for o in seen if PW in o)
    stored = _files_under(tmp_path / "led")
    assert any(p.name == "manifest.json" for p in stored) and any("failures" in p.parts for p in stored)
    for p in stored:
        assert PW not in p.read_text(errors="replace"), p
    m = json.loads((tmp_path / "led" / "runs" / "ok" / "manifest.json").read_text())
    assert m["profile"]["base_url"].startswith("http://user:…")


# ---- item 10: tracebacks become exit-2 errors; names are text --------------------------------------------------


def _log_lines(arms: dict[str, int], n_tasks: int = 6) -> list[dict]:
    """A small valid call log: each arm (strategy -> budget) answers task i correctly when i < its quality."""
    lines = []
    for k, (strategy, budget) in enumerate(arms.items()):
        for i in range(n_tasks):
            ident = {"task_id": f"t{i}", "family": "f", "strategy": strategy, "budget_n": budget}
            lines.append(
                {**ident, "kind": "call", "usage": {"prompt_tokens": 10 * budget, "completion_tokens": 5}}
            )
            lines.append({**ident, "kind": "outcome", "score": float(i % (k + 2) == 0)})
    return lines


def _write_log(path: Path, lines: list, raw_extra: list[str] = ()) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + "".join(x + "\n" for x in raw_extra))
    return path


_BAD_LINES = [
    # (raw line appended after 24 good ones, field named or None)
    ("[" * 100_000 + "]" * 100_000, None),  # RecursionError on main
    (
        json.dumps({"kind": "call", "task_id": "t1", "strategy": "", "budget_n": 1}),
        "strategy",
    ),  # arm "@1" on main
    (json.dumps({"kind": "call", "task_id": 7, "strategy": "greedy", "budget_n": 1}), "task_id"),
    (json.dumps({"kind": "call", "task_id": "a\x00b", "strategy": "greedy", "budget_n": 1}), "task_id"),
    (
        '{"kind": "outcome", "task_id": "t1", "strategy": "greedy", "budget_n": 1, "score": NaN}',
        "score",
    ),  # TapeError
]


@pytest.mark.parametrize(
    "raw,field", _BAD_LINES, ids=["deep", "empty-strategy", "int-task-id", "nul-task-id", "nan-score"]
)
def test_bad_log_lines_exit_2_naming_line_and_field(tmp_path, raw, field):
    log = _write_log(tmp_path / "log.jsonl", _log_lines({"greedy": 1, "majority": 4}), [raw])
    r = _ept_process("analyze", str(log), "--rounds", "0", "--no-plots", timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr[-2000:]
    assert "Traceback" not in r.stderr and f"{log}:25" in r.stderr.replace("\n", ""), r.stderr
    if field:
        assert f"'{field}'" in r.stderr
    assert "TapeError" not in r.stderr


def test_numeric_looking_string_ids_are_still_accepted(tmp_path):
    lines = _log_lines({"greedy": 1, "majority": 4})
    for x in lines:
        x["task_id"] = x["task_id"][1:]  # "0", "1", … : strings that look like numbers
    r = _ept("analyze", str(_write_log(tmp_path / "log.jsonl", lines)), "--rounds", "0", "--no-plots")
    assert r.returncode == 0, r.stderr
    assert "6 tasks" in r.stdout.replace("\n", " ")


def test_hostile_suite_and_plan_files_exit_2(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"task_id": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    nul = _write_log(tmp_path / "nul.jsonl", [_math_task("ok", "math"), _math_task("a\x00b", "math")])
    for suite, line in ((deep, 1), (nul, 2)):
        r = _ept("suites", "validate", str(suite))
        assert r.returncode == 2 and f"{suite}:{line}" in r.stderr and "Traceback" not in r.stderr, r.stderr
    plan = tmp_path / "deep.toml"
    plan.write_text("name = " + "[" * 100_000 + "]" * 100_000 + "\n")
    r = _ept("sweep", str(plan))
    assert r.returncode == 2 and str(plan) in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_unreachable_broker_is_an_exit_2_error_with_the_url_masked(tmp_path):
    from fixtures_services import free_port

    plan = tmp_path / "p.toml"
    plan.write_text(f'name = "c"\nsuites = ["math"]\ntasks_per_family = 1\nledger = "{tmp_path / "led"}"\n'
                    'executor = "celery"\n[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n')  # fmt: skip
    url = f"redis://:brokerPassw0rd-123@127.0.0.1:{free_port()}/0"
    r = _ept_process("sweep", str(plan), env={"EPT_BROKER_URL": url, "EPT_RESULT_BACKEND": url}, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr[-2000:]
    err = r.stderr.replace("\n", " ")
    assert "Traceback" not in err and "EPT_BROKER_URL" in err and "cannot use the broker" in err
    assert "brokerPassw0rd-123" not in r.stdout + r.stderr


def test_wrong_s3_credentials_are_an_exit_2_error(tmp_path, s3_server, s3_bucket):
    plan = tmp_path / "p.toml"
    plan.write_text(f'name = "s"\nsuites = ["math"]\ntasks_per_family = 1\nledger = "s3://{s3_bucket}/x"\n'
                    '[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n')  # fmt: skip
    # A provider key is set: a missing one is refused before the ledger is touched (issue 27).
    env = {**s3_server.env(), "AWS_SECRET_ACCESS_KEY": "wrong-secret-0000000000000000", "EPT_S3_PATIENCE_S": "1",
           "OPENAI_API_KEY": "sk-unused-0000000000000000"}  # fmt: skip
    r = _ept_process("sweep", str(plan), env=env, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "AWS_SECRET_ACCESS_KEY" in r.stderr.replace("\n", " ")
    assert "wrong-secret-0000000000000000" not in r.stdout + r.stderr


def test_sweep_stopped_for_credentials_exits_3_not_130(tmp_path, make_sim):
    sim = make_sim(api_key=SIM_KEY)
    suite = tmp_path / "s.jsonl"
    suite.write_text("".join(json.dumps(_math_task(f"t{i}", "math")) + "\n" for i in range(30)))
    plan = _plan_file(tmp_path, suite, tmp_path / "led", name="cred")
    env = {
        "EPT_PROFILES": str(_profiles(tmp_path, sim.url)),
        "EPT_SIMX_KEY": "sk-wrong-000000000000000000000",
    }
    r = _ept("sweep", str(plan), env=env)
    assert r.returncode == 3, r.stdout + r.stderr
    assert (
        "credential/endpoint failures in a row" in r.stdout.replace("\n", " ")
        and "ept retry cred" in r.stdout
    )


def test_report_md_escapes_html_and_markdown_from_arm_names(tmp_path):
    evil = {"<img src=x onerror=alert(1)>": 1, "[x](http://evil.example)": 2, "[/]": 3, "greedy": 1}
    log = _write_log(tmp_path / "log.jsonl", _log_lines(evil))
    out = tmp_path / "rep"
    r = _ept(
        "analyze",
        str(log),
        "--rounds",
        "0",
        "--no-plots",
        "--out",
        str(out),
        "--html",
        str(tmp_path / "r.html"),
    )
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]  # "[/]" is an arm name, not rich markup
    md = (out / "report.md").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;@1" in md and "<img" not in md
    assert not re.search(r"(?<!\\)\]\(http", md) and "\\[x\\](http://evil.example)@2" in md  # no live link
    html = (tmp_path / "r.html").read_text()
    assert "&lt;img src=x" in html and "<img src=x" not in html


# ---- item 7: stops that stop --------------------------------------------------------------------------------


def _sweep_proc(tmp_path: Path, sim, *, n_tasks: int, concurrency: int, env: dict | None = None,
                timeout_s: float = 120.0) -> tuple[subprocess.Popen, Path]:  # fmt: skip
    tmp_path.mkdir(parents=True, exist_ok=True)
    suite = tmp_path / "s.jsonl"
    suite.write_text("".join(json.dumps(_math_task(f"t{i}", "math")) + "\n" for i in range(n_tasks)))
    ledger = tmp_path / "led"
    plan = _plan_file(tmp_path, suite, ledger, name="stop", concurrency=concurrency)
    prof = tmp_path / "profiles.toml"
    prof.write_text(f'[profiles.simx]\nprotocol = "openai"\nbase_url = "{sim.url}"\napi_key_env = "EPT_SIMX_KEY"\n'
                    f'model = "ept-sim-1"\ntimeout = {timeout_s}\n')  # fmt: skip
    full = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", "EPT_PROFILES": str(prof),
            "EPT_SIMX_KEY": SIM_KEY, **(env or {})}  # fmt: skip
    p = subprocess.Popen([sys.executable, "-m", "elo_per_token", "sweep", str(plan), "--no-analysis"], env=full,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    return p, ledger


def _wait_for(pred, timeout: float = 60.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.05)


def _stop_and_time(p: subprocess.Popen, *signals: tuple[float, int]) -> tuple[int, str, float]:
    """Send (delay, signal) pairs; return (exit code, output, seconds from the first signal to exit)."""
    import time

    t0 = None
    for delay, sig in signals:
        time.sleep(delay)
        t0 = t0 or time.monotonic()
        p.send_signal(sig)
    out = p.communicate(timeout=120)[0]
    return p.returncode, out, time.monotonic() - t0


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
def test_sigterm_stops_submitting_cancels_queued_jobs_and_finishes_in_flight(tmp_path, make_sim):
    import signal

    sim = make_sim(api_key=SIM_KEY, latency_ms=1500)
    p, ledger = _sweep_proc(tmp_path, sim, n_tasks=40, concurrency=2)
    _wait_for(lambda: sim.control.stats()["completion_requests"] >= 3)  # jobs 1-2 done, 3-4 in flight
    rc, out, took = _stop_and_time(p, (0.2, signal.SIGTERM))
    sent_at_stop_upper = sim.control.stats()["completion_requests"]
    assert rc == 130, out
    assert "stopping: " in out and "Traceback" not in out
    # No queued job started after the signal: at most the `concurrency` requests in flight (plus one racing).
    led = open_ledger(ledger)
    landed = led.list_jobs("stop") | set(led.list_failures("stop"))
    assert sent_at_stop_upper <= 2 + 2 + 1 and len(landed) < 40
    # Nothing half-done: every job that reached the server is in the ledger (result or failure).
    assert set(sim.control.stats()["by_job"]) <= landed
    assert took < 10, took  # the in-flight requests take 1.5 s; no waiting on queued work


def test_sigterm_in_a_429_storm_stops_retrying_and_exits_promptly(tmp_path, make_sim):
    import signal

    sim = make_sim(api_key=SIM_KEY, rate_429=1.0, retry_after=8)
    p, ledger = _sweep_proc(tmp_path, sim, n_tasks=20, concurrency=2)
    _wait_for(lambda: sim.control.stats()["completion_requests"] >= 2)
    rc, out, took = _stop_and_time(p, (0.3, signal.SIGTERM))
    n = sim.control.stats()["completion_requests"]
    assert rc == 130, out
    # Before: requests kept going for minutes (Retry-After waits, 3 job attempts x 4 client attempts).
    assert took < 8, (took, out)
    assert n <= 4, n
    fails = open_ledger(ledger).list_failures("stop")
    assert fails and all(f["class"] == "rate_limit" for f in fails.values())  # recorded, for `ept retry`


@pytest.mark.slow  # heavy for the fast lane (issue 35: fast lane <= 6 min); runs in the slow lane
def test_grace_period_then_exit_and_second_ctrl_c_exits_at_once(tmp_path, make_sim):
    import signal

    sim = make_sim(api_key=SIM_KEY, rate_hang=1.0, hang_s=90)
    # A hung request and a 3 s grace period: the process leaves after the grace, not after the 60 s timeout.
    p, _ = _sweep_proc(
        tmp_path / "a", sim, n_tasks=4, concurrency=2, env={"EPT_STOP_GRACE_S": "3"}, timeout_s=60
    )
    _wait_for(lambda: sim.control.stats()["completion_requests"] >= 2)
    rc, out, took = _stop_and_time(p, (0.2, signal.SIGINT))
    assert rc == 130 and "up to 3s" in out and "grace period ended" in out, out
    assert 2.5 < took < 15, took
    # A second Ctrl-C does not wait for the (60 s) grace period.
    p, _ = _sweep_proc(
        tmp_path / "b", sim, n_tasks=4, concurrency=2, env={"EPT_STOP_GRACE_S": "60"}, timeout_s=60
    )
    _wait_for(lambda: sim.control.stats()["completion_requests"] >= 4)
    rc, out, took = _stop_and_time(p, (0.2, signal.SIGINT), (0.5, signal.SIGINT))
    assert rc == 130 and "second interrupt" in out, out
    assert took < 10, took


@pytest.mark.services
def test_sigterm_on_a_celery_sweep_cancels_its_queued_jobs(tmp_path, make_sim, redis_server):
    """SIGTERM (Ctrl-C takes the same path once the handler turns SIGTERM into KeyboardInterrupt)."""
    import signal
    import time

    from fixtures_services import start_celery_workers

    sim = make_sim(api_key=SIM_KEY, latency_ms=1000)
    suite = tmp_path / "s.jsonl"
    suite.write_text("".join(json.dumps(_math_task(f"t{i}", "math")) + "\n" for i in range(12)))
    ledger = tmp_path / "led"
    queue = "stopq"
    plan = _plan_file(
        tmp_path, suite, ledger, name="cstop", extra=f'executor = "celery"\nqueue = "{queue}"\n'
    )
    env = {"EPT_PROFILES": str(_profiles(tmp_path, sim.url)), "EPT_SIMX_KEY": SIM_KEY}
    ws = start_celery_workers(1, redis_server.url, tmp_path / "w", env=env, concurrency=1, queue=queue)
    try:
        full = {**os.environ, "PYTHONPATH": str(REPO), "EPT_BROKER_URL": redis_server.url, **env}
        p = subprocess.Popen([sys.executable, "-m", "elo_per_token", "sweep", str(plan), "--no-analysis"], env=full,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        led = open_ledger(ledger)
        _wait_for(lambda: len(led.list_jobs("cstop")) >= 2, 90)
        p.send_signal(signal.SIGTERM)
        out = p.communicate(timeout=60)[0]
        assert p.returncode == 130, out
        at_stop = sim.control.stats()["completion_requests"]
        time.sleep(4)  # the worker would have run ~4 more queued jobs by now
        # Only the job running at the signal (if any) finishes; the queued ones are skipped, never called.
        assert sim.control.stats()["completion_requests"] <= at_stop + 1
        assert len(led.list_jobs("cstop")) <= at_stop + 1 < 12
        # The next session lifts the cancel and runs the rest.
        r = _ept("sweep", str(plan), "--no-analysis", env={**env, "EPT_BROKER_URL": redis_server.url})
        assert r.returncode == 0, r.stdout + r.stderr
        assert len(led.list_jobs("cstop")) == 12
    finally:
        ws.stop()
