"""Plan parsing and validation: every bad field is named with its file and line; expansion is deterministic."""

from __future__ import annotations

import textwrap

import pytest

from elo_per_token.contracts.errors import InputError
from elo_per_token.coordinator.expand import expand, load_tasks
from elo_per_token.coordinator.plan import load_plan, parse_plan, plan_from_raw

GOOD = textwrap.dedent(
    """\
    name = "p1"
    profile = "simulator"
    suites = ["math", "extra.jsonl"]
    tasks_per_family = 2
    replicates = 2
    seed = 11
    executor = "celery"
    concurrency = 4

    [weights]
    math = 2.0
    code = 1

    [[arms]]
    strategy = "greedy"
    budgets = [1]

    [[arms]]
    strategy = "tree_search"
    budgets = [4, 8]
    params = { depth = 2 }

    [rate_limits.simulator]
    rpm = 600
    tpm = 100000
    """
)


def _tasks(n_per_family: dict[str, int]) -> list[dict]:
    return [
        {"task_id": f"{fam}-{i:03d}", "family": fam, "prompt": f"q {i}", "reference": str(i)}
        for fam, n in n_per_family.items()
        for i in range(n)
    ]


def test_good_plan_parses(tmp_path):
    p = tmp_path / "plan.toml"
    p.write_text(GOOD)
    plan = load_plan(p)
    assert plan.name == plan.run_id == "p1"
    assert plan.suites == ("math", str(tmp_path / "extra.jsonl"))
    assert [(a.strategy, a.budgets) for a in plan.arms] == [("greedy", (1,)), ("tree_search", (4, 8))]
    assert plan.arms[1].params == {"depth": 2}
    assert plan.weights == {"math": 2.0, "code": 1.0}
    assert plan.limits_for("simulator").rpm == 600 and plan.limits_for("simulator").tpm == 100000
    assert plan.limits_for("other").rpm is None
    assert (plan.executor, plan.concurrency, plan.replicates, plan.seed) == ("celery", 4, 2, 11)
    # The digest ignores where a plan runs, not what it runs.
    assert plan.with_overrides(executor="local").digest == plan.digest
    assert plan_from_raw(plan.raw, str(p)).digest == plan.digest
    assert parse_plan(GOOD.replace("seed = 11", "seed = 12")).digest != plan.digest


@pytest.mark.parametrize(
    ("edit", "field", "line"),
    [
        (("seed = 11", "seed = -1"), "seed", 6),
        (("seed = 11", 'seed = "x"'), "seed", 6),
        (('executor = "celery"', 'executor = "k8s"'), "executor", 7),
        (("budgets = [4, 8]", "budgets = [4, 0]"), "arms[1].budgets", 20),
        (("budgets = [4, 8]", "budgets = []"), "arms[1].budgets", 20),
        (("budgets = [4, 8]", "budgets = [4, 4]"), "arms[1].budgets", 20),
        (("math = 2.0", "math = -2.0"), "weights.math", 11),
        (("tpm = 100000", "tpm = 0"), "rate_limits.simulator.tpm", 25),
        (('name = "p1"', 'name = "a b/c"'), "name", 1),
        (("concurrency = 4", "concurency = 4"), "concurency", 8),
        (("replicates = 2", "replicates = 0"), "replicates", 5),
    ],
)
def test_bad_fields_are_named(tmp_path, edit, field, line):
    p = tmp_path / "bad.toml"
    p.write_text(GOOD.replace(*edit))
    with pytest.raises(InputError) as ei:
        load_plan(p)
    e = ei.value
    assert (e.file, e.field, e.line) == (str(p), field, line)
    assert str(p) in str(e) and field in str(e)


def test_missing_and_broken(tmp_path):
    with pytest.raises(InputError) as ei:
        parse_plan('name = "x"\n[[arms]]\nstrategy = "greedy"\nbudgets = [1]\n', file="f.toml")
    assert ei.value.field == "suites"
    with pytest.raises(InputError) as ei:
        parse_plan('name = "x"\nsuites = ["math"]\n', file="f.toml")
    assert ei.value.field == "arms"
    with pytest.raises(InputError) as ei:
        parse_plan('name = "x"\nsuites = [\n', file="f.toml")
    assert ei.value.file == "f.toml" and "TOML" in str(ei.value)
    with pytest.raises(InputError) as ei:
        load_plan(tmp_path / "nope.toml")
    assert "not found" in str(ei.value)


def test_expand_is_deterministic_and_complete():
    plan = parse_plan(GOOD)
    tasks = load_tasks(plan, loader=lambda ref: _tasks({"math": 3, "code": 5}) if ref == "math" else [])
    assert [t["task_id"] for t in tasks] == ["math-000", "math-001", "code-000", "code-001"]
    jobs = expand(plan, tasks)
    # 4 tasks x (1 + 2 budgets) x 2 replicates
    assert len(jobs) == 4 * 3 * 2
    assert len({j.key for j in jobs}) == len(jobs)
    again = expand(parse_plan(GOOD), tasks)
    assert [j.to_json() for j in jobs] == [j.to_json() for j in again]
    j = jobs[-1]
    assert (j.run_id, j.profile, j.seed, j.strategy, j.budget_n, j.replicate) == (
        "p1",
        "simulator",
        11,
        "tree_search",
        8,
        1,
    )
    assert j.key == "code/code-001/tree_search_n8_depth-2/r1"
    # Per-call seeds differ by job and call index but not by run.
    assert j.call_seed(0) != j.call_seed(1) != jobs[0].call_seed(1)


def test_jobs_stream_lazily_in_plan_order():
    """The coordinator streams a plan's jobs (a million-job plan is never a million objects at once): the
    stream is a generator, equals the expanded list and its count is known without expanding."""
    import types

    from elo_per_token.coordinator.expand import count_jobs, iter_jobs

    plan = parse_plan(GOOD)
    tasks = _tasks({"math": 3, "code": 3})
    stream = iter_jobs(plan, tasks)
    assert isinstance(stream, types.GeneratorType)
    assert [j.to_json() for j in stream] == [j.to_json() for j in expand(plan, tasks)]
    assert count_jobs(plan, tasks) == len(expand(plan, tasks))


def test_duplicate_tasks_are_rejected():
    plan = parse_plan(GOOD)
    with pytest.raises(InputError) as ei:
        expand(plan, _tasks({"math": 1}) * 2)
    assert ei.value.field == "suites" and "math/math-000" in str(ei.value)


def test_shipped_plans_parse():
    from pathlib import Path

    from elo_per_token.coordinator.demo import demo_plan_text

    demo = parse_plan(demo_plan_text())
    assert demo.executor == "local" and demo.tasks_per_family
    examples = sorted((Path(__file__).resolve().parents[2] / "examples" / "plans").glob("*.toml"))
    assert examples, "examples/plans/*.toml are shipped"
    for p in examples:
        assert load_plan(p).arms


def test_strategy_names_budgets_and_params_are_checked():
    pytest.importorskip("elo_per_token.worker.strategies")
    base = 'name = "x"\nsuites = ["math"]\n[[arms]]\nstrategy = "{s}"\nbudgets = [{b}]\n{extra}'
    with pytest.raises(InputError) as ei:
        parse_plan(base.format(s="beam_me_up", b=1, extra=""), file="p.toml")
    assert (ei.value.field, ei.value.line) == ("arms[0].strategy", 4) and "majority" in str(ei.value)
    with pytest.raises(InputError) as ei:
        parse_plan(base.format(s="greedy", b=4, extra=""), file="p.toml")
    assert (ei.value.field, ei.value.line) == ("arms[0].budgets", 5)
    with pytest.raises(InputError) as ei:
        parse_plan(base.format(s="tree_search", b=2, extra="params = { depht = 2 }\n"), file="p.toml")
    assert (ei.value.field, ei.value.line) == ("arms[0].params", 6) and "depht" in str(ei.value)
    assert parse_plan(base.format(s="tree_search", b=2, extra="params = { depth = 2 }\n")).arms[0].params == {
        "depth": 2
    }
