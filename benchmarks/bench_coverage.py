"""Coverage of `ept analyze` / `ept compare` on synthetic experiments of known truth (issue 12 acceptance).

Each experiment writes a JSONL call log with outcomes (or judgments) drawn from a known model
(testkit/fixtures_stats.py) and runs the real CLI in this process (`ept.cli.main`: argument parsing,
reading, analysis, report.json), then scores report.json against the truth:

- Elo / ΔElo / ΔElo per 1k coverage: share of intervals that contain the truth (95% intervals). The
  truth for binary outcomes is the large-sample limit of the fit (ties shrink theta), per family on the
  arms that family ran, merged with the analysis' own (effective) weights. ΔElo per 1k is scored only
  where it is reported; "reported" gives that share.
- frontier: "confident wrong" = some arm with frontier probability >= 0.95 that is truly off the
  frontier, or <= 0.05 that is truly on it; "point label wrong" = the point-estimate label differs from
  the truth for some arm (what the old table printed).
- far misses without a warning: intervals missing the truth by more than their own half-width, in
  experiments that printed no warning (a confident wrong number nobody was told to doubt).
- gate (`ept compare`, elo-drop=20, Bonferroni): false alarms on unchanged pairs of runs, and the
  detection rate of a true drop equal to the median printed "drop caught 80%".

Run: python benchmarks/bench_coverage.py [--experiments 100] [--rounds 1000] [--gate-experiments 100]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "testkit"))

from fixtures_stats import (  # noqa: E402
    ELO_SCALE,
    Arm,
    Experiment,
    pseudo_true_theta,
    true_frontier,
    write_experiment,
)

from elo_per_token.analysis.merge import merge_thetas  # noqa: E402

ARMS4 = [
    Arm("greedy", 1, 0.0, 1000.0),
    Arm("vote", 4, 0.35, 3000.0),
    Arm("best", 8, 0.6, 6000.0),
    Arm("tree", 16, 0.7, 12000.0),
]


@dataclass
class Scenario:
    name: str
    exp: Experiment
    note: str
    args: tuple[str, ...] = ()  # extra `ept analyze` arguments
    easiest: float = 1.0  # the estimand's tasks: the easiest share (--missing shared drops the hardest)


SCENARIOS = [
    Scenario("judgments", Experiment(ARMS4, {"math": 60, "code": 60, "tool": 60}, mode="judgment"),
             "4 arms, 3 families x 60 tasks, one judgment per pair and task"),
    Scenario("binary-40", Experiment(ARMS4, {"math": 40, "code": 40, "tool": 40}),
             "binary outcomes, 3 families x 40 tasks"),
    Scenario("binary-300", Experiment(ARMS4, {"math": 300, "code": 300, "tool": 300}),
             "binary outcomes, 3 families x 300 tasks"),
    Scenario("family-of-3", Experiment(ARMS4, {"math": 100, "code": 100, "tiny": 3}),
             "binary, 2 families x 100 tasks + one family of 3 tasks"),
    Scenario("arm-missing", Experiment(ARMS4, {"math": 150, "code": 150, "tool": 150}, missing={"code": {"vote@4"}}),
             "binary, 3 families x 150 tasks, vote@4 never ran in code"),
    Scenario("cost-1pct", Experiment([Arm("greedy", 1, 0.0, 1000.0), Arm("a", 1, 0.4, 4000.0),
                                      Arm("b", 1, 0.45, 4040.0), Arm("c", 1, 0.8, 9000.0)],
                                     {"math": 150, "code": 150}),
             "binary, 2 families x 150 tasks, arms a and b 1% apart in cost"),
]  # fmt: skip

# Issue 25: the four cases whose table used to mislead, each with known truth for the estimand it states.
SCENARIOS_25 = [
    Scenario("mnar-hard", Experiment([*ARMS4, Arm("flaky", 4, 0.2, 3500.0)], {"math": 100, "code": 100, "tool": 100},
                                     null_hard={"flaky@4": 0.2}),
             "flaky@4 (dominated by vote@4) has no score on each family's hardest 20% of tasks; truth: every arm "
             "on the tasks all answered (--missing shared, the default)", easiest=0.8),
    Scenario("partial-interaction", Experiment([Arm("greedy", 1, 0.0, 1000.0), Arm("vote", 4, 0.3, 3000.0),
                                                Arm("solo", 4, 0.3, 3100.0), Arm("best", 8, 1.0, 6000.0),
                                                Arm("tree", 16, 1.2, 12000.0)], {"math": 150, "code": 150, "tool": 150},
                                               missing={"code": {"solo@4"}, "tool": {"solo@4"}},
                                               interaction={"math": {"vote@4": 0.9, "solo@4": 0.9}}),
             "solo@4 = vote@4 but run on math only, where both gain +0.9 logits (family x arm interaction): "
             "unmarked, solo@4 would sit on the frontier above best@8 at half its cost"),
    Scenario("family-9-weighted", Experiment(ARMS4, {"math": 150, "code": 150, "tool": 9}),
             "binary, math/code 150 tasks, tool 9 tasks, --weights math=0.4,code=0.4,tool=0.2",
             args=("--weights", "math=0.4,code=0.4,tool=0.2")),
    Scenario("cost-0.9pct-exact", Experiment([Arm("greedy", 1, 0.0, 1000.0), Arm("a", 1, 0.4, 4000.0),
                                              Arm("b", 1, 0.45, 4036.0), Arm("c", 1, 0.8, 9000.0)],
                                             {"math": 150, "code": 150}, token_sd=0.0),
             "binary, 2 families x 150 tasks, deterministic costs, a and b 0.9% apart"),
]  # fmt: skip


def run_cli(argv: list[str]) -> int:
    """`ept ARGV` in this process; returns the exit code (stdout/stderr swallowed)."""
    from elo_per_token.ept.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as e:
            return int(e.code or 0)
    return 0


def cutoffs(exp: Experiment, seed: int, share: float) -> dict[str, float]:
    """Family -> the share of the difficulty distribution below the experiment's own cut: the tasks left
    when each family's hardest `1 - share` lack a score (the same draws as write_experiment's task_rng)."""
    from scipy.stats import norm

    task_rng = np.random.default_rng(seed)
    out = {}
    for fam, n in exp.tasks.items():
        d = np.sort(task_rng.normal(0.0, 1.0, n))
        k = n - round((1 - share) * n)  # tasks kept
        out[fam] = float(norm.cdf((d[k - 1] + d[k]) / 2)) if 0 < k < n else 1.0
    return out


def family_truth(exp: Experiment, easiest: float | dict[str, float] = 1.0) -> dict[str, np.ndarray]:
    """Family -> pseudo-true theta of each arm it ran (NaN elsewhere), with the family's interaction;
    easiest: the share of the difficulty distribution the estimand covers (per family or one for all)."""
    labels = [a.label for a in exp.arms]
    per_family = {}
    for fam in exp.tasks:
        q = easiest.get(fam, 1.0) if isinstance(easiest, dict) else easiest
        shift = exp.interaction.get(fam, {})
        theta = np.array([a.theta + shift.get(a.label, 0.0) for a in exp.arms])
        ran = np.array([lab not in exp.missing.get(fam, set()) for lab in labels])
        th = np.full(len(labels), np.nan)
        th[ran] = pseudo_true_theta(theta[ran], exp.mode, q)
        per_family[fam] = th
    return per_family


def truth_for(
    exp: Experiment, weights: dict[str, float], easiest: float | dict[str, float] = 1.0
) -> tuple[dict[str, float], dict[str, float]]:
    """(true Elo vs the cheapest arm, true tokens per task weighted like Elo) by arm label."""
    labels = [a.label for a in exp.arms]
    per_family = family_truth(exp, easiest)
    merged = merge_thetas(per_family, weights)
    elo = 1000 + ELO_SCALE * (merged - merged[0])
    tokens = {}
    for a in exp.arms:
        w = [weights.get(f, 0.0) for f in exp.tasks if a.label not in exp.missing.get(f, set())]
        tokens[a.label] = a.tokens if sum(w) > 0 else math.nan
    return dict(zip(labels, elo.tolist(), strict=True)), tokens


def _covers(lo, hi, truth) -> bool | None:
    if lo is None or hi is None:
        return None
    return lo <= truth <= hi


def _far(lo, hi, truth) -> bool:
    if lo is None or hi is None:
        return False
    half = (hi - lo) / 2
    return truth < lo - half or truth > hi + half


def shared_truth(
    exp: Experiment, weights: dict[str, float], k: str, j: str, easiest: float | dict[str, float]
) -> float:
    """True ΔElo of arm k over arm j on the families both ran (weights renormalised over them)."""
    labels = [a.label for a in exp.arms]
    per_family = family_truth(exp, easiest)
    ik, ij = labels.index(k), labels.index(j)
    fams = [f for f, th in per_family.items() if weights.get(f, 0) > 0 and not np.isnan(th[ik] + th[ij])]
    w = np.array([weights[f] for f in fams])
    return float(
        ELO_SCALE
        * sum(wi * (per_family[f][ik] - per_family[f][ij]) for wi, f in zip(w / w.sum(), fams, strict=True))
    )


def score(doc: dict, exp: Experiment, easiest: float | dict[str, float] = 1.0) -> dict[str, list]:
    elo_t, tok_t = truth_for(exp, doc["family_weights"], easiest)
    rows = doc["table"]
    arms = [r["arm"] for r in rows]
    partial = set(doc.get("partial_arms", {}))
    out: dict[str, list] = {k: [] for k in ("elo", "d_elo", "per_1k", "per_1k_reported", "far", "marked")}
    for i, r in enumerate(rows):
        t = elo_t[r["arm"]] - elo_t[doc["anchor"]] + 1000.0
        out["marked"].append(r["arm"] in partial)
        if r["arm"] != doc["anchor"] and r["arm"] not in partial:  # a partial arm's global Elo is marked
            out["elo"].append(_covers(r["elo_lo"], r["elo_hi"], t))
            out["far"].append(_far(r["elo_lo"], r["elo_hi"], t))
        # Each row is against its `vs` arm (the previous frontier arm; older versions: the previous row).
        p = r["vs"] if "vs" in r else (rows[i - 1]["arm"] if i else None)
        if p is None:
            continue
        if r["arm"] in partial:
            d_true = shared_truth(exp, doc["family_weights"], r["arm"], p, easiest)
        else:
            d_true = elo_t[r["arm"]] - elo_t[p]
        out["d_elo"].append(_covers(r["d_elo_lo"], r["d_elo_hi"], d_true))
        out["far"].append(_far(r["d_elo_lo"], r["d_elo_hi"], d_true))
        dt = tok_t[r["arm"]] - tok_t[p]
        reported = r["d_elo_per_1k"] is not None
        out["per_1k_reported"].append(reported)
        if reported and dt > 0:
            ratio = d_true / dt * 1000.0
            out["per_1k"].append(_covers(r["d_elo_per_1k_lo"], r["d_elo_per_1k_hi"], ratio))
            out["far"].append(_far(r["d_elo_per_1k_lo"], r["d_elo_per_1k_hi"], ratio))
    eligible = np.array([a not in partial for a in arms])
    e = np.where(eligible, np.array([elo_t[a] for a in arms]), -np.inf)
    tk = np.array([tok_t[a] for a in arms])
    front = true_frontier(e, tk) & eligible
    # .get: the same scoring runs against older versions (no frontier probability) for a before/after.
    prob = np.array([r.get("frontier_prob") for r in rows], dtype=float)
    point = np.array([r["frontier"] for r in rows])
    on = np.array([r.get("frontier_band", "on" if r["frontier"] else "off") == "on" for r in rows])
    out["front_confident_wrong"] = [bool(np.any((prob >= 0.95) & ~front) or np.any((prob <= 0.05) & front))]
    out["front_point_wrong"] = [bool(np.any(point != front))]
    # The acceptance: no dominated or partial arm shown as "on" the frontier without a mark.
    out["front_on_wrong"] = [bool(np.any(on & ~front))]
    out["warned"] = [bool(doc["warnings"])]
    # The truth has no family x arm interaction, so every heterogeneity warning is a false alarm.
    out["het_warned"] = [any("families disagree" in w for w in doc["warnings"])]
    return out


def run_scenario(sc: Scenario, n: int, rounds: int, tmp: Path) -> dict[str, float]:
    agg: dict[str, list] = {}
    far_unwarned = 0
    for e in range(n):
        f = write_experiment(tmp / f"{sc.name}-{e}.jsonl", sc.exp, seed=10_000 + e)
        out = tmp / f"{sc.name}-{e}"
        code = run_cli(
            [
                "analyze",
                str(f),
                "--rounds",
                str(rounds),
                "--seed",
                str(e),
                "--out",
                str(out),
                "--no-plots",
                *sc.args,
            ]
        )
        if code != 0:
            raise SystemExit(f"{sc.name} experiment {e}: ept analyze exited {code}")
        doc = json.loads((out / "report.json").read_text())
        s = score(doc, sc.exp, cutoffs(sc.exp, 10_000 + e, sc.easiest) if sc.easiest < 1 else 1.0)
        far_unwarned += any(s["far"]) and not s["warned"][0]
        for k, v in s.items():
            agg.setdefault(k, []).extend(x for x in v if x is not None)
        shutil.rmtree(out)
        f.unlink()

    def rate(k: str) -> float:
        v = agg.get(k, [])
        return float(np.mean(v)) if v else math.nan

    def n_of(k: str) -> int:
        return len(agg.get(k, []))

    return {
        "elo": rate("elo"),
        "elo_n": n_of("elo"),
        "d_elo": rate("d_elo"),
        "d_elo_n": n_of("d_elo"),
        "marked": rate("marked"),
        "front_on_wrong": rate("front_on_wrong"),
        "per_1k": rate("per_1k"),
        "per_1k_reported": rate("per_1k_reported"),
        "front_confident_wrong": rate("front_confident_wrong"),
        "front_point_wrong": rate("front_point_wrong"),
        "warned": rate("warned"),
        "het_warned": rate("het_warned"),
        "far_unwarned": far_unwarned / n,
        "n": n,
    }


# ---------------------------------------------------------------- the gate


GATE_EXP = Experiment(ARMS4, {"math": 300, "code": 300, "tool": 300})
GATE_ARM = "vote@4"


def true_drop(degrade: float) -> float:
    """True ΔElo of GATE_ARM when the current run's arm loses `degrade` in theta (pooled 2K-player fit)."""
    theta = np.array([a.theta for a in GATE_EXP.arms])
    cur = theta - np.array([degrade if a.label == GATE_ARM else 0.0 for a in GATE_EXP.arms])
    pt = pseudo_true_theta(np.concatenate([theta, cur]))
    i = [a.label for a in GATE_EXP.arms].index(GATE_ARM)
    return float(ELO_SCALE * (pt[len(theta) + i] - pt[i]))


def degrade_for(drop: float) -> float:
    from scipy.optimize import brentq

    return float(brentq(lambda d: true_drop(d) + drop, 0.0, 5.0, xtol=1e-6))


def run_gate(n: int, rounds: int, tmp: Path) -> dict[str, float]:
    def pair(e: int, degrade: float) -> tuple[int, dict]:
        base = tmp / f"gate-{e}-base"
        cur = tmp / f"gate-{e}-cur"
        write_experiment(base / "log.jsonl", GATE_EXP, seed=20_000 + e, task_seed=e)
        exp = Experiment(GATE_EXP.arms, GATE_EXP.tasks, degrade={GATE_ARM: degrade} if degrade else {})
        write_experiment(cur / "log.jsonl", exp, seed=30_000 + e, task_seed=e)
        js = tmp / f"gate-{e}.json"
        code = run_cli(
            ["compare", str(base), str(cur), "--rounds", str(rounds), "--seed", str(e), "--json", str(js)]
        )
        doc = json.loads(js.read_text())
        shutil.rmtree(base)
        shutil.rmtree(cur)
        return code, doc

    alarms, detect_printed = 0, []
    for e in range(n):
        code, doc = pair(e, 0.0)
        alarms += code == 1
        detect_printed += [r["detectable_drop"] for r in doc["arms"] if r["arm"] == GATE_ARM]
    target = float(np.median(detect_printed))
    deg = degrade_for(target)
    caught = 0
    caught_30 = 0
    deg30 = degrade_for(30.0)
    for e in range(n):
        code, doc = pair(1000 + e, deg)
        caught += GATE_ARM in doc["flagged"]
        code, doc = pair(2000 + e, deg30)
        caught_30 += GATE_ARM in doc["flagged"]
    return {"false_alarm": alarms / n, "printed_drop_80": target, "detect_at_printed": caught / n,
            "detect_30": caught_30 / n, "n": n}  # fmt: skip


def _mc(rate: float, n: int) -> str:
    """A coverage with its Monte-Carlo standard error (binomial; intervals of one experiment are correlated,
    so this is a lower bound on the true error)."""
    if not n or rate != rate:
        return "—"
    return f"{rate:.1%} ± {math.sqrt(rate * (1 - rate) / n):.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiments", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--gate-experiments", type=int, default=100)
    ap.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS + SCENARIOS_25))
    args = ap.parse_args()
    wanted = args.scenarios.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="bench-coverage-"))
    try:
        print(f"{args.experiments} experiments per scenario, {args.rounds} bootstrap rounds, 95% intervals")
        print("| scenario | Elo | ΔElo | ΔElo/1k (where reported) | ΔElo/1k reported | frontier: confident wrong "
              "| frontier: point label wrong | frontier: 'on' but off/partial | rows marked partial | any warning "
              "| heterogeneity warning (false) | far miss, no warning |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for sc in SCENARIOS + SCENARIOS_25:
            if sc.name not in wanted:
                continue
            t0 = time.perf_counter()
            r = run_scenario(sc, args.experiments, args.rounds, tmp)
            print(f"| {sc.name} | {_mc(r['elo'], r['elo_n'])} | {_mc(r['d_elo'], r['d_elo_n'])} | {r['per_1k']:.1%} "
                  f"| {r['per_1k_reported']:.0%} | {r['front_confident_wrong']:.0%} | {r['front_point_wrong']:.0%} "
                  f"| {r['front_on_wrong']:.0%} | {r['marked']:.0%} | {r['warned']:.0%} "
                  f"| {r['het_warned']:.0%} "
                  f"| {r['far_unwarned']:.0%} |", flush=True)  # fmt: skip
            print(f"  ({sc.note}; {time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        if args.gate_experiments:
            g = run_gate(args.gate_experiments, args.rounds, tmp)
            print()
            print(
                f"gate (ept compare, elo-drop=20, Bonferroni, 4 arms, 3 families x 300 tasks, {g['n']} pairs each):"
            )
            print(f"  false alarms on unchanged runs: {g['false_alarm']:.0%}")
            print(f"  median printed 'drop caught 80%' for {GATE_ARM}: {g['printed_drop_80']:.0f} Elo")
            print(f"  detection of a true drop of that size: {g['detect_at_printed']:.0%}")
            print(f"  detection of a true 30-Elo drop: {g['detect_30']:.0%}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
