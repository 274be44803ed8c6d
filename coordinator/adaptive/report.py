"""The adaptive sweep's report: per arm the decision, why it stopped, tasks and tokens, and the intervals
(their level holds under the adaptive stopping: alpha spent over the rounds, coordinator/adaptive/sequential.py)."""

from __future__ import annotations

from typing import Any

from elo_per_token.coordinator.adaptive.core import AdaptiveResult

__all__ = ["adaptive_json", "classification_line", "print_adaptive"]


def _ci(v: float | None, lo: float | None, hi: float | None, fmt: str) -> str:
    if v is None or lo is None or hi is None:
        return "—"
    return f"{v:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def classification_line(res: AdaptiveResult) -> str:
    """The classification first: counts of on / within / off / open, the margin and the error per arm."""
    st = [r.status for r in res.reports]
    counts = ", ".join(f"{st.count(c)} {c}" for c in ("on", "within", "off", "open") if c in st)
    return f"{counts} · {res.margin.describe()} · each arm's decision wrong with probability <= {res.alpha:g}"


def print_adaptive(res: AdaptiveResult, console: Any, full_tokens: float | None = None) -> None:
    """The per-arm table and one line on the sweep (rounds, tokens, why it stopped)."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(
        title=f"Adaptive sweep: {classification_line(res)} · {res.rounds_run} of {res.rounds_planned} rounds · "
        f"stopped: {res.stop_reason} · intervals hold under the adaptive stopping (z = {res.z_report:.2f}); "
        f"anchor {res.anchor}"
    )
    for col in (
        "arm",
        "frontier",
        "tasks",
        "tokens/task [CI]",
        "ΔElo vs anchor [CI]",
        "ΔElo per 1k [CI]",
        "why it stopped",
    ):
        t.add_column(col)
    for r in sorted(res.reports, key=lambda r: r.tokens_per_task):
        step = r.per_1k
        t.add_row(
            escape(r.arm),
            r.status,
            str(r.tasks),
            _ci(r.tokens_per_task, r.tokens_lo, r.tokens_hi, ",.0f"),
            _ci(r.d_elo, r.d_elo_lo, r.d_elo_hi, "+.0f"),
            _ci(step[1], step[0], step[2], ".1f") if step else "—",
            escape(r.reason),
        )
    console.print(t)
    early = [
        r for r in res.reports if r.stopped_round is not None and r.stopped_round + 1 < res.rounds_planned
    ]
    line = f"tokens spent {res.tokens_spent:,.0f}"
    if full_tokens:
        line += f" of the full grid's {full_tokens:,.0f} ({res.tokens_spent / full_tokens:.1%})"
    line += f"; {len(early)} arm(s) stopped early: " + (
        ", ".join(f"{r.arm} ({r.tasks} tasks)" for r in early) or "none"
    )
    console.print(escape(line), highlight=False)
    if res.unfinished is not None:  # fixed-budget mode: what the cap left open and what finishing would cost
        console.print(escape(res.unfinished.line()), highlight=False)


def adaptive_json(res: AdaptiveResult, full_tokens: float | None = None) -> dict[str, Any]:
    """The report as JSON-ready data."""
    return {
        "rounds_run": res.rounds_run,
        "rounds_planned": res.rounds_planned,
        "stop_reason": res.stop_reason,
        "tokens_spent": res.tokens_spent,
        "full_tokens": full_tokens,
        "anchor": res.anchor,
        "z": res.z_report,
        "epsilon_elo": res.margin.elo,
        "epsilon_tokens": res.margin.tokens,
        "alpha": res.alpha,
        "epsilon_auto": res.margin.auto,
        "margin": res.margin.describe(),
        "arms": [{k: v for k, v in r.__dict__.items()} for r in res.reports],
        "unfinished": None if res.unfinished is None else res.unfinished.__dict__,
    }
