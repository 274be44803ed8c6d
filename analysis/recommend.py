"""Which arm to use: the cheapest arm within the noise of the best, what each frontier step buys, and the
best arm under a per-task budget.

"Within the noise" is read off the bootstrap: arm a is within the noise of the best arm b when the interval
of Elo(b) - Elo(a) (same rounds, so the correlation between the two is kept) includes 0. When every arm is
within the noise of the best, the data do not separate the arms and no arm is picked. Without bootstrap rounds
nothing can be said about noise: the text says the pick is a point estimate.

Everything here takes the result's numbers and returns plain data (a dict with `lines` every report prints).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    """'3000', '3k' (tokens per task) or '$0.002', '0.002usd' (dollars per task)."""
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


def _q(samples: np.ndarray, level: float) -> tuple[float, float]:
    ok = samples[np.isfinite(samples)]
    if ok.size == 0:
        return math.nan, math.nan
    a = (1.0 - level) / 2.0
    return float(np.quantile(ok, a)), float(np.quantile(ok, 1.0 - a))


def _within_noise(best: int, elo_s: np.ndarray | None, elo: np.ndarray, level: float) -> list[int]:
    """Arms whose Elo interval against the best includes 0 (the best itself included)."""
    if elo_s is None:
        return [best]
    out = []
    for i in range(len(elo)):
        if math.isnan(elo[i]):
            continue
        lo, _ = _q(elo_s[:, best] - elo_s[:, i], level)
        if i == best or not lo > 0:
            out.append(i)
    return out


def _frontier(arms: Sequence[str], elo: np.ndarray, cost: np.ndarray) -> list[int]:
    """Point-estimate frontier: no other arm at most as costly and strictly stronger (cheapest first)."""
    order = sorted((i for i in range(len(arms)) if not math.isnan(elo[i]) and not math.isnan(cost[i])),
                   key=lambda i: (cost[i], -elo[i]))  # fmt: skip
    front, best = [], -math.inf
    for i in order:
        if elo[i] > best:
            front.append(i)
            best = float(elo[i])
    return front


def _steps(arms: Sequence[str], front: list[int], elo: np.ndarray, tok: np.ndarray,
           elo_s: np.ndarray | None, level: float) -> list[dict[str, Any]]:  # fmt: skip
    steps = []
    for a, b in itertools.pairwise(front):
        lo, hi = _q(elo_s[:, b] - elo_s[:, a], level) if elo_s is not None else (math.nan, math.nan)
        d, dt = float(elo[b] - elo[a]), float(tok[b] - tok[a])
        ci = f" [{lo:+.0f}, {hi:+.0f}]" if not math.isnan(lo) else ""
        resolved = not math.isnan(lo) and lo > 0
        steps.append({
            "from": arms[a], "to": arms[b], "d_elo": d, "d_elo_lo": None if math.isnan(lo) else lo,
            "d_elo_hi": None if math.isnan(hi) else hi, "d_tokens": dt, "resolved": resolved,
            "text": f"{arms[b]} buys {d:+.0f} Elo{ci} over {arms[a]} for {'+' if dt >= 0 else '-'}{_tok(abs(dt))} "
            f"tokens/task" + ("" if resolved or elo_s is None else " (not resolved: the interval includes 0)"),
        })  # fmt: skip
    return steps


def recommend(
    arms: Sequence[str],
    elo: np.ndarray,
    tokens: np.ndarray,
    elo_samples: np.ndarray | None = None,
    *,
    level: float = 0.95,
    cost: np.ndarray | None = None,
    budget: Budget | None = None,
) -> dict[str, Any]:
    """The recommendation as data: status, the arm (or None), the best arm, arms within its noise, frontier
    steps, the budget pick and `lines` (the text every report prints, in order).

    status: 'pick' (an arm is separated from some other and the cheapest within noise of the best is picked),
    'not_separated' (every arm within the noise of the best: no pick), 'point_estimate' (no bootstrap), 'empty'."""
    elo, tok = np.asarray(elo, dtype=float), np.asarray(tokens, dtype=float)
    elo_s = None if elo_samples is None or len(elo_samples) == 0 else np.asarray(elo_samples, dtype=float)
    valid = [i for i in range(len(arms)) if not math.isnan(elo[i]) and not math.isnan(tok[i])]
    if not valid:
        return {"status": "empty", "arm": None, "best": None, "within_noise": [], "steps": [], "budget": None,
                "lines": ["No recommendation: no arm has both an Elo and a token count."]}  # fmt: skip
    best = max(valid, key=lambda i: elo[i])
    near = [i for i in _within_noise(best, elo_s, elo, level) if i in valid]
    pick = min(near, key=lambda i: (tok[i], -elo[i]))
    steps = _steps(arms, _frontier(arms, elo, tok), elo, tok, elo_s, level)
    pct = f"{round(level * 100)}%"
    if elo_s is None:
        status, arm = "point_estimate", arms[pick]
        head = (f"Recommendation (point estimates only, no bootstrap intervals): {arms[best]} has the highest Elo "
                f"({elo[best]:.0f}) at {_tok(tok[best])} tokens/task; rerun with bootstrap rounds to know which "
                "cheaper arms are within its noise.")  # fmt: skip
    elif len(near) == len(valid) and len(valid) > 1:
        status, arm = "not_separated", None
        head = (f"No recommendation: the data do not separate the arms (every arm's Elo is within the {pct} "
                f"interval of the best, {arms[best]}); more tasks would, or the cheapest arm "
                f"({arms[min(valid, key=lambda i: tok[i])]}) costs least for the same measured quality.")  # fmt: skip
    else:
        status, arm = "pick", arms[pick]
        others = [arms[i] for i in near if i not in (pick, best)]
        head = (f"Recommendation: {arms[pick]} ({_tok(tok[pick])} tokens/task, Elo {elo[pick]:.0f}) — the cheapest "
                f"arm within the noise ({pct} interval) of the best, {arms[best]} (Elo {elo[best]:.0f}, "
                f"{_tok(tok[best])} tokens/task)" + (f"; also within noise: {', '.join(others)}" if others else "")
                + ".")  # fmt: skip
        if pick == best:
            head = (f"Recommendation: {arms[best]} ({_tok(tok[best])} tokens/task, Elo {elo[best]:.0f}) — the best "
                    f"arm, and no cheaper arm is within its noise ({pct} interval).")  # fmt: skip
    lines = [head] + [f"Frontier step: {s['text']}" for s in steps[:MAX_STEP_LINES]]
    if len(steps) > MAX_STEP_LINES:  # many arms: the rest are in report.json's recommendation.steps
        lines.append(
            f"… and {len(steps) - MAX_STEP_LINES} more frontier steps (report.json recommendation.steps)"
        )
    under = _under_budget(arms, elo, tok, cost, elo_s, level, budget, valid)
    if under is not None:
        lines.append(under["text"])
    return {"status": status, "arm": arm, "best": arms[best], "within_noise": [arms[i] for i in near],
            "steps": steps, "budget": under, "level": level, "lines": lines}  # fmt: skip


def _under_budget(arms: Sequence[str], elo: np.ndarray, tok: np.ndarray, cost: np.ndarray | None,
                  elo_s: np.ndarray | None, level: float, budget: Budget | None,
                  valid: list[int]) -> dict[str, Any] | None:  # fmt: skip
    """The best arm whose tokens (or cost) per task fit the budget, and the cheapest within its noise."""
    if budget is None:
        return None
    spend = cost if budget.usd else tok
    if spend is None:
        return {"budget": budget.describe(), "arm": None,
                "text": f"Budget {budget.describe()}: the run has no prices (set them with --prices)."}  # fmt: skip
    fit = [i for i in valid if not math.isnan(spend[i]) and spend[i] <= budget.amount]
    if not fit:
        cheapest = min(valid, key=lambda i: spend[i])
        return {
            "budget": budget.describe(),
            "arm": None,
            "text": f"Budget {budget.describe()}: no arm fits (the cheapest, {arms[cheapest]}, needs "
            + (f"${spend[cheapest]:.5f}" if budget.usd else f"{_tok(spend[cheapest])} tokens")
            + " per task).",
        }
    best = max(fit, key=lambda i: elo[i])
    near = [i for i in _within_noise(best, elo_s, elo, level) if i in fit]
    pick = min(near, key=lambda i: (spend[i], -elo[i]))
    used = f"${spend[pick]:.5f}" if budget.usd else f"{_tok(spend[pick])} tokens"
    text = f"Budget {budget.describe()}: {arms[pick]} (Elo {elo[pick]:.0f}, {used} per task)"
    if pick != best:
        text += (
            f", within the noise of the strongest arm under the budget, {arms[best]} (Elo {elo[best]:.0f})"
        )
    return {"budget": budget.describe(), "arm": arms[pick], "best": arms[best], "text": text + "."}


def recommend_result(result: Any, budget: Budget | None = None) -> dict[str, Any]:
    """recommend() over an AnalysisResult: its arms, Elo, tokens per task, bootstrap and (when priced) cost."""
    cost = None
    if result.cost_table is not None:
        by = {r["arm"]: r["cost_per_task"] for r in result.cost_table.iter_rows(named=True)}
        cost = np.array([by.get(a) if by.get(a) is not None else math.nan for a in result.arms], dtype=float)
    return recommend(result.arms, result.elo, result.tokens_per_task, result.elo_samples,
                     level=result.options.level, cost=cost, budget=budget)  # fmt: skip
