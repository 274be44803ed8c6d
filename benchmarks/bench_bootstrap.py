"""Speed of analysis.bootstrap.bootstrap: 1000 rounds on 5 arms x 3 families x 2,000 tasks.

Target: < 5 s of CPU (process time, all threads). For scale, a straightforward baseline timed in the
same process (rebuild each resampled comparison list, fit_bt per family, nanmean tokens) is run on a few
rounds and extrapolated to 1000.

Run: python benchmarks/bench_bootstrap.py
"""

from __future__ import annotations

import time

import numpy as np

from elo_per_token.analysis.bootstrap import PairData, bootstrap
from elo_per_token.analysis.bt import fit_bt
from elo_per_token.analysis.merge import merge_thetas, theta_to_elo

K, FAMILIES, TASKS_PER_FAMILY, ROUNDS = 5, 3, 2000, 1000


def make_data(rng: np.random.Generator) -> PairData:
    """Every task compares all 10 pairs once (60k comparisons); 10% ties; tokens grow with the arm."""
    t = FAMILIES * TASKS_PER_FAMILY
    fam = np.repeat(np.arange(FAMILIES), TASKS_PER_FAMILY)
    truth = rng.normal(0, 0.5, (FAMILIES, K))
    ii, jj = np.triu_indices(K, 1)
    task = np.repeat(np.arange(t), ii.size)
    a, b = np.tile(ii, t), np.tile(jj, t)
    th = truth[fam[task]]
    rows = np.arange(a.size)
    a_wins = rng.random(a.size) < 1 / (1 + np.exp(-(th[rows, a] - th[rows, b])))
    tie = rng.random(a.size) < 0.1
    win, lose = np.where(a_wins, a, b), np.where(a_wins, b, a)
    return PairData(
        task_family=fam,
        task=np.concatenate([task[~tie], task[tie], task[tie]]),
        winner=np.concatenate([win[~tie], a[tie], b[tie]]),
        loser=np.concatenate([lose[~tie], b[tie], a[tie]]),
        weight=np.concatenate([np.ones((~tie).sum()), np.full(2 * tie.sum(), 0.5)]),
        n_arms=K,
        families=["math", "code", "tool_use"],
        task_tokens=rng.gamma(4.0, 300.0, (t, K)) * np.array([1, 4, 8, 16, 34]),
    )


def naive_rounds(data: PairData, weights: np.ndarray, rounds: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    order = np.argsort(data.task, kind="stable")
    starts = np.searchsorted(data.task[order], np.arange(data.n_tasks + 1))
    w = dict(zip(data.families, weights / weights.sum(), strict=True))
    out = np.empty((rounds, data.n_arms))
    for r in range(rounds):
        thetas, toks = {}, []
        for f, name in enumerate(data.families):
            tasks_f = np.nonzero(data.task_family == f)[0]
            picked = rng.choice(tasks_f, size=tasks_f.size, replace=True)
            rows = np.concatenate([order[starts[t] : starts[t + 1]] for t in picked])
            thetas[name] = fit_bt(data.winner[rows], data.loser[rows], data.n_arms, weights=data.weight[rows])
            toks.append(data.task_tokens[picked])
        out[r] = theta_to_elo(merge_thetas(thetas, w), 0)
        np.nanmean(np.concatenate(toks), axis=0)
    return out


def main() -> None:
    data = make_data(np.random.default_rng(0))
    weights = np.array([0.4, 0.4, 0.2])
    bootstrap(data, weights, anchor=0, rounds=10, seed=1)  # warm-up (imports, first-call costs)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    res = bootstrap(data, weights, anchor=0, rounds=ROUNDS, seed=1)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    print(
        f"bootstrap: {ROUNDS} rounds, {K} arms x {FAMILIES} families x {TASKS_PER_FAMILY} tasks "
        f"({data.task.size} comparison rows): CPU {cpu:.2f} s, wall {wall:.2f} s (target < 5 s CPU); "
        f"failed rounds: {res.failed_rounds}"
    )
    n_naive = 10
    cpu0 = time.process_time()
    naive_rounds(data, weights, n_naive, seed=1)
    naive = (time.process_time() - cpu0) / n_naive * ROUNDS
    print(
        f"baseline (explicit resample + fit_bt per round), extrapolated from {n_naive} rounds: "
        f"CPU {naive:.1f} s for {ROUNDS} rounds -> ratio {naive / cpu:.0f}x"
    )


if __name__ == "__main__":
    main()
