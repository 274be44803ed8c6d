"""Synthetic experiments of known truth for the statistics (issue 12): call logs + outcomes or judgments.

`write_experiment` writes JSONL that `ept analyze` reads (call records with usage, outcome or judgment
records), drawn from a known model:

- binary outcomes: arm a solves task t with probability sigmoid(theta_a - d_t), d_t ~ N(0, 1) per task.
  Comparisons are derived from scores (equal scores tie), so the Bradley-Terry theta the analysis
  estimates is NOT theta_a: ties shrink it. `pseudo_true_theta` gives the large-sample limit of the fit
  (expected scores integrated over the difficulty distribution), the right truth for coverage.
- judgments: one judgment per arm pair and task, P(a beats b) = sigmoid(theta_a - theta_b), no ties;
  the truth is theta itself.

Tokens per task are tokens_a * lognormal with mean exactly 1, so the true tokens per task is tokens_a.
Used by tests/analysis/test_stats_edges.py and benchmarks/bench_coverage.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ELO_SCALE = 400.0 / math.log(10.0)


@dataclass(frozen=True)
class Arm:
    strategy: str
    budget: int
    theta: float
    tokens: float

    @property
    def label(self) -> str:
        return f"{self.strategy}@{self.budget}"


@dataclass
class Experiment:
    arms: list[Arm]
    tasks: dict[str, int]  # family -> number of tasks
    mode: str = "binary"  # or "judgment"
    missing: dict[str, set[str]] = field(default_factory=dict)  # family -> arm labels it never ran
    token_sd: float = 0.2  # lognormal sigma of tokens per task
    degrade: dict[str, float] = field(default_factory=dict)  # arm label -> theta drop (the "current" run)
    # Issue 25: arm label -> share of each family's hardest tasks on which its outcome has `score: null`
    # (missing not at random); family -> arm label -> theta shift in that family (family x arm interaction).
    null_hard: dict[str, float] = field(default_factory=dict)
    interaction: dict[str, dict[str, float]] = field(default_factory=dict)
    # Issue 37: arm label -> (probability, factor): a task's reply is `factor` times longer with that
    # probability (a rare very long reply); the true tokens per task is tokens * (1 + p (factor - 1)).
    heavy: dict[str, tuple[float, float]] = field(default_factory=dict)

    def true_tokens(self, arm: Arm) -> float:
        """The arm's true mean tokens per task (heavy tail included)."""
        p, factor = self.heavy.get(arm.label, (0.0, 1.0))
        return arm.tokens * (1.0 + p * (factor - 1.0))


def _records(exp: Experiment, rng: np.random.Generator, task_rng: np.random.Generator) -> list[dict]:
    rows: list[dict] = []
    for fam, n in exp.tasks.items():
        diff = task_rng.normal(0.0, 1.0, n)
        arms = [a for a in exp.arms if a.label not in exp.missing.get(fam, set())]
        shift = exp.interaction.get(fam, {})
        th = np.array([a.theta - exp.degrade.get(a.label, 0.0) + shift.get(a.label, 0.0) for a in arms])
        hard = np.argsort(np.argsort(-diff)) if n else np.zeros(0, dtype=int)  # 0 = the hardest task
        tok = np.array([a.tokens for a in arms]) * rng.lognormal(
            -(exp.token_sd**2) / 2, exp.token_sd, (n, len(arms))
        )
        for i, a in enumerate(arms):
            if a.label in exp.heavy:  # drawn after the common draws: other experiments' streams unchanged
                p_heavy, factor = exp.heavy[a.label]
                tok[:, i] *= np.where(rng.random(n) < p_heavy, factor, 1.0)
        if exp.mode == "binary":
            solved = rng.random((n, len(arms))) < 1 / (1 + np.exp(-(th[None, :] - diff[:, None])))
        else:
            ii, jj = np.triu_indices(len(arms), 1)
            a_wins = rng.random((n, ii.size)) < 1 / (1 + np.exp(-(th[ii] - th[jj])))
        for t in range(n):
            tid = f"{fam}-{t:04d}"
            for i, a in enumerate(arms):
                completion = round(float(tok[t, i]) * 0.2)
                rows.append({"task_id": tid, "family": fam, "strategy": a.strategy, "budget_n": a.budget,
                             "usage": {"prompt_tokens": round(float(tok[t, i])) - completion,
                                       "completion_tokens": completion}})  # fmt: skip
                if exp.mode == "binary":
                    lost = hard[t] < round(exp.null_hard.get(a.label, 0.0) * n)
                    rows.append({"kind": "outcome", "task_id": tid, "family": fam, "strategy": a.strategy,
                                 "budget_n": a.budget, "replicate": 0,
                                 "score": None if lost else float(solved[t, i])})  # fmt: skip
            if exp.mode == "judgment":
                for p, (i, j) in enumerate(zip(ii, jj, strict=True)):
                    rows.append({"kind": "judgment", "task_id": tid, "family": fam, "arm_a": arms[i].label,
                                 "arm_b": arms[j].label, "winner": "A" if a_wins[t, p] else "B"})  # fmt: skip
    return rows


def write_experiment(path: Path, exp: Experiment, seed: int, *, task_seed: int | None = None) -> Path:
    """One experiment as a JSONL file; task difficulties come from task_seed (default: seed)."""
    rng = np.random.default_rng(seed)
    task_rng = np.random.default_rng(seed if task_seed is None else task_seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in _records(exp, rng, task_rng)))
    return path


def pseudo_true_theta(theta: np.ndarray, mode: str = "binary", easiest: float = 1.0) -> np.ndarray:
    """Large-sample limit of the Bradley-Terry fit (mean 0). Binary outcomes: expected scores (win 1, tie
    1/2) integrated over d ~ N(0, 1) by Gauss-Hermite quadrature, then the fit on those expected counts;
    judgments: theta itself. easiest < 1: only the tasks below that quantile of difficulty (the tasks every
    arm answered when the hardest ones lack a score), by the midpoint rule in probability."""
    from scipy.stats import norm

    from elo_per_token.analysis.bt import fit_bt_counts

    theta = np.asarray(theta, dtype=float)
    if mode != "binary":
        return theta - theta.mean()
    if easiest < 1.0:
        x = norm.ppf((np.arange(2000) + 0.5) / 2000 * easiest)
        w = np.full(x.size, 1.0 / x.size)
    else:
        x, w = np.polynomial.hermite_e.hermegauss(80)
        w = w / w.sum()
    p = 1 / (1 + np.exp(-(theta[None, :] - x[:, None])))  # [nodes, K]
    # E[score of a vs b] = P(a solves, b not) + 1/2 P(same result)
    win = np.einsum("n,na,nb->ab", w, p, 1 - p)
    tie = np.einsum("n,na,nb->ab", w, p, p) + np.einsum("n,na,nb->ab", w, 1 - p, 1 - p)
    counts = win + tie / 2
    np.fill_diagonal(counts, 0.0)
    return fit_bt_counts(counts * 1000.0, l2=0.0).theta


def true_frontier(elo: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Not weakly dominated (the analysis' rule, applied to the truth)."""
    t_le = tokens[None, :] <= tokens[:, None]
    e_ge = elo[None, :] >= elo[:, None]
    strict = (tokens[None, :] < tokens[:, None]) | (elo[None, :] > elo[:, None])
    return ~np.any(t_le & e_ge & strict, axis=1)
