"""The grader registry. The toy grader of docs/suites.md ("Adding a grader") is added exactly as documented —
the doc's module, the doc's registry line — then a suite using it is validated and real jobs are graded with
it against the simulator over HTTP. Also: the set of grader types is derived from the registry, and no
strategy branches on the grader's type."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from fixtures_sim import SIM_KEY

from elo_per_token.contracts import graders as schemas
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.jobs import Job
from elo_per_token.egress.client import ProviderClient
from elo_per_token.simulator.brain import TaskBrain
from elo_per_token.suites.load import load_suite
from elo_per_token.worker import graders
from elo_per_token.worker.graders.registry import GRADERS, register_module, unregister
from elo_per_token.worker.job import run_job

ROOT = Path(__file__).resolve().parents[2]


def doc_example() -> tuple[str, str]:
    """The module and the registry line shown in docs/suites.md, "Adding a grader"."""
    section = (ROOT / "docs" / "suites.md").read_text(encoding="utf-8").split("## Adding a grader", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    module = next(b for b in blocks if b.startswith("# worker/graders/casefold.py"))
    line = next(b for b in blocks if b.startswith("_MODULES"))
    return module, line


@pytest.fixture
def casefold(tmp_path: Path) -> ModuleType:
    source, registry_line = doc_example()
    path = tmp_path / "casefold.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("casefold", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # The doc's registry line is today's _MODULES plus the new module; registering it is what importing
    # worker/graders/__init__.py with that line does.
    modules = eval(registry_line.split("=", 1)[1], {**vars(graders), "casefold": mod})
    assert modules == (*graders._MODULES, mod)
    for m in modules:
        register_module(m)
    yield mod
    unregister("casefold")


def task(i: int, reference: object, distractors: list[str], **kw: object) -> dict:
    return {
        "task_id": f"cf-{i}",
        "family": "trivia",
        "prompt": f"Question {i}: which city? End with 'Answer: <city>'.",
        "reference": reference,
        "grader": {"type": "casefold", **kw},
        "difficulty": 1.0,
        "distractors": distractors,
    }


def write(tmp_path: Path, tasks: list[dict]) -> Path:
    p = tmp_path / "suite.jsonl"
    p.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    return p


def client(sim) -> ProviderClient:
    return ProviderClient(sim.profile(supports_n=False), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)


def test_grader_types_are_the_registry(casefold):
    assert set(GRADERS) == set(schemas.grader_types())
    assert all(schemas.get_schema(name) == g.schema for name, g in GRADERS.items())
    # The built-in order (error messages list it) is kept; an added grader comes last.
    assert (
        schemas.grader_types()[:3] == ("exact", "normalised", "numeric")
        and schemas.grader_types()[-1] == "casefold"
    )


def test_a_suite_names_the_grader_only_once_it_is_registered(tmp_path):
    path = write(tmp_path, [task(0, "Paris", ["PARIS"])])
    with pytest.raises(InputError) as e:
        load_suite(path)
    assert (e.value.line, e.value.field) == (1, "grader") and "casefold" not in e.value.message
    assert "numeric" in e.value.message  # the message lists the registered types


def test_the_option_check_runs_at_load_with_file_line_field(tmp_path, casefold):
    assert [
        t["task_id"] for t in load_suite(write(tmp_path, [task(0, "Paris", []), task(1, "Lyon", [])]))
    ] == ["cf-0", "cf-1"]
    with pytest.raises(InputError) as e:
        load_suite(write(tmp_path, [task(0, "Paris", []), task(1, 75, [])]))
    assert (e.value.file, e.value.line, e.value.field) == (str(tmp_path / "suite.jsonl"), 2, "reference")
    assert "casefold grader needs a text reference" in str(e.value)
    with pytest.raises(InputError) as e:
        load_suite(write(tmp_path, [task(0, "Paris", [], ignore_case=False)]))
    assert (e.value.line, e.value.field) == (1, "grader") and "ignore_case" in e.value.message


def test_jobs_are_graded_by_the_toy_grader(make_sim, tmp_path, casefold):
    # difficulty 1.0: the simulator mostly answers with a distractor. 'PARIS' is right for casefold (not for
    # exact); 'Marseille' is wrong for both.
    suite = load_suite(
        write(
            tmp_path,
            [
                *(task(i, "Paris", ["PARIS"]) for i in range(6)),
                *(task(i, "Lyon", ["Marseille"]) for i in range(6, 9)),
            ],
        )
    )
    p = client(make_sim(brain=TaskBrain(suite)))  # the simulator answers these tasks (by their prompts)
    results = [run_job(Job("r", t, "greedy", 1), p) for t in suite]
    answers = [r.outcome.answer for r in results]
    assert all(r.ok and r.outcome.grader["grader"] == "casefold" for r in results)
    for t, r in zip(suite, results, strict=True):
        ok = r.outcome.answer.casefold() == t["reference"].casefold()
        assert (r.outcome.score, r.outcome.correct) == (float(ok), ok)
    assert "PARIS" in answers[:6] and all(a in ("Paris", "PARIS") for a in answers[:6])
    assert all(r.outcome.correct for r in results[:6])  # every case variant of the reference is right
    assert "Marseille" in answers[6:] and not all(r.outcome.correct for r in results[6:])
    # The same replies under the built-in exact grader: only the exact spelling counts.
    exact = [run_job(Job("r", {**t, "grader": {"type": "exact"}}, "greedy", 1), p) for t in suite[:6]]
    assert [r.outcome.answer for r in exact] == answers[:6]
    assert [r.outcome.correct for r in exact] == [a == "Paris" for a in answers[:6]]


def test_majority_votes_with_the_graders_vote_key(make_sim, tmp_path, casefold):
    # 'PARIS.' keeps its full stop under casefold's vote key (the default key, basic.normalise, drops it).
    (t,) = load_suite(write(tmp_path, [task(0, "Paris", ["PARIS."])]))
    sim = make_sim(brain=TaskBrain([t]))
    res = run_job(Job("r", t, "majority", 5, seed=3), client(sim))
    votes = res.outcome.grader["strategy"]["votes"]
    assert set(votes) <= {"paris", "paris."} and "paris." in votes and sum(votes.values()) == 5
    assert sim.control.stats()["by_job"][res.job.key] == 5
    winner = max(votes, key=lambda k: votes[k])
    assert res.outcome.answer.casefold() == winner and res.outcome.correct is (winner == "paris")


def test_strategies_do_not_branch_on_the_grader_type():
    # What a strategy needs to know about a grader is in its registry entry (vote_key, run_tests, extract).
    for path in (ROOT / "worker" / "strategies").glob("*.py"):
        assert '["grader"]' not in path.read_text(encoding="utf-8"), path.name


def test_suite_validation_needs_no_worker_import():
    # contracts/ must not import worker/: every built-in suite validates from the schema half alone.
    code = (
        "import sys\nfrom elo_per_token.suites.load import load_builtin_suite\n"
        "n = sum(len(load_builtin_suite(s)) for s in ('math', 'code', 'tool_use'))\n"
        "print(n, sorted({m for m in sys.modules if m.startswith('elo_per_token.worker')}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    n, loaded = out.stdout.split(" ", 1)
    assert int(n) > 300 and loaded.strip() == "[]", out.stdout
