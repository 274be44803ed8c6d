"""Is the frontier band's `off` truly off? An audit over random designs with known truth (issue 37 item 7).

Each design draws 3-8 arms (theta ~ U(0, 1.2), true tokens per task log-uniform in 500..12000), 2-3 families
of 30-120 tasks, binary outcomes (testkit/fixtures_stats.py), runs the real `ept analyze` in this process, and
records every non-partial arm's bootstrap frontier share, its printed band and whether it is truly on the
frontier (the analysis' rule on the pseudo-true Elo and the true tokens). Printed: for each share threshold t,
the arms whose share is <= t and the share of them truly on the frontier (the `off` band is share <= OFF_SHARE);
likewise `on` (share >= ON_SHARE) truly off. Designs are seeded by --seed0 + i, so a threshold chosen on one
set of seeds can be checked on another (held out).

Run: python benchmarks/bench_offband.py [--designs 200] [--rounds 200] [--seed0 0] [--kind random|near]
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

from bench_coverage import run_cli, truth_for  # noqa: E402
from fixtures_stats import Arm, Experiment, true_frontier, write_experiment  # noqa: E402

THRESHOLDS = (0.0, 0.005, 0.01, 0.02, 0.05)


def design(seed: int, kind: str = "random") -> Experiment:
    """A random design: arm count, strengths, costs and family sizes drawn from `seed`. kind "near": the
    strengths rise with the cost (sorted) plus N(0, 0.1) jitter, so most arms are on the frontier or just off
    it (the hard case for an `off` label)."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(3, 9))
    theta = rng.uniform(0.0, 1.2, k)
    tokens = np.exp(rng.uniform(np.log(500), np.log(12000), k))
    if kind == "near":
        theta, tokens = np.sort(theta) + rng.normal(0.0, 0.1, k), np.sort(tokens)
    arms = [Arm(f"s{i}", 1, float(theta[i]), float(round(tokens[i]))) for i in range(k)]
    fams = {f: int(rng.integers(30, 121)) for f in ("math", "code", "tool")[: int(rng.integers(2, 4))]}
    return Experiment(arms, fams)


def audit(seed: int, rounds: int, tmp: Path, kind: str) -> list[tuple[float, str, bool, float]]:
    """(frontier share, band, truly on) for each non-partial arm of one design."""
    exp = design(seed, kind)
    f = write_experiment(tmp / f"d{seed}.jsonl", exp, seed=seed)
    out = tmp / f"d{seed}"
    code = run_cli(["analyze", str(f), "--rounds", str(rounds), "--seed", str(seed), "--out", str(out),
                    "--no-plots"])  # fmt: skip
    if code != 0:
        raise SystemExit(f"design {seed}: ept analyze exited {code}")
    doc = json.loads((out / "report.json").read_text())
    shutil.rmtree(out)
    f.unlink()
    elo, tok = truth_for(exp, doc["family_weights"])
    arms = [r["arm"] for r in doc["table"]]
    front = true_frontier(np.array([elo[a] for a in arms]), np.array([tok[a] for a in arms]))
    e, t = np.array([elo[a] for a in arms]), np.array([tok[a] for a in arms])
    return [
        (float(r["frontier_prob"]), str(r["frontier_band"]), bool(front[i]), on_by(e, t, i))
        for i, r in enumerate(doc["table"])
        if r.get("frontier_prob") is not None and "partial" not in str(r["frontier_band"])
    ]


def on_by(elo: np.ndarray, tokens: np.ndarray, i: int) -> float:
    """How far arm i is truly on the frontier: its true Elo over the strongest other arm at most as costly
    (+inf for the cheapest; <= 0: off)."""
    other = [j for j in range(elo.size) if j != i and tokens[j] <= tokens[i]]
    return float(elo[i] - max(elo[j] for j in other)) if other else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--designs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--kind", choices=("random", "near"), default="random")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-offband-"))
    rows: list[tuple[float, str, bool, float]] = []
    t0 = time.process_time()
    try:
        for i in range(args.designs):
            rows += audit(args.seed0 + i, args.rounds, tmp, args.kind)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    share = np.array([r[0] for r in rows])
    on = np.array([r[2] for r in rows])
    band = [r[1] for r in rows]
    print(f"{args.designs} {args.kind} designs (seeds {args.seed0}..{args.seed0 + args.designs - 1}), {len(rows)} arms, "
          f"{args.rounds} rounds, {time.process_time() - t0:.0f} s CPU")  # fmt: skip
    print("| arms with share <= t | arms | truly on the frontier |")
    print("|---|---:|---:|")
    for t in THRESHOLDS:
        sel = share <= t + 1e-12
        print(f"| t = {t:.3f} | {sel.sum()} | {on[sel].mean():.1%} ({on[sel].sum()}/{sel.sum()}) |")
    off = np.array([b == "off" for b in band])
    onb = np.array([b == "on" for b in band])
    print(f"band `off`: truly on {on[off].mean():.1%} ({on[off].sum()}/{off.sum()})")
    margin = np.array([r[3] for r in rows])
    for eps in (5.0, 10.0):
        far = on & (margin > eps)
        print(
            f"band `off`: truly on by more than {eps:g} Elo {far[off].mean():.1%} ({far[off].sum()}/{off.sum()})"
        )
    print(f"band `on`: truly off {(~on[onb]).mean():.1%} ({(~on[onb]).sum()}/{onb.sum()})")


if __name__ == "__main__":
    main()
