"""The adaptive sweep's round loop: tasks in rounds, arms that are settled stop receiving tasks.

Tasks are put in one random order, stratified by family (each round holds every family in proportion), and
cut into `rounds` rounds; every arm still running gets the same tasks in a round. After each round the
stopping statistics (coordinator/adaptive/sequential.py) re-assess every arm: off the frontier (confidently dominated),
on it (confidently not dominated by any arm still in question), or open. With `futility` an open arm that
the full grid could not settle either (every way to decide it has conditional power below `futility_power`)
stops too and is reported open, and an arm runs for an open one only while that comparison can still settle
its decision; a stopped arm (on, or open and futile) runs again when an open arm needs it. The sweep stops
when no arm needs more data, at the token cap, or when the grid is exhausted, and says per arm why it
stopped.

The loop does no I/O: a `runner` runs one round (the replay executor, coordinator/adaptive/replay.py; the live sweep,
coordinator/adaptive/sweep.py) and returns (score, tokens) per (task, arm). With the same seed the task order
and every decision are a function of the results, so a resumed sweep replays its finished rounds from the
ledger and continues where it stopped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from elo_per_token.coordinator.adaptive.boundary import round_times
from elo_per_token.coordinator.adaptive.budget import Unfinished, unfinished
from elo_per_token.coordinator.adaptive.epsilon import (
    WITHIN,
    EpsAssessment,
    Margin,
    assess_eps,
    auto_epsilon_elo,
    eps_holm_z,
    eps_needs,
    eps_z,
    eps_z_tokens,
    off_z,
)
from elo_per_token.coordinator.adaptive.events import RoundEvent
from elo_per_token.coordinator.adaptive.sequential import (
    OFF,
    ON,
    OPEN,
    Assessment,
    decision_z,
    elo_from_balance,
    needs_data,
    pair_stats,
    projected_interval,
    report_z,
    step_per_1k,
)
from elo_per_token.coordinator.adaptive.settings import AUTO_EPSILON_TOKENS, AdaptiveSettings

__all__ = [
    "AdaptiveResult",
    "ArmReport",
    "plan_margin",
    "round_bounds",
    "run_adaptive",
    "task_order",
    "task_weights",
]

# One round's results: (task index, arm index) -> (score, tokens per task); a missing key is a job that failed.
RoundResults = Mapping[tuple[int, int], tuple[float, float]]
Runner = Callable[[int, list[int], list[int]], RoundResults]


def task_order(families: Sequence[str], seed: int) -> list[int]:
    """A random order of the tasks, stratified by family: each family's tasks shuffled and spread evenly, so
    every prefix (every round) holds each family in proportion to its size."""
    rng = np.random.default_rng(seed)
    fam = np.asarray(families, dtype=object)
    key = np.empty(fam.size)
    for f in sorted(set(families)):
        idx = np.flatnonzero(fam == f)
        rank = rng.permutation(idx.size)
        key[idx] = (rank + rng.uniform(0.0, 1.0)) / idx.size  # one offset per family: no family always first
    return [int(i) for i in np.lexsort((rng.permutation(fam.size), key))]


def round_bounds(n_tasks: int, rounds: int) -> list[tuple[int, int]]:
    """(start, stop) positions in the task order of each round: `rounds` near-equal slices."""
    edges = np.linspace(0, n_tasks, min(rounds, max(n_tasks, 1)) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges) if b > a]


@dataclass
class ArmReport:
    """What the report says of one arm: decision, why it stopped, tasks and tokens spent, intervals."""

    arm: str
    status: str
    reason: str
    tasks: int
    tokens: float
    stopped_round: int | None
    tokens_per_task: float
    tokens_lo: float
    tokens_hi: float
    d_elo: float | None  # vs the anchor (the cheapest arm), from the win balance
    d_elo_lo: float | None
    d_elo_hi: float | None
    per_1k: tuple[float, float, float] | None = None  # vs the next-cheaper on-frontier arm


@dataclass
class AdaptiveResult:
    arms: list[str]
    reports: list[ArmReport]
    rounds_run: int
    rounds_planned: int
    tokens_spent: float
    stop_reason: str
    anchor: str
    order: list[int]
    assessment: Assessment | None
    z_report: float
    history: list[RoundEvent] = field(default_factory=list)
    margin: Margin = field(default_factory=Margin)  # the ε of the classification (0, 0: the strict rule)
    alpha: float = 0.05
    unfinished: Unfinished | None = None  # stopped at the token cap: arms left open, cost to finish

    @property
    def frontier(self) -> dict[str, str]:
        return {r.arm: r.status for r in self.reports}


@dataclass
class _State:
    k: int
    scores: list[NDArray[np.float64]] = field(
        default_factory=list
    )  # one [K] row per task run, in the task order
    tokens: list[NDArray[np.float64]] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    spent: float = 0.0
    stopped: dict[int, int] = field(default_factory=dict)  # arm -> round after which it stopped
    futile: dict[int, str] = field(
        default_factory=dict
    )  # open arm -> why the grid cannot settle it (this round)
    why_open: dict[int, str] = field(
        default_factory=dict
    )  # arm that stopped open -> st.futile when it stopped

    def add_round(self, tasks: list[int], arms: list[int], res: RoundResults, w: NDArray[np.float64]) -> None:
        for t in tasks:
            s_row, t_row = np.full(self.k, np.nan), np.full(self.k, np.nan)
            for a in arms:
                if (t, a) in res:
                    sc, tk = res[(t, a)]
                    s_row[a], t_row[a] = float(sc), float(tk)
                    self.spent += float(tk)
            self.scores.append(s_row)
            self.tokens.append(t_row)
            self.weights.append(float(w[t]))

    def matrices(self) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        if not self.scores:
            return np.empty((0, self.k)), np.empty((0, self.k)), np.empty(0)
        return np.vstack(self.scores), np.vstack(self.tokens), np.asarray(self.weights)


def task_weights(families: Sequence[str], weights: Mapping[str, float] | None) -> NDArray[np.float64]:
    """w_f / pi_f per task: family weight (normalised; default equal) over the family's share of the pool."""
    fams = sorted(set(families))
    raw = {f: float((weights or {}).get(f, 1.0 if not weights else 0.0)) for f in fams}
    total = sum(raw.values()) or 1.0
    share = {f: sum(1 for x in families if x == f) / len(families) for f in fams}
    return np.asarray([raw[f] / total / share[f] for f in families])


def _width_ok(a: Assessment, tok: NDArray[np.float64], z: float, width: float | None) -> list[bool] | None:
    """Per arm: its ΔElo-per-1k step over the next-cheaper on-arm is resolved to `width` (None: no rule)."""
    if width is None:
        return None
    order = np.argsort(tok)
    ok = [True] * len(a.status)
    prev = None
    for i in (int(x) for x in order):
        if a.status[i] != ON:
            continue
        if prev is not None:
            step = step_per_1k(a.stats, i, prev, z)
            ok[i] = step is not None and step[2] - step[0] <= width
        prev = i
    return ok


def _next_active(st: _State, need: Sequence[bool], active: list[int], r: int) -> list[int]:
    """The arms that run next round: those the assessment still needs. An arm no longer needed is marked
    stopped at round r (with its futility reason); a stopped arm runs again when an open arm needs it: an arm
    stopped because the one open arm that wanted it looked futile for a round would otherwise freeze that pair
    and make the futility final."""
    for i in active:
        if not need[i]:
            st.stopped[i] = r
            if i in st.futile:
                st.why_open[i] = st.futile[i]
    for i in range(len(need)):
        if need[i] and i not in active:
            st.stopped.pop(i, None)
            st.why_open.pop(i, None)
    return [i for i in range(len(need)) if need[i]]


def _cap_reason(
    max_tokens: float | None,
    spent: float,
    t: NDArray[np.float64],
    active: list[int],
    nxt_bounds: tuple[int, int],
) -> str | None:
    """The stop reason when the next round would take the sweep over its token cap, else None."""
    if max_tokens is None:
        return None
    nxt = _next_round_cost(t, active, nxt_bounds)
    if spent + nxt <= max_tokens:
        return None
    return (
        f"token cap: spent {spent:,.0f}, the next round would cost ~{nxt:,.0f} more (cap {max_tokens:,.0f})"
    )


def run_adaptive(
    families: Sequence[str],
    arms: Sequence[str],
    runner: Runner,
    settings: AdaptiveSettings,
    *,
    weights: Mapping[str, float] | None = None,
    on_round: Callable[[RoundEvent], None] | None = None,
) -> AdaptiveResult:
    """Run the adaptive sweep over tasks 0..T-1 (families[t] is task t's family) and `arms` with `runner`."""
    settings.check()
    k = len(arms)
    order = task_order(families, settings.seed)
    bounds, looks, times = _looks(len(order), settings)
    w = task_weights(families, weights)
    first = min(settings.min_rounds, len(bounds))
    z_dec = decision_z(settings.alpha, looks, k)
    min_tasks = bounds[first - 1][1]
    margin = plan_margin(families, settings, weights)
    times = times if margin.active else None  # the exact boundary over the looks (ε claims only)
    st = _State(k)
    active = list(range(k))
    a: Assessment | None = None
    history: list[RoundEvent] = []
    stop_reason = "grid exhausted"
    for r, (lo, hi) in enumerate(bounds):
        tasks = order[lo:hi]
        st.add_round(tasks, active, runner(r, tasks, active), w)
        s, t, ww = st.matrices()
        a = assess_eps(pair_stats(s, t, ww), t, settings.alpha, looks, min_tasks, margin, times)
        z_end = eps_holm_z(a.stats, settings.alpha, looks, min_tasks, margin, times)
        z_on = (eps_z(settings.alpha, looks, k, times), eps_z_tokens(settings.alpha, looks, k, times))
        fut = _futility(a, st, len(order), hi, min_tasks, (z_end, *z_on), settings, arms)
        width_ok = _width_ok(a, _mean_tokens(t), z_dec, settings.width)
        need = needs_data(a, width_ok, *(fut if fut is not None else (None, None)))
        active = _next_active(st, need, active, r)
        event = RoundEvent(
            round=r + 1,
            rounds=len(bounds),
            tasks=hi,
            tokens=st.spent,
            running=tuple(arms[i] for i in active),
            status=dict(zip(arms, a.status, strict=True)),
            why={arms[i]: _why_stopped(i, arms, a, rnd) for i, rnd in sorted(st.stopped.items())},
        )
        history.append(event)
        if on_round is not None:
            on_round(event)
        if not active:
            stop_reason = "every arm settled" + (" or not separable within the grid" if st.futile else "")
            break
        if r + 1 < len(bounds) and (
            capped := _cap_reason(settings.max_tokens, st.spent, t, active, bounds[r + 1])
        ):
            stop_reason = capped
            break
    s, t, ww = st.matrices()
    z_rep = report_z(settings.alpha, looks)
    reports, anchor = _reports(arms, s, t, ww, a, st, z_rep, stop_reason)
    left = (
        _left_at_cap(a, arms, t, settings, looks, times, len(order))
        if stop_reason.startswith("token cap")
        else None
    )
    return AdaptiveResult(
        arms=list(arms),
        reports=reports,
        rounds_run=len(history),
        rounds_planned=len(bounds),
        tokens_spent=st.spent,
        stop_reason=stop_reason,
        anchor=anchor,
        order=order,
        assessment=a,
        z_report=z_rep,
        history=history,
        margin=margin,
        alpha=settings.alpha,
        unfinished=left,
    )


def _looks(
    n_tasks: int, settings: AdaptiveSettings
) -> tuple[list[tuple[int, int]], int, tuple[float, ...] | None]:
    """(round bounds, looks, the looks' information times): decisions (and a stop) happen only from round
    min_rounds on; times None for a design with no rounds."""
    bounds = round_bounds(n_tasks, settings.rounds)
    first = min(settings.min_rounds, len(bounds))
    if not bounds:
        return bounds, 1, None
    return bounds, len(bounds) - first + 1, round_times(len(bounds), first)


def plan_margin(
    families: Sequence[str], settings: AdaptiveSettings, weights: Mapping[str, float] | None = None
) -> Margin:
    """The margin the sweep classifies at, from the design before the first task: the settings' explicit ε,
    or auto (epsilon_elo None, the default): the smallest ΔElo the full grid of these tasks, families and
    weights settles at the settings' alpha, rounds and looks (epsilon.auto_epsilon_elo). The token margin
    auto is AUTO_EPSILON_TOKENS with an Elo margin, 0 with none (epsilon_elo = 0: the strict rule)."""
    _, looks, times = _looks(len(families), settings)
    auto = settings.epsilon_elo is None
    elo = (
        auto_epsilon_elo(task_weights(families, weights), settings.alpha, looks, times)
        if settings.epsilon_elo is None
        else settings.epsilon_elo
    )
    tokens = settings.epsilon_tokens
    if tokens is None:
        tokens = AUTO_EPSILON_TOKENS if elo > 0 else 0.0
    return Margin(elo, tokens, auto=auto, tasks=len(families), alpha=settings.alpha)


def _left_at_cap(
    a: Assessment | None,
    arms: Sequence[str],
    t: NDArray[np.float64],
    settings: AdaptiveSettings,
    looks: int,
    times: tuple[float, ...] | None,
    n_tasks: int,
) -> Unfinished | None:
    """Fixed-budget mode: the arms the cap left open and what finishing would likely cost
    (coordinator/adaptive/budget.py); the strict rule's claims are projected at its flat z."""
    if not isinstance(a, EpsAssessment):
        return None
    k = len(arms)
    if a.margin.active:
        z_on, z_off = eps_z(settings.alpha, looks, k, times), off_z(settings.alpha, looks, k, times)
        z_tok = eps_z_tokens(settings.alpha, looks, k, times)
    else:
        z_on = z_off = z_tok = decision_z(settings.alpha, looks, k)
    return unfinished(a, arms, _mean_tokens(t), z_on, z_off, n_tasks, z_tok)


def _futility(
    a: EpsAssessment,
    st: _State,
    n_tasks: int,
    seen: int,
    min_tasks: int,
    zs: tuple[NDArray[np.float64], float, float],
    settings: AdaptiveSettings,
    arms: Sequence[str],
) -> tuple[list[bool], NDArray[np.bool_]] | None:
    """Open arms the full grid could not settle either and the comparisons open arms can still use
    (sequential.reachable_needs), the reasons kept in st.futile; None with futility off or before
    the first decision round."""
    st.futile.clear()
    if not settings.futility or seen < min_tasks:
        return None
    # Every arm not off can still run to the end (a stopped one restarts when an open arm needs it), so a
    # pair's tasks at the end are all the tasks left, whether or not both arms ran this round.
    live = np.asarray([x != OFF for x in a.status])
    n_end = (a.stats.n + np.where(live[:, None] & live[None, :], n_tasks - seen, 0)).astype(np.float64)
    z = zs[0]
    out, wants = eps_needs(a, n_end, z, zs[1], settings.futility_power, zs[2])
    for i in (i for i in range(st.k) if out[i]):
        others = [j for j in range(st.k) if j != i and a.status[j] != OFF]
        j = min(others, key=lambda j: abs(float(np.nan_to_num(a.stats.q[i, j]))), default=None)
        if j is None:
            continue
        lo, hi = projected_interval(a.stats, i, j, int(n_end[i, j]), float(z[i, j]))
        where = (
            f"projected to {int(n_end[i, j])} tasks"
            if n_end[i, j] > a.stats.n[i, j]
            else f"on the {int(n_end[i, j])} tasks both ran (no more to come)"
        )
        st.futile[i] = (
            f"not separable within the grid: win balance vs {arms[j]} {where} "
            f"[{lo:+.3f}, {hi:+.3f}] still covers 0"
        )
    return out, wants


def _why_stopped(i: int, arms: Sequence[str], a: Assessment, rnd: int) -> str:
    """One line for `ept status`: why arm i stopped receiving tasks after round rnd, from its decision now
    (a stopped arm's data does not change, so only another arm's data can move it)."""
    if a.status[i] == OFF:
        dom = a.dominated_by[i]
        why = f"off: {arms[dom] if dom is not None else '?'} is cheaper and stronger"
    elif a.status[i] == ON:
        why = "on the frontier"
    elif a.status[i] == WITHIN:
        why = "within the margin of the frontier"
    else:  # an open arm stops only by the futility rule (needs_data)
        why = "open: not separable within the grid"
    return f"{why} (after round {rnd + 1})"


def _mean_tokens(t: NDArray[np.float64]) -> NDArray[np.float64]:
    """Tokens per task of each arm over the tasks it ran (NaN for an arm with none, without a warning)."""
    n = (~np.isnan(t)).sum(axis=0)
    total = np.nansum(t, axis=0)
    out: NDArray[np.float64] = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    return out


def _next_round_cost(t: NDArray[np.float64], active: list[int], nxt: tuple[int, int]) -> float:
    """Tokens the next round will likely spend: its tasks x the running arms' mean tokens per task so far."""
    per_task = _mean_tokens(t[:, active]) if t.size and active else np.zeros(0)
    return float(np.nansum(per_task)) * (nxt[1] - nxt[0])


def _reason(
    i: int,
    arms: Sequence[str],
    a: Assessment,
    n: int,
    stopped: int | None,
    stop_reason: str,
    why_open: str | None,
) -> str:
    status = a.status[i]
    when = f"after {n} tasks (round {stopped + 1})" if stopped is not None else f"ran to the end ({n} tasks)"
    if status == OFF:
        dom = a.dominated_by[i]
        return f"off the frontier: {arms[dom] if dom is not None else '?'} is cheaper and stronger; stopped {when}"
    if status == ON:
        if stopped is not None:
            return f"on the frontier: no arm in question can dominate it; stopped {when}"
        return f"on the frontier; kept running while open arms were compared with it; {when}"
    if status == WITHIN:
        return f"within the margin of the frontier: no arm is stronger and cheaper by more than it; stopped {when}"
    if why_open is not None and stopped is not None:
        return f"decision stayed open ({why_open}); stopped {when}"
    return f"decision stayed open ({stop_reason}); {when}"


def _reports(
    arms: Sequence[str],
    s: NDArray[np.float64],
    t: NDArray[np.float64],
    w: NDArray[np.float64],
    a: Assessment | None,
    st: _State,
    z: float,
    stop_reason: str,
) -> tuple[list[ArmReport], str]:
    """Per arm: decision, reason, spend and intervals at the report's z (alpha spent over the rounds)."""
    ran = ~np.isnan(t)
    n = ran.sum(axis=0)
    tok = _mean_tokens(t) if t.size else np.full(len(arms), np.nan)
    anchor = int(np.nanargmin(np.where(np.isnan(tok), np.inf, tok))) if len(arms) else 0
    stats = a.stats if a is not None else pair_stats(s, t, w)
    out = []
    for i, arm in enumerate(arms):
        col = t[ran[:, i], i]
        sd = float(col.std(ddof=1)) if col.size > 1 else float("nan")
        half = z * sd / np.sqrt(max(col.size, 1))
        d = lo = hi = None
        if i != anchor and stats.n[i, anchor] > 0:
            q, qse = stats.q[i, anchor], stats.q_se[i, anchor]
            d, lo, hi = (float(v) for v in elo_from_balance(np.array([q, q - z * qse, q + z * qse])))
        elif i == anchor:
            d = lo = hi = 0.0
        status = a.status[i] if a is not None else OPEN
        reason = (
            _reason(i, arms, a, int(n[i]), st.stopped.get(i), stop_reason, st.why_open.get(i))
            if a is not None
            else stop_reason
        )
        out.append(
            ArmReport(
                arm=arm,
                status=status,
                reason=reason,
                tasks=int(n[i]),
                tokens=float(np.nansum(col)),
                stopped_round=st.stopped.get(i),
                tokens_per_task=float(tok[i]),
                tokens_lo=float(tok[i] - half),
                tokens_hi=float(tok[i] + half),
                d_elo=d,
                d_elo_lo=lo,
                d_elo_hi=hi,
            )
        )
    _add_steps(out, stats, tok, a, z)
    return out, arms[anchor] if arms else ""


def _add_steps(
    out: list[ArmReport], stats: object, tok: NDArray[np.float64], a: Assessment | None, z: float
) -> None:
    """ΔElo per 1k tokens of each on-frontier arm over the next-cheaper on-frontier arm (None: unresolved)."""
    if a is None:
        return
    prev = None
    for i in (int(x) for x in np.argsort(tok)):
        if a.status[i] != ON:
            continue
        if prev is not None:
            out[i].per_1k = step_per_1k(a.stats, i, prev, z)
        prev = i
