"""ε-relaxed frontier identification: every arm classified on, off, or within ε of the frontier.

The margin: `epsilon_elo` (ΔElo, read as a win balance b_ε = tanh(ε / (2 ELO_SCALE)), the balance whose
two-arm Bradley-Terry reading is ε, as the report's ΔElo is) and `epsilon_tokens` (a share of the arm's own
tokens). Arm j **ε-dominates** arm i when j is stronger by more than b_ε AND cheaper by more than
epsilon_tokens x i's tokens per task. An arm no arm ε-dominates is **within ε of the frontier**: shifting it
by the margin (ε stronger, ε_tokens cheaper) puts it on the frontier, so choosing it over the frontier costs
at most the margin — the ε-Pareto set of multi-objective bandits (Auer et al. 2016; Kone, Kaufmann &
Richert 2023, ε-relaxed Pareto set identification).

Decisions (each a claim about the population the tasks are drawn from; intervals one-sided normal):
  off     some arm j confidently cheaper and confidently stronger (both claims at off_z);
  on      for every arm j not off: i confidently cheaper or confidently stronger than j (at eps_z);
  within  for every arm j not off: i's on claim against j, or q_ji < b_ε confidently (j not stronger by more
          than the margin), or mean((1 - ε_tokens) tokens_i - tokens_j) < 0 confidently (i not costlier by
          more than the margin) (at eps_z);
  open    otherwise.
A decision is wrong when on is claimed for a dominated arm, off for an undominated one, or within for an arm
some arm ε-dominates (`eps_truth`, `eps_wrong`).

Error budget per arm, alpha (the sampling rule of Kone, Kaufmann & Richert's APE stops on the same kind of
claims), split alpha_on = ON_SHARE x alpha for on/within and alpha_off = the rest for off: on and within are
intersection-union claims — every arm j must lose its pair test — so the claim is wrong only if the one arm
that truly (ε-)dominates i loses its test falsely: each pair test runs at the whole alpha_on split over its two
routes (quality, tokens), with no split over the K - 1 other arms. Off is a union claim (one dominator
suffices), so alpha_off is split over the K - 1 arms. Off can be wrong only for an arm truly on, on/within
only for one truly dominated, so per arm P(wrong) <= alpha_on + alpha_off = alpha (alpha_off is paid again by
a dominated arm when its true on-frontier dominator is wrongly skipped as off). Any split keeps the bound;
on/within get the larger share because they are what classifies close arms. Every test is looked at after each decision round: the
boundary over the looks is Pocock's constant one (coordinator/adaptive/boundary.py), exact for the walk of a pair's mean,
or Bonferroni over the looks when the looks' times are not given. With no margin (both ε 0) there is no ε
claim and the rule is exactly the strict one (sequential.holm_claims, Holm over the arm's 2 (K - 1) tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.stats import norm

from elo_per_token.analysis.merge import ELO_SCALE
from elo_per_token.coordinator.adaptive.boundary import look_z
from elo_per_token.coordinator.adaptive.sequential import (
    OFF,
    ON,
    OPEN,
    Assessment,
    PairStats,
    claim_power,
    decide,
    elo_from_balance,
    holm_claims,
    holm_step_z,
    pair_done,
)

__all__ = [
    "WITHIN",
    "EpsAssessment",
    "Margin",
    "assess_eps",
    "auto_epsilon_elo",
    "eps_balance",
    "eps_needs",
    "eps_truth",
    "eps_wrong",
    "eps_z",
    "eps_z_tokens",
    "rel_token_stats",
]

WITHIN = "within"

# The share of alpha the on and within claims get; off gets the rest (module docstring: an arm's decision is
# wrong with probability <= alpha_on + alpha_off whatever the split). On/within claims are what classifies
# close arms; off claims are needed only for arms far off the frontier, which are cheap to prove even at a
# smaller share (benchmarks/bench_adaptive.py --issue41 at ε = 40: 0.5 -> 0.75 cut the token share of the
# dominated and close-neighbour designs from 54% to 51% and 49%, with every-arm-classified unchanged; 0.9
# classified the dominated design in 82.5% of replays instead of 90%).
ON_SHARE = 0.75
# The share of a pair's on/within budget its quality route gets (i stronger than j, j not stronger by more
# than the margin); the token route (i cheaper, i not costlier by more than the margin) gets the rest. Any
# split keeps the pair's bound (the two routes' false claims add up to at most alpha_on). Quality is the slow
# route (a win balance's per-task spread is large against the gaps that matter); token differences between
# arms settle in a few tasks even at the larger z (docs/statistics.md). At ε = 50 (bench_adaptive --issue41,
# 60 replays) 0.5 -> 0.9 cut the dominated and close-neighbour designs' mean share from 35.9% / 36.3% to
# 32.2% / 34.0%, every arm classified in 100%, no error.
Q_SHARE = 0.9


@dataclass(frozen=True)
class Margin:
    """The stated margin: elo (ΔElo, >= 0) and tokens (a share of the arm's tokens, in [0, 1)); auto: elo is
    the smallest the full grid of `tasks` tasks settles at error `alpha` (auto_epsilon_elo)."""

    elo: float = 0.0
    tokens: float = 0.0
    auto: bool = False
    tasks: int = 0
    alpha: float = 0.05

    def describe(self) -> str:
        """The margin as the report and the sweep's first line state it."""
        if not self.active:
            return "no margin (on/off only)"
        text = f"margin {self.elo:.0f} Elo / {self.tokens:.0%} tokens"
        if self.auto:
            text += f" (auto: the smallest the full grid of {self.tasks} tasks settles at δ={self.alpha:.0%})"
        return text

    @property
    def active(self) -> bool:
        return self.elo > 0 or self.tokens > 0

    @property
    def balance(self) -> float:
        return eps_balance(self.elo)


def eps_balance(eps_elo: float) -> float:
    """The win balance whose two-arm Bradley-Terry reading is eps_elo (inverse of elo_from_balance)."""
    return math.tanh(max(0.0, eps_elo) / (2 * ELO_SCALE))


def auto_epsilon_elo(
    task_weight: NDArray[np.float64], alpha: float, looks: int, times: tuple[float, ...] | None = None
) -> float:
    """The smallest ΔElo margin the full grid settles at error alpha, from the design alone (no data yet):
    at the grid's end two equally strong arms are shown within the margin of each other (q < b_ε at the on
    claims' z, eps_z) with probability 1 - alpha, when every task is decided (a win or a loss: the widest
    spread a task's win balance can have, sqrt(mean w^2) with the family weights w). So
    b_ε = (eps_z + z_{1-alpha}) sqrt(mean w^2 / T), read as ΔElo. A margin below it leaves close pairs open even
    on the full grid; above it the sweep classifies every arm earlier (benchmarks/bench_adaptive.py --issue41)."""
    w = np.asarray(task_weight, dtype=float)
    if w.size == 0:
        return 0.0
    spread = math.sqrt(float(np.mean(w * w)))
    z = eps_z(alpha, looks, 2, times) + float(norm.ppf(1 - alpha))
    b = min(z * spread / math.sqrt(w.size), 0.999)
    return float(elo_from_balance(b))


def rel_token_stats(
    tokens: NDArray[np.float64], share: float
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """(mean, se, n) [K, K]: d[i, j] = mean over the tasks both ran of (1 - share) tokens_i - tokens_j; d < 0
    confidently means i costs less than (1 - share)^-1 x j's tokens, i.e. is not costlier by more than the
    margin. Asymmetric: d[i, j] != -d[j, i] when share > 0."""
    t = np.asarray(tokens, dtype=float)
    k = t.shape[1]
    seen = ~np.isnan(t)
    mean, se = np.full((k, k), np.nan), np.full((k, k), np.nan)
    n = np.zeros((k, k), dtype=np.int64)
    for i in range(k):
        for j in range(k):
            if i == j:
                continue
            both = seen[:, i] & seen[:, j]
            nn = int(both.sum())
            n[i, j] = nn
            if nn == 0:
                continue
            x = (1 - share) * t[both, i] - t[both, j]
            mean[i, j] = float(x.mean())
            se[i, j] = float(x.std(ddof=1) / math.sqrt(nn)) if nn > 1 else 0.0
    return mean, se, n


@dataclass(frozen=True)
class EpsAssessment(Assessment):
    """An Assessment with the ε claims: q_below[j, i] (j confidently not stronger than i by more than b_ε) and
    tok_close[i, j] (i confidently not costlier than j by more than the token margin)."""

    q_below: NDArray[np.bool_] | None = None
    tok_close: NDArray[np.bool_] | None = None
    d: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]] | None = None  # rel_token_stats
    margin: Margin = Margin()
    dom: NDArray[np.bool_] | None = None  # dom[j, i]: j confidently cheaper and stronger than i (at off_z)


def eps_z(alpha: float, looks: int, k: int, times: tuple[float, ...] | None = None) -> float:
    """One-sided z of the claims an on or within decision rests on: alpha_on (ON_SHARE x alpha) for the
    decision, split over the pair's 2 routes (quality, tokens), over the looks. No split over the other arms: an on or within claim
    needs every pair's claim at once (an intersection-union test), so it is wrong only when the one arm that
    truly dominates falsely loses its pair test (module docstring). With the looks' information `times`
    the boundary over the looks is exact (boundary.look_z), else Bonferroni over `looks`."""
    return _one_sided_z(alpha * ON_SHARE * Q_SHARE, looks, times)


def eps_z_tokens(alpha: float, looks: int, k: int, times: tuple[float, ...] | None = None) -> float:
    """One-sided z of the token route of an on or within claim (i cheaper than j; i not costlier than j by more
    than the token margin): the rest of alpha_on after the quality route's share (eps_z)."""
    return _one_sided_z(alpha * ON_SHARE * (1 - Q_SHARE), looks, times)


def off_z(alpha: float, looks: int, k: int, times: tuple[float, ...] | None = None) -> float:
    """One-sided z of the claims an off decision rests on (j confidently cheaper and stronger than i): alpha_off
    ((1 - ON_SHARE) x alpha) over the K - 1 arms that could be claimed to dominate (a union: any one false claim is a wrong off), over
    the looks as eps_z."""
    return _one_sided_z(alpha * (1 - ON_SHARE) / max(1, k - 1), looks, times)


def _one_sided_z(level: float, looks: int, times: tuple[float, ...] | None) -> float:
    if not (0 < level < 0.5) or looks < 1:
        raise ValueError(f"need 0 < alpha < 1 and looks >= 1, got {level}, {looks}")
    if times is not None:
        return look_z(level, times)
    return float(norm.ppf(1 - level / looks))


def _claims(
    mean: NDArray[np.float64],
    se: NDArray[np.float64],
    z: float,
    enough: NDArray[np.bool_],
    below: float = 0.0,
) -> NDArray[np.bool_]:
    """mean + z se < below (a confident one-sided claim) where the pair has enough tasks; NaN claims nothing."""
    with np.errstate(invalid="ignore"):
        out: NDArray[np.bool_] = enough & (mean + z * se < below)
    return out


def assess_eps(
    stats: PairStats,
    tokens: NDArray[np.float64],
    alpha: float,
    looks: int,
    min_tasks: int,
    margin: Margin,
    times: tuple[float, ...] | None = None,
) -> EpsAssessment:
    """on / off / within / open (module docstring). With no margin: sequential.assess_holm, unchanged."""
    k = stats.q.shape[0]
    if not margin.active:
        stronger, cheaper = holm_claims(stats, alpha, looks, min_tasks)
        a = decide(stats, stronger, cheaper)
        return EpsAssessment(a.status, a.dominated_by, a.stronger, a.cheaper, a.stats, margin=margin)
    enough = stats.n >= max(2, min_tasks)
    z_on, z_off = eps_z(alpha, looks, k, times), off_z(alpha, looks, k, times)
    z_tok = eps_z_tokens(alpha, looks, k, times)
    # stronger[i, j]: q_ij > 0 confidently; cheaper[i, j]: c_ij < 0 confidently; at the on/within routes' z.
    stronger, cheaper = (
        _claims(-stats.q, stats.q_se, z_on, enough),
        _claims(stats.c, stats.c_se, z_tok, enough),
    )
    dom = _claims(-stats.q, stats.q_se, z_off, enough) & _claims(stats.c, stats.c_se, z_off, enough)
    d = rel_token_stats(tokens, margin.tokens)
    q_below = _claims(stats.q, stats.q_se, z_on, enough, margin.balance)  # q_below[j, i]: q_ji < b_ε
    tok_close = _claims(d[0], d[1], z_tok, d[2] >= max(2, min_tasks))
    status = [OPEN] * k
    dominated_by: list[int | None] = [None] * k
    for i in range(k):
        doms = [j for j in range(k) if j != i and dom[j, i]]
        if doms:
            status[i], dominated_by[i] = OFF, doms[0]
    for i in range(k):
        live = [j for j in range(k) if j != i and status[j] != OFF]
        if status[i] == OFF:
            continue
        if all(cheaper[i, j] or stronger[i, j] for j in live):
            status[i] = ON
        elif all(bool(q_below[j, i] or tok_close[i, j]) for j in live):
            status[i] = WITHIN
    return EpsAssessment(status, dominated_by, stronger, cheaper, stats, q_below, tok_close, d, margin, dom)


def _eps_done(
    a: Assessment, q_below: NDArray[np.bool_], tok_close: NDArray[np.bool_], i: int, j: int
) -> bool:
    """Whether j can no longer ε-dominate i (i's within claim against j holds)."""
    return bool(a.cheaper[i, j] or a.stronger[i, j] or q_below[j, i] or tok_close[i, j])


def eps_needs(
    a: EpsAssessment,
    n_end: NDArray[np.float64],
    z_off: NDArray[np.float64] | float,
    z_on: float,
    min_power: float,
    z_tok: float | None = None,
) -> tuple[list[bool], NDArray[np.bool_]]:
    """(futile per arm, wants [K, K]) as sequential.reachable_needs, with the within route: an open arm is
    futile when no decision (off via a dominator at z_off, on or within at z_on) is reachable at the end of
    the grid, and wants[i, j] when pair (i, j) can still settle something for open arm i."""
    st = a.stats
    k = len(a.status)
    if a.margin.active and a.q_below is not None and a.tok_close is not None and a.d is not None:
        strong = a.stronger | (claim_power(st.q, st.q_se, st.n, n_end, z_on) >= min_power)
        zt = z_on if z_tok is None else z_tok  # the token route's z (eps_z_tokens)
        cheap = a.cheaper | (claim_power(-st.c, st.c_se, st.n, n_end, zt) >= min_power)
        dom_q = claim_power(st.q, st.q_se, st.n, n_end, z_off) >= min_power
        dom_c = claim_power(-st.c, st.c_se, st.n, n_end, z_off) >= min_power
        can_dom = (a.dom if a.dom is not None else np.zeros((k, k), dtype=bool)) | (dom_q & dom_c)
        below = a.q_below | (claim_power(a.margin.balance - st.q, st.q_se, st.n, n_end, z_on) >= min_power)
        close = a.tok_close | (claim_power(-a.d[0], a.d[1], a.d[2], n_end, zt) >= min_power)
    else:
        strong = a.stronger | (claim_power(st.q, st.q_se, st.n, n_end, z_off) >= min_power)
        cheap = a.cheaper | (claim_power(-st.c, st.c_se, st.n, n_end, z_off) >= min_power)
        can_dom = cheap & strong
        below = close = np.zeros((k, k), dtype=bool)
    out = []
    wants = np.zeros((k, k), dtype=bool)
    for i in range(k):
        if a.status[i] != OPEN:
            out.append(False)
            continue
        others = [j for j in range(k) if j != i]
        doms = [j for j in others if can_dom[j, i]]
        live = [j for j in others if a.status[j] != OFF]
        can_settle = all(cheap[i, j] or strong[i, j] or below[j, i] or close[i, j] for j in live)
        out.append(not (doms or can_settle))
        for j in doms:
            wants[i, j] = True
        if can_settle:
            for j in live:
                done = pair_done(a, i, j) or (
                    a.q_below is not None
                    and a.tok_close is not None
                    and _eps_done(a, a.q_below, a.tok_close, i, j)
                )
                wants[i, j] |= not done
    return out, wants


def eps_truth(tokens: NDArray[np.float64], quality: NDArray[np.float64], margin: Margin) -> list[str]:
    """Per arm from exact quantities (tokens [K], win balance [K, K]): on (undominated), off (ε-dominated:
    some arm stronger by more than b_ε and cheaper by more than the token margin) or within (dominated, by
    no more than the margin). With no margin an arm is on or off (sequential.true_frontier)."""
    from elo_per_token.coordinator.adaptive.sequential import true_frontier

    t, q = np.asarray(tokens, dtype=float), np.asarray(quality, dtype=float)
    on = true_frontier(t, q)
    out = []
    for i in range(t.size):
        if on[i]:
            out.append(ON)
            continue
        far = any(
            j != i and q[j, i] > margin.balance and t[j] < (1 - margin.tokens) * t[i] for j in range(t.size)
        )
        out.append(OFF if far or not margin.active else WITHIN)
    return out


def eps_wrong(status: str, truth: str) -> bool:
    """A decision contradicting the truth: on for a dominated arm, off for an undominated one, within for an
    ε-dominated one (open is never wrong)."""
    return (
        (status == ON and truth != ON)
        or (status == OFF and truth == ON)
        or (status == WITHIN and truth == OFF)
    )


def eps_holm_z(
    stats: PairStats,
    alpha: float,
    looks: int,
    min_tasks: int,
    margin: Margin,
    times: tuple[float, ...] | None = None,
) -> NDArray[np.float64]:
    """[K, K] z the final look tests a dominance claim at: without a margin the Holm step
    (sequential.holm_step_z), with one off_z (the union over the arms that could dominate)."""
    if margin.active:
        k = stats.q.shape[0]
        return np.full((k, k), off_z(alpha, looks, k, times))
    return holm_step_z(stats, alpha, looks, min_tasks)
