"""Which arm to use, as a decision: the cheapest arm as good as the best, what each frontier step buys, and
the best arm under a per-task budget.

Read off the bootstrap (same rounds for every arm, so the correlation of two arms' Elo is kept): arm a is
"not separated" from arm b when the interval of Elo(b) - Elo(a) includes 0, and "equivalent" to it only when
that interval lies within +-margin (default 10 Elo, `--margin`): not detecting a difference is not showing
there is none. The candidate is the cheapest arm not separated from the best. It is picked outright when it
is the best, or equivalent to it; otherwise it is picked with the caveat "not separated: these N arms". It
is never picked when a cheaper arm is not separated from it (its extra tokens buy nothing shown): then no
arm is. Arms the headline table marks partial (measured in some families only) and arms the missingness
check flags (their missing tasks are the harder ones) are never picked, never "the best", and the frontier
steps skip partial arms as the table's frontier does. Without bootstrap rounds the text says the pick is a
point estimate.

Everything here takes the result's numbers and returns plain data (a dict with `lines` every report prints).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from elo_per_token.contracts.errors import InputError


@dataclass(frozen=True)
class Budget:
    """A per-task budget: tokens, or US dollars when `usd`."""

    amount: float
    usd: bool

    def describe(self) -> str:
        return f"${self.amount:g}/task" if self.usd else f"{_tok(self.amount)} tokens/task"


MAX_STEP_LINES = 8  # frontier steps printed; every step is in the returned data
_BUDGET = re.compile(r"^\s*(\$)?\s*([0-9]*\.?[0-9]+)\s*([kKmM])?\s*(\$|usd|USD)?\s*$")


def parse_budget(text: str | None) -> Budget | None:
    """'3000', '3k' (tokens per task) or '$0.002', '0.002usd' (dollars per task).

    Args:
        text: The --budget value (None or '': no budget).
    """
    if text is None:
        return None
    m = _BUDGET.match(text)
    if not m:
        raise InputError(
            f"expected tokens per task (e.g. 3000, 2.5k) or dollars ($0.002), got {text!r}", field="--budget"
        )
    amount = float(m.group(2)) * {"k": 1e3, "m": 1e6}.get((m.group(3) or "").lower(), 1.0)
    if amount <= 0:
        raise InputError(f"must be > 0, got {text!r}", field="--budget")
    return Budget(amount=amount, usd=bool(m.group(1) or m.group(4)))


def _tok(x: float) -> str:
    return f"{x / 1000:.1f}k" if abs(x) >= 1000 else f"{x:.0f}"


def _q(samples: NDArray[np.float64], level: float) -> tuple[float, float]:
    ok = samples[np.isfinite(samples)]
    if ok.size == 0:
        return math.nan, math.nan
    a = (1.0 - level) / 2.0
    return float(np.quantile(ok, a)), float(np.quantile(ok, 1.0 - a))


DEFAULT_MARGIN = 10.0  # Elo: "equivalent" only when the interval of the difference lies within +-margin


def check_margin(margin: float) -> float:
    """The equivalence margin, or InputError(field='--margin').

    Args:
        margin: The --margin value (Elo).
    """
    if not (isinstance(margin, int | float) and math.isfinite(margin) and margin >= 0):
        raise InputError(f"must be a finite number of Elo points >= 0, got {margin!r}", field="--margin")
    return float(margin)


def _diff(elo_s: NDArray[np.float64] | None, i: int, j: int, level: float) -> tuple[float, float]:
    """Interval of Elo(i) - Elo(j) over the same bootstrap rounds (their correlation kept)."""
    return (math.nan, math.nan) if elo_s is None else _q(elo_s[:, i] - elo_s[:, j], level)


def _separated(elo_s: NDArray[np.float64] | None, i: int, j: int, level: float) -> bool:
    """Arm i measurably above arm j: the interval of Elo(i) - Elo(j) lies above 0."""
    return _diff(elo_s, i, j, level)[0] > 0


def _within_noise(
    best: int, elo_s: NDArray[np.float64] | None, elo: NDArray[np.float64], level: float
) -> list[int]:
    """Arms whose Elo interval against the best includes 0 (the best itself included)."""
    if elo_s is None:
        return [best]
    return [
        i
        for i in range(len(elo))
        if not math.isnan(elo[i]) and (i == best or not _separated(elo_s, best, i, level))
    ]


def _frontier(
    arms: Sequence[str],
    elo: NDArray[np.float64],
    cost: NDArray[np.float64],
    eligible: Sequence[int] | None = None,
) -> list[int]:
    """Point-estimate frontier of the eligible arms (the headline table's: partial arms are off it): no other
    eligible arm at most as costly and strictly stronger (cheapest first)."""
    pool = range(len(arms)) if eligible is None else eligible
    order = sorted(
        (i for i in pool if not math.isnan(elo[i]) and not math.isnan(cost[i])),
        key=lambda i: (cost[i], -elo[i]),
    )
    front, best = [], -math.inf
    for i in order:
        if elo[i] > best:
            front.append(i)
            best = float(elo[i])
    return front


def _steps(
    arms: Sequence[str],
    front: list[int],
    elo: NDArray[np.float64],
    tok: NDArray[np.float64],
    elo_s: NDArray[np.float64] | None,
    level: float,
    flagged: Sequence[str] = (),
) -> list[dict[str, Any]]:
    steps = []
    for a, b in itertools.pairwise(front):
        lo, hi = _diff(elo_s, b, a, level)
        d, dt = float(elo[b] - elo[a]), float(tok[b] - tok[a])
        ci = f" [{lo:+.0f}, {hi:+.0f}]" if not math.isnan(lo) else ""
        resolved = not math.isnan(lo) and lo > 0
        mark = "".join(
            f" ({x}: flagged by the missingness check)" for x in (arms[a], arms[b]) if x in flagged
        )
        steps.append(
            {
                "from": arms[a],
                "to": arms[b],
                "d_elo": d,
                "d_elo_lo": None if math.isnan(lo) else lo,
                "d_elo_hi": None if math.isnan(hi) else hi,
                "d_tokens": dt,
                "resolved": resolved,
                "text": f"{arms[b]} buys {d:+.0f} Elo{ci} over {arms[a]} for {'+' if dt >= 0 else '-'}{_tok(abs(dt))} "
                f"tokens/task"
                + ("" if resolved or elo_s is None else " (not resolved: the interval includes 0)")
                + mark,
            }
        )
    return steps


def _excluded(
    arms: Sequence[str], partial: Mapping[str, Sequence[str]], flagged: Sequence[str]
) -> dict[str, str]:
    """Arm -> why the recommendation never picks it (the headline table's marks and the missingness check)."""
    out = {}
    for a in arms:
        if a in partial:
            seen = list(partial[a])
            out[a] = ("+".join(seen) + " only" if seen else "no family") + ": not comparable across families"
        elif a in flagged:
            out[a] = "its missing tasks are the harder ones (missingness check)"
    return out


@dataclass(frozen=True)
class _Decision:
    """What the data decide among the eligible arms (indices into the arms)."""

    status: str  # pick | not_separated | undecided
    best: int
    pick: int | None
    near: list[int]  # not separated from the best (the best included), cheapest first
    below: list[int]  # cheaper than the cheapest of `near` and not separated from it
    equivalent: bool  # the pick is within +-margin of the best (interval of the difference)
    diff: tuple[float, float, float]  # Elo(best) - Elo(pick): point, lo, hi
    below_gap: tuple[float, float, float] = (math.nan, math.nan, math.nan)  # Elo(P) - Elo(dearest of below)
    # dearer-looking arms not below the pick whose tokens/task are not measurably above the pick's
    maybe_cheaper: list[int] = field(default_factory=list)
    joint: float = math.nan  # the level of below_gap's interval (Bonferroni over the arms)
    joint_n: int = 1  # the comparisons it is one of


def _maybe_cheaper(
    tok: NDArray[np.float64],
    tok_s: NDArray[np.float64] | None,
    elo_s: NDArray[np.float64],
    pick: int,
    valid: list[int],
    level: float,
) -> list[int]:
    """Arms that look dearer than the pick but whose tokens/task are not measurably above its (the interval of
    the difference over the same bootstrap rounds reaches 0: a rare very long reply makes a mean uncertain)
    and that the pick is not measurably above: the pick may be dominated by one of them."""
    if tok_s is None or len(tok_s) == 0:
        return []
    return [
        j
        for j in valid
        if j != pick
        and tok[j] >= tok[pick]
        and not _separated(elo_s, pick, j, level)
        and not _q(tok_s[:, j] - tok_s[:, pick], level)[0] > 0
    ]


def _decide(
    elo: NDArray[np.float64],
    tok: NDArray[np.float64],
    elo_s: NDArray[np.float64],
    level: float,
    margin: float,
    valid: list[int],
    tok_s: NDArray[np.float64] | None = None,
) -> _Decision:
    """The cheapest arm not separated from the best (P) is the candidate. It is picked only when every
    cheaper arm is measurably below it, jointly (Bonferroni over the arms; else its extra tokens buy nothing
    shown: undecided) and every arm it is not measurably above is measurably dearer (else P may be
    dominated: undecided); it is called
    equivalent to the best only when the interval of Elo(best) - Elo(P) lies within +-margin (else: not
    separated, P picked with that caveat)."""
    best = max(valid, key=lambda i: elo[i])
    near = sorted(
        (i for i in valid if i == best or not _separated(elo_s, best, i, level)),
        key=lambda i: (tok[i], -elo[i]),
    )
    pick = near[0]
    # A pick claims to be measurably above every cheaper arm at once: Bonferroni over the K - 1 arms it is
    # compared with, so among many equal arms a dearer one is wrongly picked at most (1 - level) / 2 of runs.
    joint = 1.0 - (1.0 - level) / max(len(valid) - 1, 1)
    below = [j for j in valid if tok[j] < tok[pick] and not _separated(elo_s, pick, j, joint)]
    lo, hi = _diff(elo_s, best, pick, level)
    diff = (float(elo[best] - elo[pick]), lo, hi)
    eq = pick == best or (-margin <= lo and hi <= margin)
    if below:
        below = sorted(below, key=lambda i: (tok[i], -elo[i]))
        gap = (float(elo[pick] - elo[below[-1]]), *_diff(elo_s, pick, below[-1], joint))
        return _Decision(
            "undecided", best, None, near, below, eq, diff, gap, joint=joint, joint_n=max(len(valid) - 1, 1)
        )
    if maybe := _maybe_cheaper(tok, tok_s, elo_s, pick, valid, level):
        return _Decision("undecided", best, None, near, [], eq, diff, maybe_cheaper=maybe)
    return _Decision("pick" if eq else "not_separated", best, pick, near, [], eq, diff)


def _arm(arms: Sequence[str], elo: NDArray[np.float64], tok: NDArray[np.float64], i: int) -> str:
    return f"{arms[i]} ({_tok(tok[i])} tokens/task, Elo {elo[i]:.0f})"


def _head(
    arms: Sequence[str],
    elo: NDArray[np.float64],
    tok: NDArray[np.float64],
    d: _Decision,
    pct: str,
    margin: float,
) -> str:
    """The recommendation's first line for a decision (see _decide)."""
    best, (dd, lo, hi) = _arm(arms, elo, tok, d.best), d.diff

    def names(ix: Sequence[int]) -> str:
        return ", ".join(arms[i] for i in ix)

    if d.status == "undecided" and not d.below:
        p = d.near[0]
        return (
            f"No recommendation: {_arm(arms, elo, tok, p)}, the cheapest arm not separated from the best, "
            f"{best}, may not be cheaper than {names(d.maybe_cheaper)}: {'its' if len(d.maybe_cheaper) == 1 else 'their'} "
            f"tokens/task {'is' if len(d.maybe_cheaper) == 1 else 'are'} not measurably above {arms[p]}'s "
            f"and {arms[p]} is not measurably stronger ({pct} intervals; a rare very long reply makes a mean "
            "uncertain). More tasks would decide."
        )
    if d.status == "undecided":
        p, c, (g, glo, ghi) = d.near[0], d.below[-1], d.below_gap
        return (
            f"No recommendation: {_arm(arms, elo, tok, p)}, the cheapest arm not separated from the best, "
            f"{best}, is not separated from the cheaper {names(d.below)} either ({arms[p]} − {arms[c]}: "
            f"{g:+.0f} Elo [{glo:+.0f}, {ghi:+.0f}], {100 * d.joint:.4g}% interval: one of {d.joint_n} joint comparisons), which {'is' if len(d.below) == 1 else 'are'} measurably below the best ({pct} "
            f"intervals); not separated: these {len(d.below) + len(d.near)} arms: {names(d.below + d.near)}. "
            "More tasks would decide."
        )
    assert d.pick is not None
    pick = _arm(arms, elo, tok, d.pick)
    gap = f"{arms[d.best]} − {arms[d.pick]}: {dd:+.0f} Elo [{lo:+.0f}, {hi:+.0f}]"
    if d.pick == d.best:
        return f"Recommendation: {best} — the best arm; every cheaper arm is measurably below it ({pct} interval)."
    if d.status == "pick":
        others = [i for i in d.near if i not in (d.pick, d.best)]
        return (
            f"Recommendation: {pick} — equivalent to the best, {best}, within ±{margin:g} Elo ({gap}, {pct} "
            f"interval)" + (f"; also not separated from the best: {names(others)}" if others else "") + "."
        )
    return (
        f"Recommendation (not separated): {pick} — the cheapest of {len(d.near)} arms not separated from the "
        f"best, {best}: {names(d.near)}; {gap} ({pct} interval) reaches past ±{margin:g} Elo, so they are "
        "not shown equivalent. More tasks would decide."
    )


def recommend(
    arms: Sequence[str],
    elo: NDArray[np.float64],
    tokens: NDArray[np.float64],
    elo_samples: NDArray[np.float64] | None = None,
    *,
    level: float = 0.95,
    cost: NDArray[np.float64] | None = None,
    budget: Budget | None = None,
    margin: float = DEFAULT_MARGIN,
    partial: Mapping[str, Sequence[str]] | None = None,
    flagged: Sequence[str] = (),
    tokens_samples: NDArray[np.float64] | None = None,
) -> dict[str, Any]:
    """The recommendation as data: status, the arm (or None), the best arm, the arms not separated from it,
    frontier steps, the budget pick and `lines` (the text every report prints, in order).

    Partial arms (measured in some weighted families only: arm -> those families) and arms `flagged` by the
    missingness check are never picked, never the best, and the frontier steps skip partial arms as the
    headline table's frontier does. status: 'pick' (the best alone, or an arm equivalent to it within
    +-margin), 'not_separated' (the cheapest arm not separated from the best, not shown equivalent: picked
    with that caveat), 'undecided' (that arm is not separated from a cheaper one either: no pick),
    'point_estimate' (no bootstrap), 'empty'.

    Args:
        arms: the arm names, indexing the arrays.
        elo: point Elo per arm [K].
        tokens: tokens per task per arm [K].
        elo_samples: bootstrap Elo [R, K] (None: point estimate only).
        level: the intervals' level.
        cost: cost per task per arm [K] when priced (the budget pick).
        budget: the budget to pick within (None: none).
        margin: the equivalence margin in Elo.
        partial: partial arms (arm -> families seen).
        flagged: arms the missingness check flagged.
        tokens_samples: bootstrap tokens [R, K] (None: tokens taken as known).
    """
    elo, tok = np.asarray(elo, dtype=float), np.asarray(tokens, dtype=float)
    elo_s = None if elo_samples is None or len(elo_samples) == 0 else np.asarray(elo_samples, dtype=float)
    margin, partial = check_margin(margin), dict(partial or {})
    excluded = _excluded(arms, partial, flagged)
    valid = _comparable(arms, elo, tok, excluded)
    out = _undecided_fields(level, margin, excluded)
    note = [_excluded_line(excluded)] if excluded else []
    if not valid:
        lines = ["No recommendation: no comparable arm has both an Elo and a token count.", *note]
        return {**out, "status": "empty", "steps": [], "lines": lines}
    steps = _frontier_steps(arms, elo, tok, elo_s, level, flagged, partial)
    head, decided = _head_and_decision(arms, elo, tok, (elo_s, tokens_samples), level, margin, valid)
    out.update(decided)
    lines = _lines(head, note, steps)
    under = _under_budget(
        arms, elo, (tok, _upper(tok, tokens_samples, level)), cost, elo_s, level, budget, valid
    )
    if under is not None:
        lines.append(under["text"])
    return {**out, "steps": steps, "budget": under, "lines": lines}


def _undecided_fields(level: float, margin: float, excluded: dict[str, str]) -> dict[str, Any]:
    """The recommendation's fields before any decision: no arm, no best, nothing within noise, no budget pick."""
    return {
        "arm": None,
        "best": None,
        "within_noise": [],
        "not_separated": [],
        "level": level,
        "margin": margin,
        "excluded": excluded,
        "equivalent": None,
        "budget": None,
    }


def _frontier_steps(
    arms: Sequence[str],
    elo: NDArray[np.float64],
    tok: NDArray[np.float64],
    elo_s: NDArray[np.float64] | None,
    level: float,
    flagged: Sequence[str],
    partial: Mapping[str, Sequence[str]],
) -> list[dict[str, Any]]:
    """The frontier's steps, partial arms left out of the frontier as the headline table's frontier does."""
    whole = [i for i in range(len(arms)) if arms[i] not in partial]
    return _steps(arms, _frontier(arms, elo, tok, whole), elo, tok, elo_s, level, flagged)


def _comparable(
    arms: Sequence[str], elo: NDArray[np.float64], tok: NDArray[np.float64], excluded: Collection[str]
) -> list[int]:
    """Indices of the arms that have both an Elo and a token count and are not excluded."""
    return [
        i
        for i in range(len(arms))
        if not math.isnan(elo[i]) and not math.isnan(tok[i]) and arms[i] not in excluded
    ]


def _head_and_decision(
    arms: Sequence[str],
    elo: NDArray[np.float64],
    tok: NDArray[np.float64],
    samples: tuple[NDArray[np.float64] | None, NDArray[np.float64] | None],
    level: float,
    margin: float,
    valid: list[int],
) -> tuple[str, dict[str, Any]]:
    """The headline and decision: from the point estimate without bootstrap Elo, else from the samples."""
    elo_s, tokens_samples = samples
    if elo_s is None:
        return _point_estimate(arms, elo, tok, valid)
    tok_s = None if tokens_samples is None else np.asarray(tokens_samples, dtype=float)
    return _decision(arms, elo, tok, (elo_s, tok_s), level, margin, valid)


def _point_estimate(
    arms: Sequence[str], elo: NDArray[np.float64], tok: NDArray[np.float64], valid: list[int]
) -> tuple[str, dict[str, Any]]:
    """No bootstrap: the highest Elo, said to be a point estimate (the head line, the fields it sets)."""
    best = max(valid, key=lambda i: elo[i])
    head = (
        f"Recommendation (point estimates only, no bootstrap intervals): {arms[best]} has the highest Elo "
        f"({elo[best]:.0f}) at {_tok(tok[best])} tokens/task; rerun with bootstrap rounds to know which "
        "cheaper arms are within its noise."
    )
    return head, {
        "status": "point_estimate",
        "arm": arms[best],
        "best": arms[best],
        "within_noise": [arms[best]],
    }


def _decision(
    arms: Sequence[str],
    elo: NDArray[np.float64],
    tok: NDArray[np.float64],
    samples: tuple[NDArray[np.float64], NDArray[np.float64] | None],
    level: float,
    margin: float,
    valid: list[int],
) -> tuple[str, dict[str, Any]]:
    """The decision on the bootstrap samples (Elo, tokens): the head line and the fields it sets."""
    d = _decide(elo, tok, samples[0], level, margin, valid, samples[1])
    fields = {
        "status": d.status,
        "arm": None if d.pick is None else arms[d.pick],
        "best": arms[d.best],
        "within_noise": [arms[i] for i in d.near],
        "not_separated": [arms[i] for i in dict.fromkeys(d.below + d.near + d.maybe_cheaper)],
        "equivalent": d.equivalent,
        "difference": {"d_elo": d.diff[0], "lo": _num(d.diff[1]), "hi": _num(d.diff[2])},
    }
    return _head(arms, elo, tok, d, f"{round(level * 100)}%", margin), fields


def _lines(head: str, note: list[str], steps: list[dict[str, Any]]) -> list[str]:
    """The recommendation's text lines: the head, the exclusion note, the first frontier steps."""
    lines = [head, *note] + [f"Frontier step: {s['text']}" for s in steps[:MAX_STEP_LINES]]
    if len(steps) > MAX_STEP_LINES:  # many arms: the rest are in report.json's recommendation.steps
        lines.append(
            f"… and {len(steps) - MAX_STEP_LINES} more frontier steps (report.json recommendation.steps)"
        )
    return lines


def _num(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _excluded_line(excluded: Mapping[str, str]) -> str:
    return "Never recommended: " + "; ".join(f"{a} ({why})" for a, why in excluded.items()) + "."


def _upper(
    tok: NDArray[np.float64], samples: NDArray[np.float64] | None, level: float
) -> NDArray[np.float64] | None:
    """Per arm, the upper end of the tokens-per-task interval at `level` (None without a bootstrap): a rare
    very long reply makes the mean uncertain, and a budget pick must fit with that uncertainty."""
    if samples is None or len(samples) == 0:
        return None
    s = np.asarray(samples, dtype=float)
    with np.errstate(all="ignore"):
        hi = np.nanquantile(s, (1 + level) / 2, axis=0) if np.isfinite(s).any() else np.full(len(tok), np.nan)
    return np.where(np.isnan(hi), tok, np.maximum(hi, tok))


def _amount(x: float, usd: bool) -> str:
    return f"${x:.5f}" if usd else f"{_tok(x)} tokens"


def _under_budget(
    arms: Sequence[str],
    elo: NDArray[np.float64],
    toks: tuple[NDArray[np.float64], NDArray[np.float64] | None],
    cost: NDArray[np.float64] | None,
    elo_s: NDArray[np.float64] | None,
    level: float,
    budget: Budget | None,
    valid: list[int],
) -> dict[str, Any] | None:
    """The best arm whose tokens (or cost) per task fit the budget at the upper end of their interval, and the
    cheapest within its noise. toks: (tokens per task, their upper interval ends or None without a bootstrap);
    a cost's upper end scales the cost by the arm's token ratio hi/point (prices per token are fixed)."""
    if budget is None:
        return None
    tok, tok_hi = toks
    spend = cost if budget.usd else tok
    if spend is None:
        return {
            "budget": budget.describe(),
            "arm": None,
            "text": f"Budget {budget.describe()}: the run has no prices (set them with --prices).",
        }
    with np.errstate(all="ignore"):
        hi = spend if tok_hi is None else spend * np.where(tok > 0, tok_hi / tok, 1.0)
    fit = [i for i in valid if not math.isnan(hi[i]) and hi[i] <= budget.amount]
    if not fit:
        cheapest = min(valid, key=lambda i: hi[i])
        needs = _amount(spend[cheapest], budget.usd) + (
            f" (up to {_amount(hi[cheapest], budget.usd)})" if hi[cheapest] > spend[cheapest] else ""
        )
        return {
            "budget": budget.describe(),
            "arm": None,
            "text": f"Budget {budget.describe()}: no arm fits (the cheapest, {arms[cheapest]}, needs {needs} "
            "per task).",
        }
    best = max(fit, key=lambda i: elo[i])
    near = [i for i in _within_noise(best, elo_s, elo, level) if i in fit]
    pick = min(near, key=lambda i: (spend[i], -elo[i]))
    used = (
        _amount(spend[pick], budget.usd)
        + " per task"
        + (
            f", at most {_amount(hi[pick], budget.usd)} at the upper end of its {round(level * 100)}% interval"
            if tok_hi is not None
            else "; a point estimate: it may exceed the budget"
        )
    )
    text = f"Budget {budget.describe()}: {arms[pick]} (Elo {elo[pick]:.0f}, {used})"
    if pick != best:
        text += (
            f", within the noise of the strongest arm under the budget, {arms[best]} (Elo {elo[best]:.0f})"
        )
    return {"budget": budget.describe(), "arm": arms[pick], "best": arms[best], "text": text + "."}


def recommend_result(result: Any, budget: Budget | None = None) -> dict[str, Any]:
    """recommend() over an AnalysisResult: its arms, Elo, tokens per task, bootstrap, (when priced) cost,
    margin, and the marks of its headline table (partial arms) and of the missingness check (flagged arms).

    Args:
        result: The analysis result.
        budget: The parsed --budget (None: none).
    """
    from elo_per_token.analysis.missing import flagged_arms

    cost = None
    if result.cost_table is not None:
        by = {r["arm"]: r["cost_per_task"] for r in result.cost_table.iter_rows(named=True)}
        cost = np.array([by.get(a) if by.get(a) is not None else math.nan for a in result.arms], dtype=float)
    return recommend(
        result.arms,
        result.elo,
        result.tokens_per_task,
        result.elo_samples,
        level=result.options.level,
        cost=cost,
        budget=budget,
        margin=result.options.margin,
        partial=result.partial_arms,
        flagged=flagged_arms(result.missing),
        tokens_samples=result.tokens_samples,
    )
