"""The recommendation and accuracy on held-out scenarios with known truth (issue 37 acceptance).

Scenarios (testkit/fixtures_stats.py models, the real `ept analyze` in this process, report.json scored):

- one-family: majority@16 is an exact clone of best@8's quality, observed in math only (a partial arm);
- crashing: flaky@4 (vote@4's twin) has no score on each family's hardest 20% of tasks (flagged);
- identical-8: eight arms of equal quality at 1k..8k tokens/task (only the cheapest is not dominated);
- long-16: 16 arms on a long frontier (each 0.12 logit stronger and 1.3x costlier; every arm truly on it);
- heavy-token: long@2 has a rare 50x-long reply (3% of its tasks), so its true tokens/task are 2.5x its
  typical ones; analysed with --budget 2500 (scored: the budget pick is truly over budget);
- acc-99: an arm at ~99% accuracy on one family of 24 tasks;
- adaptive: an adaptive sweep replayed on a full grid (benchmarks/bench_verdict_adaptive.py).

Scored per run: whether the recommendation picks a partial, flagged or truly dominated arm; with identical
arms, whether it declines or picks the cheapest; accuracy coverage (the truth: E[sigmoid(theta - d)] over the
estimand's tasks, d ~ N(0, 1)); and, for arms that solved every task, whether the lower bound is below 100%.

Run: python benchmarks/bench_verdict.py [--experiments 100] [--rounds 200] [--scenarios a,b]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "testkit"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_coverage import ARMS4, Scenario, cutoffs, run_cli, truth_for  # noqa: E402
from fixtures_stats import Arm, Experiment, write_experiment  # noqa: E402

FAM3 = {"math": 60, "code": 60, "tool": 60}
SCENARIOS = [
    Scenario("one-family", Experiment([*ARMS4, Arm("majority", 16, 0.6, 7000.0)], FAM3,
                                      missing={"code": {"majority@16"}, "tool": {"majority@16"}}),
             "majority@16 = best@8's quality, math only"),
    Scenario("crashing", Experiment([*ARMS4, Arm("flaky", 4, 0.35, 3100.0)], FAM3, null_hard={"flaky@4": 0.2}),
             "flaky@4 = vote@4's twin, no score on the hardest 20%", easiest=0.8),
    Scenario("identical-8", Experiment([Arm(f"s{i}", 1, 0.3, 1000.0 * (i + 1)) for i in range(8)], FAM3),
             "8 arms of equal quality at 1k..8k tokens/task"),
    Scenario("long-16", Experiment([Arm(f"l{i:02d}", 1, 0.12 * i, round(300 * 1.3**i)) for i in range(16)],
                                   {"math": 40, "code": 40, "tool": 40}),
             "16 arms, each 0.12 logit stronger and 1.3x costlier than the last"),
    Scenario("heavy-token", Experiment([*ARMS4[:3], Arm("long", 2, 0.5, 1200.0)], FAM3, heavy={"long@2": (0.03, 50.0)}),
             "long@2: 3% of its replies 50x long (true 2964 tokens/task)", args=("--budget", "2500")),
    Scenario("acc-99", Experiment([Arm("greedy", 1, 0.0, 1000.0), Arm("vote", 4, 1.0, 3000.0),
                                   Arm("ace", 8, 5.6, 6000.0)], {"math": 24}),
             "ace@8 at ~99% accuracy on 24 tasks"),
]  # fmt: skip


def true_accuracy(theta: float, share: float = 1.0) -> float:
    """E[sigmoid(theta - d) | d below the `share` quantile of N(0, 1)] (the estimand's tasks)."""
    from scipy.integrate import quad
    from scipy.special import expit
    from scipy.stats import norm

    hi = norm.ppf(share) if share < 1 else 12.0
    val, _ = quad(lambda d: norm.pdf(d) * expit(theta - d), -12.0, hi)
    return val / (share if share < 1 else 1.0)


def dominated(exp: Experiment, doc: dict, easiest: float | dict[str, float]) -> set[str]:
    """Arms some comparable (not partial) arm truly matches or beats at no more tokens per task."""
    elo, _ = truth_for(exp, doc["family_weights"], easiest)
    tok = {a.label: exp.true_tokens(a) for a in exp.arms}
    partial = set(doc.get("partial_arms", {}))
    out = set()
    for a in elo:
        for b in elo:
            if (
                b != a
                and b not in partial
                and elo[b] >= elo[a] - 1e-9
                and tok[b] <= tok[a]
                and (elo[b], tok[b]) != (elo[a], tok[a])
            ):
                out.add(a)
    return out


def score_run(sc: Scenario, doc: dict, share: dict[str, float] | float) -> dict[str, list]:
    rec = doc["recommendation"]
    pick = rec.get("arm")
    partial = set(doc.get("partial_arms", {}))
    flagged = set(rec.get("excluded", {})) - partial
    out: dict[str, list] = {"pick_partial": [pick in partial], "pick_flagged": [pick in flagged],
                            "pick_dominated": [pick in dominated(sc.exp, doc, share)], "declined": [pick is None],
                            "cheapest": [pick == doc["arms"][0]], "acc": [], "all_solved_lo_below_1": [],
                            "budget_over": []}  # fmt: skip
    if (rec.get("budget") or {}).get("arm"):
        limit = float(sc.args[sc.args.index("--budget") + 1])  # the scenarios give it in tokens
        arm = next(a for a in sc.exp.arms if a.label == rec["budget"]["arm"])
        out["budget_over"].append(sc.exp.true_tokens(arm) > limit)
    shares = list(share.values()) if isinstance(share, dict) else [share]
    for row in doc["accuracy"]:
        arm = next(a for a in sc.exp.arms if a.label == row["arm"])
        # families of equal weight and equal difficulty distribution; a partial arm: its families only
        truth = float(np.mean([true_accuracy(arm.theta, q) for q in shares]))
        if row["accuracy_lo"] is not None:
            out["acc"].append(row["accuracy_lo"] <= truth <= row["accuracy_hi"])
        if row["accuracy"] == 1.0:
            out["all_solved_lo_below_1"].append(row["accuracy_lo"] < 1.0)
    return out


def run(sc: Scenario, n: int, rounds: int, tmp: Path) -> dict[str, list]:
    agg: dict[str, list] = {}
    for e in range(n):
        f = write_experiment(tmp / f"{sc.name}-{e}.jsonl", sc.exp, seed=50_000 + e)
        out = tmp / f"{sc.name}-{e}"
        code = run_cli(
            ["analyze", str(f), "--rounds", str(rounds), "--seed", str(e), "--out", str(out), "--no-plots",
             *sc.args]
        )  # fmt: skip
        if code != 0:
            raise SystemExit(f"{sc.name} experiment {e}: ept analyze exited {code}")
        doc = json.loads((out / "report.json").read_text())
        share = cutoffs(sc.exp, 50_000 + e, sc.easiest) if sc.easiest < 1 else 1.0
        for k, v in score_run(sc, doc, share).items():
            agg.setdefault(k, []).extend(v)
        shutil.rmtree(out)
        f.unlink()
    return agg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiments", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--scenarios", default=",".join([*(s.name for s in SCENARIOS), "adaptive"]))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-verdict-"))

    def rate(v: list) -> str:
        return f"{np.mean(v):.1%} ({sum(v)}/{len(v)})" if v else "—"

    try:
        print(
            f"{args.experiments} runs per scenario, {args.rounds} bootstrap rounds, 95% intervals, margin 10 Elo"
        )
        print("| scenario | picks partial | picks flagged | picks truly dominated | declines | picks cheapest "
              "| accuracy coverage | all-solved: lower bound < 100% | budget pick truly over | CPU s |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name in args.scenarios.split(","):
            t0 = time.process_time()
            if name == "adaptive":
                from bench_verdict_adaptive import run_adaptive_replay

                a = run_adaptive_replay(args.experiments, args.rounds, tmp)
            else:
                a = run(next(s for s in SCENARIOS if s.name == name), args.experiments, args.rounds, tmp)
            print(f"| {name} | {rate(a['pick_partial'])} | {rate(a['pick_flagged'])} | {rate(a['pick_dominated'])} "
                  f"| {rate(a['declined'])} | {rate(a['cheapest'])} | {rate(a['acc'])} "
                  f"| {rate(a['all_solved_lo_below_1'])} | {rate(a['budget_over'])} "
                  f"| {time.process_time() - t0:.0f} |", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
