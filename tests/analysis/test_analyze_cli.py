"""`ept analyze` end to end: outputs, their agreement, options, reproducibility, bad options."""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from cli_runner import run_ept
from scipy.optimize import brentq

from elo_per_token.analysis.bt import prior_l2

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "logs"


ept = functools.partial(run_ept, cwd=ROOT, columns=200)  # the CLI in this process (testkit/cli_runner.py)


@pytest.fixture(scope="module")
def example_report(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("report")
    proc = ept("analyze", str(EXAMPLE), "--out", str(out), "--rounds", "200", "--seed", "1",
               "--weights", "math=0.4,code=0.4,tool_use=0.2", "--transcript", str(out / "transcript.md"),
               "--html", str(out / "report.html"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_outputs_exist_and_agree(example_report) -> None:
    out, proc = example_report
    for name in (
        "report.md",
        "arms.csv",
        "report.json",
        "elo_vs_tokens.png",
        "d_elo_per_1k.png",
        "per_family_elo.png",
    ):
        assert (out / name).stat().st_size > 0, name
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((out / "report.json").read_text())
    csv = pl.read_csv(out / "arms.csv")
    table = pl.DataFrame(doc["table"])
    assert csv["arm"].to_list() == table["arm"].to_list() == doc["arms"]
    for col in ("tokens_per_task", "elo", "elo_lo", "elo_hi", "d_elo_per_1k"):
        np.testing.assert_allclose(csv[col].to_numpy(), table[col].to_numpy().astype(float), rtol=1e-12)
    # Table rows go by tokens per task; the default anchor is the cheapest arm, pinned at 1000.
    assert csv["tokens_per_task"].to_list() == sorted(csv["tokens_per_task"].to_list())
    assert doc["anchor"] == csv["arm"][0] == "greedy@1"
    assert csv["elo"][0] == pytest.approx(1000.0)
    # Intervals contain their point estimates.
    assert (csv["elo_lo"] <= csv["elo"] + 1e-9).all() and (csv["elo"] <= csv["elo_hi"] + 1e-9).all()
    # Inputs, options, versions are recorded.
    assert sorted(Path(f).name for f in doc["inputs"]) == ["calls.jsonl.gz", "outcomes.jsonl"]
    assert doc["options"]["rounds"] == 200 and doc["options"]["seed"] == 1
    assert doc["family_weights"] == pytest.approx({"math": 0.4, "code": 0.4, "tool_use": 0.2})
    assert {"elo_per_token", "polars", "numpy", "scipy", "python"} <= set(doc["versions"])
    assert doc["counts"]["calls"] == 12780 and doc["counts"]["outcomes"] == 900
    # The terminal shows every arm with its Elo as in the JSON.
    for r in doc["table"]:
        assert r["arm"] in proc.stdout
        assert f"{r['elo']:.0f} [" in proc.stdout
    md = (out / "report.md").read_text()
    assert "| greedy@1 (anchor) |" in md and "elo_vs_tokens.png" in md
    assert "Diminishing returns" in (out / "transcript.md").read_text()
    html = (out / "report.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and "best_of_n@16" in html


def test_same_seed_same_numbers_other_seed_other_intervals(example_report, tmp_path: Path) -> None:
    out, _ = example_report
    base = json.loads((out / "report.json").read_text())["table"]
    args = [
        "analyze",
        str(EXAMPLE),
        "--rounds",
        "200",
        "--weights",
        "math=0.4,code=0.4,tool_use=0.2",
        "--no-plots",
    ]
    ept(*args, "--seed", "1", "--out", str(tmp_path / "a"))
    ept(*args, "--seed", "2", "--out", str(tmp_path / "b"))
    same = json.loads((tmp_path / "a" / "report.json").read_text())["table"]
    other = json.loads((tmp_path / "b" / "report.json").read_text())["table"]
    assert same == base
    assert [r["elo"] for r in other] == [r["elo"] for r in base]  # point estimates do not depend on the seed
    assert [r["elo_hi"] for r in other[1:]] != [r["elo_hi"] for r in base[1:]]


def test_weights_change_the_merge_as_the_per_family_view_predicts(example_report) -> None:
    out, _ = example_report
    doc = json.loads((out / "report.json").read_text())
    pf = pl.DataFrame(doc["per_family"])
    w = doc["family_weights"]
    # Merged theta = sum_f w_f * centred theta_f (every family observed every arm here); Elo anchored at greedy@1.
    theta = {
        a: sum(w[r["family"]] * r["theta"] for r in pf.filter(pl.col("arm") == a).to_dicts())
        for a in doc["arms"]
    }
    scale = 400 / math.log(10)
    for r in doc["table"]:
        assert r["elo"] == pytest.approx(1000 + scale * (theta[r["arm"]] - theta["greedy@1"]), abs=1e-6)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--anchor", "greedy@2"], "--anchor"),
        (["--weights", "math=1,physics=1"], "physics"),
        (["--weights", "math=-1"], "--weights"),
        (["--rounds", "-5"], "--rounds"),
        (["--l2", "-1"], "--l2"),
        (["--level", "1.5"], "--level"),
        (["--tasks", "/nonexistent/tasks.jsonl"], "tasks"),
    ],
)
def test_bad_options_exit_2_and_write_nothing(tmp_path: Path, extra: list[str], needle: str) -> None:
    out = tmp_path / "o"
    proc = ept("analyze", str(EXAMPLE), "--out", str(out), *extra)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert not out.exists()


def test_judgments_ties_and_drop_ties(tmp_path: Path) -> None:
    """Explicit judgments alone give the comparisons; --drop-ties removes the tie rows."""
    rows = []
    for t in range(30):
        task = f"qa-{t:02d}"
        rows += [
            {"task_id": task, "strategy": "greedy", "budget_n": 1, "usage": {"prompt_tokens": 100, "completion_tokens": 20}},
            {"task_id": task, "strategy": "vote", "budget_n": 5, "usage": {"prompt_tokens": 500, "completion_tokens": 100}},
            {"task_id": task, "arm_a": "greedy@1", "arm_b": "vote@5", "winner": ["B", "B", "tie"][t % 3], "kind": "judgment"},
        ]  # fmt: skip
    f = tmp_path / "j.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a = ept("analyze", str(f), "--rounds", "50", "--out", str(tmp_path / "a"), "--no-plots")
    b = ept("analyze", str(f), "--rounds", "50", "--out", str(tmp_path / "b"), "--no-plots", "--drop-ties")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    da = json.loads((tmp_path / "a" / "report.json").read_text())
    db = json.loads((tmp_path / "b" / "report.json").read_text())
    assert da["counts"]["comparisons"] == 20 + 2 * 10 and db["counts"]["comparisons"] == 20

    # 2-arm closed form: with theta = (-d/2, d/2) the objective is -W log s(d) - L log s(-d) + l2 d^2/2,
    # stationary where -W s(-d) + L s(d) + l2 d = 0. Ties count half each way: W = 20 + 5, L = 5.
    # The default l2 is the prior of one virtual tie per arm (analysis.bt.prior_l2, issue 12), not 1e-3.
    def d_hat(w: float, lose: float, l2: float = prior_l2()) -> float:
        sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
        return brentq(lambda d: -w * sig(-d) + lose * sig(d) + l2 * d, -50, 50, xtol=1e-14)

    scale = 400 / math.log(10)
    d_a = da["table"][1]["elo"] - da["table"][0]["elo"]
    d_b = db["table"][1]["elo"] - db["table"][0]["elo"]
    assert d_a == pytest.approx(scale * d_hat(25, 5), abs=1e-4)
    assert d_b == pytest.approx(scale * d_hat(20, 0), abs=1e-4)  # separation: only the L2 penalty bounds it


def test_ledger_run_directory_end_to_end(tmp_path: Path) -> None:
    """JobResult objects under runs/<run_id>/jobs/**: judge calls are evaluation cost, missing usage is reported."""
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.contracts.records import CallRecord, JobResult, Outcome

    rng = np.random.default_rng(4)
    run = tmp_path / "ledger" / "runs" / "r7"
    for t in range(25):
        for strategy, n, p_win in (("greedy", 1, 0.3), ("best_of_n", 4, 0.7)):
            job = Job(run_id="r7", task={"task_id": f"t{t}", "family": "math"}, strategy=strategy, budget_n=n)
            calls = [
                CallRecord(call_index=i, role="sample", model="m", latency_s=0.0, attempts=1,
                           usage={"prompt_tokens": 100, "completion_tokens": 50})
                for i in range(n)
            ] + [CallRecord(call_index=n, role="judge", model="m", latency_s=0.0, attempts=1,
                            usage={"prompt_tokens": 1000, "completion_tokens": 1})]  # fmt: skip
            if t == 0 and n == 4:
                calls.append(CallRecord(call_index=9, role="sample", model="m", usage=None, latency_s=0.0,
                                        attempts=1, usage_missing=True))  # fmt: skip
            ok = bool(rng.random() < p_win)
            res = JobResult(job, calls, Outcome(answer="x", score=float(ok), correct=ok))
            path = run / "jobs" / f"{job.key}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(res.to_jsonl())
    proc = ept("analyze", str(run), "--rounds", "50", "--out", str(tmp_path / "o"), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "o" / "report.json").read_text())
    tok = {r["arm"]: r for r in doc["tokens"]}
    assert tok["greedy@1"]["avg_tokens_per_task"] == 150 and tok["greedy@1"]["calls"] == 25
    # t0 of best_of_n@4 has a call without usage: counted, and that task's cost is unknown (not 600).
    assert tok["best_of_n@4"]["calls_missing_usage"] == 1 and tok["best_of_n@4"]["avg_tokens_per_task"] == 600
    assert tok["best_of_n@4"]["tasks"] == 25 and tok["best_of_n@4"]["total_tokens"] == 600 * 25
    assert {r["arm"]: r["judge_calls"] for r in doc["judge_tokens"]} == {"greedy@1": 25, "best_of_n@4": 25}
    assert doc["counts"]["judge_calls"] == 50 and doc["counts"]["calls_missing_usage"] == 1
    assert any("no usage" in w for w in doc["warnings"])


def test_known_strengths_are_recovered_from_judgments(tmp_path: Path) -> None:
    """Judgments drawn from a known Bradley-Terry model per family: the merged, anchored Elo matches truth."""
    from elo_per_token.analysis.pipeline import AnalysisOptions, analyze

    rng = np.random.default_rng(12)
    arms = ["a@1", "a@2", "b@4", "b@8"]
    truth = {"x": np.array([0.0, 0.5, 0.9, 1.1]), "y": np.array([0.0, 0.3, 0.6, 1.4])}
    rows = []
    for fam, th in truth.items():
        for t in range(300):
            task = f"{fam}-{t}"
            for k, arm in enumerate(arms):
                s, n = arm.split("@")
                rows.append({"task_id": task, "strategy": s, "budget_n": int(n),
                             "usage": {"prompt_tokens": 100 * (k + 1), "completion_tokens": 0}})  # fmt: skip
            for i in range(4):
                for j in range(i + 1, 4):
                    p = 1 / (1 + np.exp(-(th[i] - th[j])))
                    rows.append({"task_id": task, "arm_a": arms[i], "arm_b": arms[j],
                                 "winner": "A" if rng.random() < p else "B"})  # fmt: skip
    f = tmp_path / "j.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = analyze([str(f)], AnalysisOptions(rounds=200, seed=0, weights="x=0.5,y=0.5"))
    merged = 0.5 * (truth["x"] - truth["x"].mean()) + 0.5 * (truth["y"] - truth["y"].mean())
    want = 400 / math.log(10) * (merged - merged[0])
    assert res.arms == arms
    got = res.table["elo"].to_numpy() - 1000
    se = (res.table["elo_hi"].to_numpy() - res.table["elo_lo"].to_numpy())[1:] / (2 * 1.96)
    assert np.all(np.abs(got - want)[1:] < 4 * se), (got, want, se)
    assert np.all(se < 25)  # 1,800 comparisons per family pin each arm to within a few dozen Elo


def test_arm_missing_from_a_family_and_no_bootstrap(tmp_path: Path) -> None:
    from elo_per_token.analysis.pipeline import AnalysisOptions, analyze

    rows = []
    for fam in ("math", "code"):
        for t in range(6):
            arms = [("g", 1, 0.2), ("b", 4, 0.5)] + ([("x", 9, 0.9)] if fam == "math" else [])
            for s, n, score in arms:
                rows.append({"task_id": f"{fam}-{t}", "strategy": s, "budget_n": n,
                             "usage": {"prompt_tokens": 100 * n, "completion_tokens": 10}})  # fmt: skip
                rows.append({"task_id": f"{fam}-{t}", "strategy": s, "budget_n": n, "score": score})
    f = tmp_path / "a.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = analyze([str(f)], AnalysisOptions(rounds=0))
    assert (
        res.elo_samples is None and res.table["elo_lo"].null_count() + res.table["elo_lo"].is_nan().sum() == 3
    )
    code = {r["arm"]: r["elo"] for r in res.per_family.filter(pl.col("family") == "code").to_dicts()}
    assert code["x@9"] is None and code["g@1"] is not None
    assert [fit.unobserved for fit in res.fits] == [["x@9"], []]  # families sorted: code, math
    assert any("family code has no comparisons for x@9" in w for w in res.warnings)


def test_shipped_example_is_what_its_script_generates(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from make_example_logs import generate
    finally:
        sys.path.pop(0)
    generate(tmp_path)
    for name in ("calls.jsonl.gz", "outcomes.jsonl"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes(), name


def test_arm_without_any_usage_is_left_out_not_made_cheapest(tmp_path: Path) -> None:
    from elo_per_token.analysis.pipeline import AnalysisOptions, analyze

    rows = []
    for t in range(8):
        for s, n, usage, score in (("g", 1, {"prompt_tokens": 10, "completion_tokens": 0}, 0.2),
                                   ("b", 4, {"prompt_tokens": 40, "completion_tokens": 0}, 0.6),
                                   ("z", 2, None, 0.9)):  # fmt: skip
            rows.append({"task_id": f"m-{t}", "strategy": s, "budget_n": n, "usage": usage})
            rows.append({"task_id": f"m-{t}", "strategy": s, "budget_n": n, "score": score})
    f = tmp_path / "a.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = analyze([str(f)], AnalysisOptions(rounds=0))
    assert res.arms == ["g@1", "b@4"] and res.anchor == "g@1"
    assert any("z@2" in w and "unknown" in w for w in res.warnings)


def test_nothing_to_compare_is_an_input_error(tmp_path: Path) -> None:
    calls_only = tmp_path / "calls.jsonl"
    calls_only.write_text(json.dumps({"task_id": "m-1", "strategy": "g", "budget_n": 1,
                                      "usage": {"prompt_tokens": 1, "completion_tokens": 1}}) + "\n")  # fmt: skip
    proc = ept("analyze", str(calls_only), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "nothing to compare" in proc.stderr and not (tmp_path / "o").exists()
    outcomes_only = tmp_path / "outcomes.jsonl"
    outcomes_only.write_text(
        json.dumps({"task_id": "m-1", "strategy": "g", "budget_n": 1, "score": 1}) + "\n"
    )
    proc = ept("tokens", str(outcomes_only))
    assert proc.returncode == 2 and "no call records" in proc.stderr


def test_judge_jobs_own_outcomes_are_not_counted_as_ungraded(tmp_path: Path) -> None:
    from elo_per_token.analysis.pipeline import AnalysisOptions, analyze

    rows = []
    for t in range(6):
        for s, n, score in (("g", 1, 0.2), ("b", 4, 0.7)):
            rows.append({"task_id": f"m-{t}", "strategy": s, "budget_n": n,
                         "usage": {"prompt_tokens": 10 * n, "completion_tokens": 1}})  # fmt: skip
            rows.append({"task_id": f"m-{t}", "strategy": s, "budget_n": n, "score": score})
        # What a judge job writes: its calls (role judge) and an outcome without a score.
        rows.append({"task_id": f"m-{t}", "strategy": "judge", "budget_n": 1, "role": "judge",
                     "usage": {"prompt_tokens": 50, "completion_tokens": 2}})  # fmt: skip
        rows.append(
            {"kind": "outcome", "task_id": f"m-{t}", "strategy": "judge", "budget_n": 1, "score": None}
        )
    # One real answer that failed before grading.
    rows.append(
        {"kind": "outcome", "task_id": "m-0", "strategy": "b", "budget_n": 4, "replicate": 1, "score": None}
    )
    f = tmp_path / "a.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = analyze([str(f)], AnalysisOptions(rounds=0))
    assert [w for w in res.warnings if "have no score" in w] == [
        "1 outcome(s) have no score (failed before grading); counted as --missing shared says (on the tasks "
        "every arm answered); `ept retry RUN` reruns the failed jobs"
    ]
    assert res.arms == ["g@1", "b@4"]
