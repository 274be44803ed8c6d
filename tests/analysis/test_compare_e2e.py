"""`ept compare` end to end: the real command on ledger runs (exit codes, markdown, nothing half-written),
the CI example's files, and the acceptance check on real simulator sweeps with the simulator's `degrade`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_ept
from fixtures_plans import write_plan_file
from test_compare import write_ledger_run  # tests/ is on sys.path (rootdir conftest)

REPO = Path(__file__).resolve().parents[2]


ept = run_ept  # the CLI in this process (testkit/cli_runner.py)


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ledger")
    write_ledger_run(root, "base", 101, n_tasks=60)
    write_ledger_run(root, "same", 102, n_tasks=60)
    write_ledger_run(root, "worse", 103, n_tasks=60, degrade={"best_of_n@8": 1.5})
    write_ledger_run(
        root,
        "other-suites",
        104,
        n_tasks=10,
        manifest={"run_id": "other-suites", "plan": {"suites": ["math", "tool_use"]}},
    )
    return root


def test_cli_flags_the_degraded_arm_and_writes_markdown(ledger: Path, tmp_path: Path) -> None:
    md, js = tmp_path / "pr.md", tmp_path / "c.json"
    r = ept(
        "compare",
        str(ledger / "runs/base"),
        str(ledger / "runs/worse"),
        "--markdown",
        str(md),
        "--json",
        str(js),
        "--rounds",
        "400",
        cwd=tmp_path,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    data = json.loads(js.read_text())
    assert data["flagged"] == ["best_of_n@8"] and data["verdict"] == "regression"
    text = md.read_text()
    assert text.startswith("### ❌") and "`best_of_n@8`" in text and "| `greedy@1` |" in text
    assert "REGRESSION" in r.stdout and "best_of_n@8" in r.stdout


def test_cli_passes_an_unchanged_run(ledger: Path, tmp_path: Path) -> None:
    md = tmp_path / "pr.md"
    r = ept(
        "compare",
        str(ledger / "runs/base"),
        str(ledger / "runs/same"),
        "--markdown",
        str(md),
        "--rounds",
        "400",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert md.read_text().startswith("### ✅")


@pytest.mark.parametrize(
    ("current", "args", "needle"),
    [
        ("other-suites", [], "different suites"),
        ("same", ["--fail-on", "elo-drop=twenty"], "--fail-on"),
        ("same", ["--adjust", "holm"], "--adjust"),
    ],
)
def test_cli_not_comparable_or_bad_flags_exit_2_and_write_nothing(
    ledger: Path, tmp_path: Path, current: str, args: list[str], needle: str
) -> None:
    md = tmp_path / "pr.md"
    r = ept(
        "compare",
        str(ledger / "runs/base"),
        str(ledger / f"runs/{current}"),
        "--markdown",
        str(md),
        "--rounds",
        "100",
        *args,
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert needle in r.stderr
    assert not md.exists() and not list(tmp_path.glob(".*.part"))


def test_cli_refuses_a_ledger_root_with_several_runs(ledger: Path, tmp_path: Path) -> None:
    r = ept("compare", str(ledger), str(ledger / "runs/same"), "--rounds", "100", cwd=tmp_path)
    assert r.returncode == 2
    assert "pass one run" in r.stderr


def test_ci_example_is_consistent() -> None:
    import yaml

    from elo_per_token.coordinator.plan import load_plan

    plan = load_plan(REPO / "examples/ci/plan.toml")
    wf = yaml.safe_load((REPO / "examples/ci/elo-regression.yml").read_text())
    steps = wf["jobs"]["elo"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert f"runs/{plan.run_id}" in runs and "ept compare" in runs and "--markdown" in runs
    assert "gh pr comment" in runs and "ept doctor" in runs
    # The key comes from a CI secret, into the env var the plan's profile reads; never a literal key.
    from elo_per_token.egress.profiles import load_profiles

    prof = load_profiles(REPO / "profiles.toml")[plan.profile]
    assert wf["jobs"]["elo"]["env"][prof.api_key_env] == "${{ secrets." + prof.api_key_env + " }}"
    assert "sk-" not in (REPO / "examples/ci/elo-regression.yml").read_text()


# ---------------------------------------------------------------- acceptance on real simulator sweeps


def _sweep_ready() -> bool:
    import importlib.util

    return (
        importlib.util.find_spec("elo_per_token.worker.job") is not None
        and importlib.util.find_spec("elo_per_token.simulator.brain") is not None
    )


SIM_ARMS = [("greedy", [1]), ("majority", [4]), ("best_of_n", [4])]
DEGRADED_ARM = "majority@4"
SIM_TASKS = 30


def _sim_sweep(tmp: Path, sim_url: str, seed: int, ledger: str) -> Path:
    plan = tmp / f"plan-{ledger}.toml"
    write_plan_file(plan, SIM_ARMS, name="gate", profile="simulator", suites=["math", "code"], tasks_per_family=SIM_TASKS,
                    replicates=1, seed=seed, executor="local", concurrency=16, bootstrap_rounds=0)  # fmt: skip
    r = ept(
        "sweep",
        str(plan),
        "--profile-url-override",
        sim_url,
        "--ledger",
        str(tmp / ledger),
        "--no-analysis",
        cwd=tmp,
        env={"EPT_SIM_API_KEY": "sk-sim-dummy-key-for-tests", "EPT_PROFILES": str(REPO / "profiles.toml")},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return tmp / ledger / "runs" / "gate"


@pytest.mark.slow
@pytest.mark.skipif(
    not _sweep_ready(), reason="needs the strategies (worker.job) and the simulator's TaskBrain"
)
def test_simulator_degrade_is_flagged_and_an_unchanged_rerun_passes(make_sim, tmp_path: Path) -> None:
    sim = make_sim()
    base = _sim_sweep(tmp_path, sim.url, 1, "base")
    same = _sim_sweep(tmp_path, sim.url, 2, "same")
    sim.control.set(degrade={DEGRADED_ARM: 0.3})
    worse = _sim_sweep(tmp_path, sim.url, 3, "worse")
    # The simulator now lowers the accuracy of that arm only (its config names one arm label).
    assert sim.control.config()["degrade"] == {DEGRADED_ARM: 0.3}

    ok = ept("compare", str(base), str(same), "--json", str(tmp_path / "same.json"), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = ept(
        "compare",
        str(base),
        str(worse),
        "--json",
        str(tmp_path / "worse.json"),
        "--markdown",
        str(tmp_path / "worse.md"),
        cwd=tmp_path,
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    data = json.loads((tmp_path / "worse.json").read_text())
    assert data["flagged"] == [DEGRADED_ARM]
    rows = {r["arm"]: r for r in data["arms"]}
    assert rows[DEGRADED_ARM]["d_elo"] < -20
    assert f"`{DEGRADED_ARM}`" in (tmp_path / "worse.md").read_text()


@pytest.mark.services
def test_cli_compares_runs_in_s3(ledger: Path, s3_env, s3_bucket: str, tmp_path: Path) -> None:
    """Runs stored in a real S3 server (SeaweedFS): read by URL, manifests included (suites check -> exit 2)."""
    from elo_per_token.ledger import open_ledger

    s3 = open_ledger(f"s3://{s3_bucket}/ledger")
    local = open_ledger(ledger)
    for run in ("base", "worse", "other-suites"):
        s3.put_manifest(run, local.get_manifest(run))
        for key in local.list_jobs(run):
            s3.put_job(run, key, local.get_job(run, key))
    env = s3_env.env()
    r = ept(
        "compare",
        f"s3://{s3_bucket}/ledger/runs/base",
        f"s3://{s3_bucket}/ledger/runs/worse",
        "--json",
        str(tmp_path / "c.json"),
        "--rounds",
        "300",
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert json.loads((tmp_path / "c.json").read_text())["flagged"] == ["best_of_n@8"]
    r = ept(
        "compare",
        f"s3://{s3_bucket}/ledger/runs/base",
        f"s3://{s3_bucket}/ledger/runs/other-suites",
        "--rounds",
        "100",
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 2 and "different suites" in r.stderr, r.stdout + r.stderr


def test_bare_run_ids_resolve_in_the_default_ledger(ledger: Path, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(ledger, tmp_path / "ept-out" / "ledger")
    r = ept("compare", "base", "worse", "--rounds", "200", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    r = ept("compare", "base", "no-such-run", "--rounds", "200", cwd=tmp_path)
    assert r.returncode == 2 and "no-such-run" in r.stderr
