"""Stopping statistics of an adaptive sweep: pure functions on per-task matrices.

Data: `scores` and `tokens` are [T, K] arrays (T tasks seen so far in the sweep's random order, K arms), NaN
where an arm did not run the task (it had stopped, or the job failed); `task_weight` [T] is each task's weight
in the merged quality, w_f / pi_f (family weight over the family's share of the task pool), so the mean over a
stratified random draw of tasks estimates the family-weighted quantity.

Per pair of arms (i, j), on the tasks both ran:
  quality  q_ij = mean_t task_weight_t * sign(score_i - score_j)   (the win balance: the direction of the
                  Bradley-Terry comparison of i and j; ties count 0)
  tokens   c_ij = mean_t (tokens_i - tokens_j)

Decisions (the frontier of the report: an arm is off when another is at most as costly and at least as strong):
  off(i) when some arm j is confidently cheaper (c_ij's interval > 0) and confidently stronger (q_ji's > 0);
  on(i)  when every arm j not already off is confidently costlier (c_ji > 0) or confidently weaker (q_ij > 0)
         (an arm dominated by an off arm is dominated by that arm's dominator too, so off arms need no check);
  open   otherwise.

Honest intervals under adaptive stopping: every interval is looked at once per round, and the sweep stops on
what it sees. An error budget is spent across rounds (Bonferroni over the at most `looks` rounds, so each
interval holds at every round at once with probability >= 1 - alpha, whenever the sweep stops; with the <= 10
looks of a sweep this is tighter than a normal-mixture confidence sequence, z 2.77 against >= 3.03 at alpha
0.05), and a decision additionally spends alpha over the arm's 2 (K - 1) pair tests by Holm's step-down
(`holm_claims`; `assess` with `decision_z` is the flat Bonferroni split it improves on), so the chance that an
arm's decision is wrong is <= alpha. Intervals are normal intervals; the quality one adds two pseudo-observations at the bounds
(+m, -m) to its variance, so a run of ties is not read as certainty, and none is used before `min_tasks`.
See docs/sweep.md (adaptive sweeps) and benchmarks/bench_adaptive.py for the measured coverage.

Futility (`futile`): a claim (i confidently stronger / cheaper than j) is reachable when its conditional power
at the end of the grid, under the current estimate, is at least `min_power`: the pair's final mean is the
current one plus the remaining tasks' mean, N(current, se^2 n (N - n) / N^2) given the data so far, and the
claim holds at the end when that mean clears z x se n^(1/2) / N^(1/2), z the Holm step the final look would
test the claim at (`holm_step_z`: the flat Bonferroni split would call out of reach decisions the full grid
still makes). An open arm none of whose decisions
(off via some dominator, or on against every arm not off) is reachable is futile: even the full grid would
leave it open, so it stops as OPEN. Futility never makes a claim, so it cannot make a decision wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.stats import norm

from elo_per_token.analysis.merge import ELO_SCALE

__all__ = [
    "Assessment",
    "PairStats",
    "assess",
    "assess_holm",
    "decide",
    "decision_z",
    "elo_from_balance",
    "futile",
    "holm_claims",
    "holm_step_z",
    "pair_stats",
    "reachable_needs",
    "report_z",
    "true_frontier",
]

ON, OFF, OPEN = "on", "off", "open"


def report_z(alpha: float, looks: int) -> float:
    """z of an interval that holds at all `looks` rounds at once with probability >= 1 - alpha (Bonferroni).

    Args:
        alpha: The error budget (e.g. 0.05).
        looks: The number of rounds the sweep may stop at (Bonferroni over them).
    """
    if not (0 < alpha < 1) or looks < 1:
        raise ValueError(f"need 0 < alpha < 1 and looks >= 1, got {alpha}, {looks}")
    return float(norm.ppf(1 - alpha / (2 * looks)))


def decision_z(alpha: float, looks: int, arms: int) -> float:
    """z of the pair intervals a decision uses: alpha split over looks and the arm's 2 (K - 1) intervals.

    Args:
        alpha: The error budget (e.g. 0.05).
        looks: The number of rounds the sweep may stop at (Bonferroni over them).
        arms: K, the number of arms.
    """
    return report_z(alpha, looks * max(1, 2 * (arms - 1)))


@dataclass(frozen=True)
class PairStats:
    """[K, K] matrices: mean, half-width at z = 1 (the standard error) and tasks in common, for quality
    (q[i, j]: i's win balance against j) and tokens (c[i, j]: i's tokens minus j's per task)."""

    q: NDArray[np.float64]
    q_se: NDArray[np.float64]
    c: NDArray[np.float64]
    c_se: NDArray[np.float64]
    n: NDArray[np.int64]


def _mean_se(x: NDArray[np.float64], m: float | None) -> tuple[float, float]:
    """Mean and standard error of x; with m, two pseudo-observations +-m enter the variance (not the mean)."""
    n = x.size
    mean = float(x.mean())
    ss = float(((x - mean) ** 2).sum())
    if m is not None:
        ss += 2 * m * m
        return mean, math.sqrt(ss / (n + 1) / n)
    return mean, math.sqrt(ss / max(n - 1, 1) / n)


def pair_stats(
    scores: NDArray[np.float64], tokens: NDArray[np.float64], task_weight: NDArray[np.float64]
) -> PairStats:
    """Win balance and token difference of every pair of arms on the tasks both ran (module docstring).

    Args:
        scores: [T, K] score of each arm on each task (NaN: not run).
        tokens: [T, K] tokens of each arm on each task (NaN: not run).
        task_weight: [T] weight of each task (its family's weight over its task count).
    """
    s = np.asarray(scores, dtype=float)
    t = np.asarray(tokens, dtype=float)
    w = np.asarray(task_weight, dtype=float)
    k = s.shape[1]
    seen = ~np.isnan(s) & ~np.isnan(t)
    m = float(w.max()) if w.size else 1.0
    out = {name: np.full((k, k), np.nan) for name in ("q", "q_se", "c", "c_se")}
    n = np.zeros((k, k), dtype=np.int64)
    for i in range(k):  # K^2 / 2 pairs: a loop over arms, vectorised over tasks
        for j in range(i + 1, k):
            both = seen[:, i] & seen[:, j]
            nn = int(both.sum())
            n[i, j] = n[j, i] = nn
            if nn == 0:
                continue
            x = w[both] * np.sign(s[both, i] - s[both, j])
            q, q_se = _mean_se(x, m)
            c, c_se = _mean_se(t[both, i] - t[both, j], None)
            out["q"][i, j], out["q"][j, i] = q, -q
            out["c"][i, j], out["c"][j, i] = c, -c
            out["q_se"][i, j] = out["q_se"][j, i] = q_se
            out["c_se"][i, j] = out["c_se"][j, i] = c_se
    return PairStats(out["q"], out["q_se"], out["c"], out["c_se"], n)


@dataclass(frozen=True)
class Assessment:
    """Per arm: status (on/off/open) and, for off arms, the arm that dominates it; per pair: which claims are
    confident (stronger[i, j]: i confidently stronger than j; cheaper[i, j]: i confidently cheaper)."""

    status: list[str]
    dominated_by: list[int | None]
    stronger: NDArray[np.bool_]
    cheaper: NDArray[np.bool_]
    stats: PairStats


def assess(stats: PairStats, z: float, min_tasks: int) -> Assessment:
    """Frontier decisions from pair intervals at `z` (module docstring); pairs with fewer than `min_tasks`
    tasks in common claim nothing.

    Args:
        stats: The pair statistics (pair_stats).
        z: The z of the pair intervals.
        min_tasks: Pairs with fewer tasks in common claim nothing.
    """
    enough = stats.n >= max(2, min_tasks)
    with np.errstate(invalid="ignore"):
        stronger = enough & (stats.q - z * stats.q_se > 0)
        cheaper = enough & (-stats.c - z * stats.c_se > 0)  # c[i, j] < 0 confidently: i cheaper
    return decide(stats, stronger, cheaper)


def _two_sided_p(mean: NDArray[np.float64], se: NDArray[np.float64]) -> NDArray[np.float64]:
    """Normal two-sided p-value of mean != 0; a zero standard error is certainty (p 0, or 1 at mean 0), as
    the interval rule reads it."""
    m, e = np.nan_to_num(mean, nan=0.0), np.nan_to_num(se, nan=np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        zz = np.where(e > 0, np.abs(m) / np.where(e > 0, e, 1.0), np.where(m != 0, np.inf, 0.0))
    out: NDArray[np.float64] = 2 * norm.sf(zz)
    return out


def _holm_rejections(
    stats: PairStats, alpha: float, looks: int, min_tasks: int
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """(rej_q, rej_c) [K, K]: row i holds what arm i's own Holm family (its 2 (K - 1) tests, p-values times
    `looks`) rejects, direction not yet applied."""
    k = stats.q.shape[0]
    enough = stats.n >= max(2, min_tasks)
    p_q = np.where(enough, np.minimum(1.0, looks * _two_sided_p(stats.q, stats.q_se)), 1.0)
    p_c = np.where(enough, np.minimum(1.0, looks * _two_sided_p(stats.c, stats.c_se)), 1.0)
    rej_q, rej_c = np.zeros((k, k), dtype=bool), np.zeros((k, k), dtype=bool)
    for i in range(k):
        others = [j for j in range(k) if j != i]
        ps = np.concatenate([p_q[i, others], p_c[i, others]])
        m = ps.size
        ok = np.zeros(m, dtype=bool)
        for rank, h in enumerate(np.argsort(ps, kind="stable")):
            if ps[h] > alpha / (m - rank):
                break
            ok[h] = True
        rej_q[i, others], rej_c[i, others] = ok[: len(others)], ok[len(others) :]
    return rej_q, rej_c


def holm_claims(
    stats: PairStats, alpha: float, looks: int, min_tasks: int
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """(stronger, cheaper) [K, K]: the claims each arm's decision may rest on, by Holm's step-down over the
    arm's 2 (K - 1) pair tests, each p-value multiplied by `looks` (Bonferroni over the rounds, valid at
    every round whenever the sweep stops). A claim about the pair (i, j) is made only when both arm i's and
    arm j's families make it, so every decision rests on its own arm's family alone: P(a wrong decision for
    arm i) <= alpha, as with the Bonferroni split over all 2 (K - 1) tests (which Holm's first step is: it
    never claims less), while tests already settled (token steps settle within a few tasks) stop costing
    the budget of the ones still open.

    Args:
        stats: The pair statistics (pair_stats).
        alpha: The error budget (e.g. 0.05).
        looks: The number of rounds the sweep may stop at (Bonferroni over them).
        min_tasks: Pairs with fewer tasks in common claim nothing.
    """
    rej_q, rej_c = _holm_rejections(stats, alpha, looks, min_tasks)
    both_q, both_c = rej_q & rej_q.T, rej_c & rej_c.T
    with np.errstate(invalid="ignore"):
        return both_q & (stats.q > 0), both_c & (stats.c < 0)


def holm_step_z(stats: PairStats, alpha: float, looks: int, min_tasks: int) -> NDArray[np.float64]:
    """[K, K] z a still-open claim about the pair (i, j) must clear at the end of the grid: the Holm step it
    is tested at when the tests each family rejects now stay rejected and it is the next to go (alpha over
    looks x the open tests left in the stricter of the two families). The final look decides with this z,
    not with the flat Bonferroni split over all 2 (K - 1) tests (decision_z), so conditional power computed
    at decision_z calls decisions out of reach that the full grid still makes.

    Args:
        stats: The pair statistics (pair_stats).
        alpha: The error budget (e.g. 0.05).
        looks: The number of rounds the sweep may stop at (Bonferroni over them).
        min_tasks: Pairs with fewer tasks in common claim nothing.
    """
    rej_q, rej_c = _holm_rejections(stats, alpha, looks, min_tasks)
    k = stats.q.shape[0]
    left = np.maximum(1, max(1, 2 * (k - 1)) - rej_q.sum(axis=1) - rej_c.sum(axis=1))
    m = np.maximum(left[:, None], left[None, :])
    out: NDArray[np.float64] = norm.ppf(1 - alpha / (2 * looks * m))
    return out


def assess_holm(stats: PairStats, alpha: float, looks: int, min_tasks: int) -> Assessment:
    """Frontier decisions from the claims of holm_claims (the rule of `assess`, a sharper error budget).

    Args:
        stats: The pair statistics (pair_stats).
        alpha: The error budget (e.g. 0.05).
        looks: The number of rounds the sweep may stop at (Bonferroni over them).
        min_tasks: Pairs with fewer tasks in common claim nothing.
    """
    stronger, cheaper = holm_claims(stats, alpha, looks, min_tasks)
    return decide(stats, stronger, cheaper)


def decide(stats: PairStats, stronger: NDArray[np.bool_], cheaper: NDArray[np.bool_]) -> Assessment:
    """Off / on / open from the confident claims (module docstring)."""
    k = stats.q.shape[0]
    status = [OPEN] * k
    dominated_by: list[int | None] = [None] * k
    for i in range(k):
        dom = [j for j in range(k) if j != i and cheaper[j, i] and stronger[j, i]]
        if dom:
            status[i], dominated_by[i] = OFF, dom[0]
    for i in range(k):
        if status[i] == OFF:
            continue
        if all(cheaper[i, j] or stronger[i, j] for j in range(k) if j != i and status[j] != OFF):
            status[i] = ON
    return Assessment(status, dominated_by, stronger, cheaper, stats)


def pair_done(a: Assessment, i: int, j: int) -> bool:
    """Whether the pair (i, j) says all it needs to about i: j cannot dominate i, or j confidently does.

    Args:
        a: The assessment.
        i: The arm's index.
        j: The other arm's index.
    """
    return bool(a.cheaper[i, j] or a.stronger[i, j] or (a.cheaper[j, i] and a.stronger[j, i]))


def needs_data(
    a: Assessment,
    width_ok: list[bool] | None = None,
    futile_: list[bool] | None = None,
    wants: NDArray[np.bool_] | None = None,
) -> list[bool]:
    """Which arms still receive tasks: open arms, and settled arms whose comparison an open arm still needs
    (an on-arm that an open arm is not yet resolved against), or an on-arm whose ΔElo-per-1k step is not yet
    resolved to the stated width (width_ok[i] False). Off arms stop: no decision needs them (assess). A futile
    open arm (futile_[i]) counts as settled: it runs only while another open arm still needs it; with
    `wants` (reachable_needs) "needs" is only a comparison that can still settle that arm's decision.

    Args:
        a: The assessment.
        width_ok: Per arm: its ΔElo-per-1k step is resolved to the stated width (None: no width asked).
        futile_: Per arm: no decision is reachable by the end of the grid (futile; None: not checked).
        wants: [K, K] pairs an open arm still needs data from (reachable_needs; None: every unresolved pair).
    """
    k = len(a.status)
    fut = futile_ if futile_ is not None else [False] * k
    open_ = [s == OPEN and not f for s, f in zip(a.status, fut, strict=True)]
    out = []
    for i in range(k):
        if open_[i]:
            out.append(True)
        elif a.status[i] == OFF:
            out.append(False)
        else:
            wanted = any(
                open_[j] and (bool(wants[j, i]) if wants is not None else not pair_done(a, j, i))
                for j in range(k)
                if j != i
            )
            width_open = a.status[i] == ON and width_ok is not None and not width_ok[i]
            out.append(wanted or width_open)
    return out


def elo_from_balance(balance: NDArray[np.float64] | float) -> NDArray[np.float64]:
    """ΔElo of a win balance b = P(win) - P(loss) read as a two-arm Bradley-Terry comparison (ties as half a
    win each): P = (1 + b) / 2, ΔElo = ELO_SCALE * logit(P), clipped at |b| <= 0.999.

    Args:
        balance: Win balance P(win) - P(loss), in [-1, 1].
    """
    b = np.clip(np.asarray(balance, dtype=float), -0.999, 0.999)
    p = (1 + b) / 2
    out: NDArray[np.float64] = ELO_SCALE * np.log(p / (1 - p))
    return out


def step_per_1k(stats: PairStats, i: int, j: int, z: float) -> tuple[float, float, float] | None:
    """ΔElo per 1k tokens of arm i over the cheaper arm j with an interval at z (the box of the two intervals:
    conservative); None while the token step's interval includes 0.

    Args:
        stats: The pair statistics (pair_stats).
        i: The more costly arm's index.
        j: The cheaper arm's index.
        z: The z of the interval.
    """
    c, c_se, q, q_se = stats.c[i, j], stats.c_se[i, j], stats.q[i, j], stats.q_se[i, j]
    if not (np.isfinite(c) and c - z * c_se > 0):
        return None
    d_lo, d, d_hi = (float(v) for v in elo_from_balance(np.array([q - z * q_se, q, q + z * q_se])))
    t_lo, t_hi = c - z * c_se, c + z * c_se
    lo = min(d_lo / t_lo, d_lo / t_hi) * 1000
    hi = max(d_hi / t_lo, d_hi / t_hi) * 1000
    return lo, d / c * 1000, hi


def true_frontier(tokens: NDArray[np.float64], quality: NDArray[np.float64]) -> NDArray[np.float64]:
    """The frontier from exact per-arm quantities: tokens [K] and a pairwise win-balance matrix [K, K]
    (quality[i, j] > 0: i stronger). Off when another arm is at most as costly and at least as strong, one of
    the two strictly. Used by the benchmark's known truth.

    Args:
        tokens: [K] exact tokens per task.
        quality: [K, K] exact win balance (quality[i, j] > 0: i stronger).
    """
    t = np.asarray(tokens, dtype=float)
    q = np.asarray(quality, dtype=float)
    k = t.size
    on = np.ones(k, dtype=bool)
    for i in range(k):
        for j in range(k):
            if i != j and t[j] <= t[i] and q[j, i] >= 0 and (t[j] < t[i] or q[j, i] > 0):
                on[i] = False
    return on


def claim_power(
    mean: NDArray[np.float64],
    se: NDArray[np.float64],
    n: NDArray[np.int64],
    n_end: NDArray[np.float64],
    z: float | NDArray[np.float64],
) -> NDArray[np.float64]:
    """Conditional power of the claim `mean > 0 confidently at z` once the pair has `n_end` tasks, given
    `n` now (module docstring); 1 where already confident, 0 where no more data can come and it is not.
    NaN means (no tasks in common) get power 1: nothing is known, so nothing is ruled out.

    Args:
        mean: [K, K] current means of the claim's statistic.
        se: [K, K] their standard errors.
        n: [K, K] tasks in common now.
        n_end: [K, K] tasks in common at the end of the grid.
        z: The z each interval is drawn at (one z, or [K, K] per pair).
    """
    m, e = np.asarray(mean, dtype=float), np.asarray(se, dtype=float)
    nn, ne = (
        np.asarray(n, dtype=float),
        np.maximum(np.asarray(n_end, dtype=float), np.asarray(n, dtype=float)),
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        se_end = e * np.sqrt(nn / ne)
        sd_rest = e * np.sqrt(nn * (ne - nn)) / ne
        gap = m - z * se_end
        power = np.where(sd_rest > 0, norm.cdf(gap / np.where(sd_rest > 0, sd_rest, 1.0)), (gap > 0) * 1.0)
    unknown = ~np.isfinite(m) | ~np.isfinite(e) | (nn < 2)
    out: NDArray[np.float64] = np.where(unknown & (ne > nn), 1.0, np.nan_to_num(power, nan=0.0))
    return out


def futile(
    a: Assessment, n_end: NDArray[np.float64], z: float | NDArray[np.float64], min_power: float
) -> list[bool]:
    """Per arm: open, and neither off nor on is reachable by the end of the grid (module docstring).
    n_end[i, j]: the tasks pair (i, j) will have in common at the end (its n now when either arm stopped).

    Args:
        a: The current assessment.
        n_end: [K, K] tasks each pair will have in common at the end of the grid.
        z: The z each interval is drawn at (one z, or [K, K] per pair).
        min_power: The conditional power below which a decision counts as out of reach.
    """
    return reachable_needs(a, n_end, z, min_power)[0]


def reachable_needs(
    a: Assessment, n_end: NDArray[np.float64], z: float | NDArray[np.float64], min_power: float
) -> tuple[list[bool], NDArray[np.bool_]]:
    """(futile per arm, wants [K, K]): wants[i, j] when open arm i has a reachable way to a decision that
    still needs data from the pair (i, j) — every unresolved pair for on, the reachable dominators for off —
    so an arm runs for another only while that comparison can still settle something. z: one z, or [K, K]
    per pair (holm_step_z: the z the final look tests each claim at).

    Args:
        a: The current assessment.
        n_end: [K, K] tasks each pair will have in common at the end of the grid.
        z: The z each interval is drawn at (one z, or [K, K] per pair).
        min_power: The conditional power below which a decision counts as out of reach.
    """
    st = a.stats
    strong = a.stronger | (claim_power(st.q, st.q_se, st.n, n_end, z) >= min_power)
    cheap = a.cheaper | (claim_power(-st.c, st.c_se, st.n, n_end, z) >= min_power)
    k = len(a.status)
    out = []
    wants = np.zeros((k, k), dtype=bool)
    for i in range(k):
        if a.status[i] != OPEN:
            out.append(False)
            continue
        others = [j for j in range(k) if j != i]
        doms = [j for j in others if cheap[j, i] and strong[j, i]]
        live = [j for j in others if a.status[j] != OFF]
        can_on = all(cheap[i, j] or strong[i, j] for j in live)
        out.append(not (doms or can_on))
        for j in doms:
            wants[i, j] = True
        if can_on:
            for j in live:
                wants[i, j] |= not pair_done(a, i, j)
    return out, wants


def projected_interval(st: PairStats, i: int, j: int, n_end: int, z: float) -> tuple[float, float]:
    """The win balance of i over j projected to `n_end` tasks: the current mean +- z x se at the end.

    Args:
        st: The pair statistics (pair_stats).
        i: An arm's index.
        j: The other arm's index.
        n_end: The tasks in common to project to.
        z: The z of the interval.
    """
    half = z * float(st.q_se[i, j]) * math.sqrt(st.n[i, j] / max(n_end, 1))
    return float(st.q[i, j]) - half, float(st.q[i, j]) + half
