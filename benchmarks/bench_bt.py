"""Speed of analysis.bt.fit_bt against two baselines timed in this same process.

1. K=5 arms, 20k comparisons: fit_bt vs a straightforward port of the seed's bt_fit (benchmarks/seed_bt.py:
   Python loop over comparisons, L-BFGS-B with numeric gradients). Target: >= 200x faster.
2. K=50 arms, 100k comparisons: fit_bt (from raw comparisons, aggregation and validation included) vs a
   minimal dense Newton on counts that are already aggregated. Target: within 3x.
3. K=200 and K=1,000 arms, every pair compared 100 times (a grid where all arms run every task): one
   fit_bt_counts vs the same dense reference, and one bootstrap fit batch (newton_batch on as many rounds as
   analysis.bootstrap.fit_batch_size allows) with its peak traced memory against the batch budget.

Run: python benchmarks/bench_bt.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from seed_bt import seed_bt_fit

from elo_per_token.analysis.bootstrap import _FIT_BUDGET, fit_batch_size
from elo_per_token.analysis.bt import fit_bt, fit_bt_counts, newton_batch


def simulate(rng: np.random.Generator, k: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    theta = rng.normal(0, 1, k)
    a = rng.integers(0, k, m)
    b = (a + rng.integers(1, k, m)) % k
    a_wins = rng.random(m) < 1 / (1 + np.exp(-(theta[a] - theta[b])))
    return theta, np.where(a_wins, a, b), np.where(a_wins, b, a)


def dense_newton_reference(wins: np.ndarray, l2: float = 1e-3, tol: float = 1e-9) -> np.ndarray:
    """Baseline: undamped Newton on a pre-aggregated K x K count matrix, nothing else."""
    k = wins.shape[0]
    n = wins + wins.T
    theta = np.zeros(k)
    for _ in range(100):
        p = 1 / (1 + np.exp(-(theta[:, None] - theta[None, :])))
        g = (n * p - wins).sum(1) + 2 * l2 * theta
        if np.max(np.abs(g)) <= tol * max(1.0, wins.sum()):
            break
        c = n * p * (1 - p)
        h = -c
        h[np.diag_indices(k)] = c.sum(1) + 2 * l2
        theta = theta - np.linalg.solve(h, g)
    return theta - theta.mean()


def dense_counts(rng: np.random.Generator, k: int, per_pair: int) -> np.ndarray:
    """Every pair of k arms compared per_pair times under a BT model."""
    theta = rng.normal(0, 1, k)
    p = 1 / (1 + np.exp(-(theta[:, None] - theta[None, :])))
    upper = np.triu(rng.binomial(per_pair, p).astype(float), 1)
    return upper + np.tril(per_pair - upper.T, -1)


def many_arms_rows(rng: np.random.Generator) -> None:
    import tracemalloc

    for k in (200, 1000):
        counts = dense_counts(rng, k, 100)
        t_ref = best_time(lambda c=counts: dense_newton_reference(c), 3)
        t_fit = best_time(lambda c=counts: fit_bt_counts(c), 3)
        diff = np.max(np.abs(dense_newton_reference(counts) - fit_bt_counts(counts).theta))
        batch = fit_batch_size(k)
        wins = np.broadcast_to(counts, (batch, k, k)).copy()
        tracemalloc.start()
        t0 = time.perf_counter()
        fit = newton_batch(wins)
        t_batch = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(
            f"[K={k:,}, every pair x100] fit_bt_counts: {t_fit:.3f} s   dense reference: {t_ref:.3f} s   ratio "
            f"{t_fit / t_ref:.2f}x   max |theta diff| {diff:.1e}\n"
            f"    bootstrap batch: {batch} rounds in {t_batch:.2f} s ({t_batch / batch:.3f} s/round, "
            f"{int(fit.n_iter.max())} Newton steps); peak traced memory {peak / 2**20:.0f} MiB "
            f"(inputs {wins.nbytes / 2**20:.0f} MiB, budget {_FIT_BUDGET / 2**20:.0f} MiB)"
        )


def best_time(fn, repeat: int) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    rng = np.random.default_rng(0)

    _, w, lo = simulate(rng, 5, 20_000)
    pairs = list(zip(w.tolist(), lo.tolist(), strict=True))
    t0 = time.perf_counter()
    seed_theta = seed_bt_fit(pairs, 5)
    t_seed = time.perf_counter() - t0
    t_fast = best_time(lambda: fit_bt(w, lo, 5), 50)
    ours = fit_bt(w, lo, 5)
    print(
        f"[K=5, 20k comparisons] seed port: {t_seed:.3f} s   fit_bt: {t_fast * 1e3:.3f} ms   "
        f"speed-up: {t_seed / t_fast:,.0f}x (target >= 200x)   max |theta diff|: "
        f"{np.max(np.abs(seed_theta - ours)):.1e}"
    )

    _, w, lo = simulate(rng, 50, 100_000)
    counts = np.zeros((50, 50))
    np.add.at(counts, (w, lo), 1.0)
    t_ref = best_time(lambda: dense_newton_reference(counts), 20)
    t_fast = best_time(lambda: fit_bt(w, lo, 50), 20)
    diff = np.max(np.abs(dense_newton_reference(counts) - fit_bt(w, lo, 50)))
    print(
        f"[K=50, 100k comparisons] dense Newton on pre-aggregated counts: {t_ref * 1e3:.2f} ms   "
        f"fit_bt from raw comparisons: {t_fast * 1e3:.2f} ms   ratio fit_bt/reference: "
        f"{t_fast / t_ref:.2f}x (target <= 3x)   max |theta diff|: {diff:.1e}"
    )
    t_counts = best_time(lambda: fit_bt_counts(counts), 20)
    print(
        f"[K=50, same pre-aggregated counts] fit_bt_counts: {t_counts * 1e3:.2f} ms   ratio vs reference: "
        f"{t_counts / t_ref:.2f}x (validation, line search and diagnostics included)"
    )
    many_arms_rows(rng)


if __name__ == "__main__":
    main()
