"""The headline table's rows, header, title and column legend: rendered from the result's
table (analysis.frontier.headline_table + tie columns), nothing computed here but formatting."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from elo_per_token.analysis.numfmt import fmt_ci as _ci
from elo_per_token.analysis.numfmt import fmt_tokens
from elo_per_token.analysis.numfmt import present as _ok

if TYPE_CHECKING:
    from elo_per_token.analysis.pipeline import AnalysisResult

__all__ = ["HEADLINE_HEADER", "LEGEND", "fmt_step", "frontier_cell", "headline_rows", "headline_title"]

HEADLINE_HEADER = [
    "arm",
    "budget",
    "tokens/task",
    "Δtokens",
    "Elo [CI]",
    "ΔElo [CI]",
    "vs",
    "ΔElo per 1k [CI]",
    "frontier",
    "ties",
    "sep. tasks vs",
]

# One line per column and mark: report.md prints it under the table, README's demo block copies it.
LEGEND = [
    "arm: strategy@budget; [math only] = measured in those families only (off the frontier, ΔElo on shared families)",
    "tokens/task: strategy tokens per task, weighted over families like Elo",
    "Δtokens: token step to the `vs` arm (absolute and % of this arm's cost)",
    "Elo [CI]: merged Bradley-Terry Elo, anchor = 1000, bootstrap interval over tasks at the printed level",
    "ΔElo [CI]: Elo minus the `vs` arm's (a partial arm: on the families both were measured in)",
    "vs: the previous (next-cheaper) arm on the frontier that this row is compared with",
    "ΔElo per 1k: ΔElo / Δtokens x 1000; a reason instead of a number when the step is unresolved, below 3% "
    "of the cost, or the ratio's interval is many times its value",
    "frontier: on / uncertain / off = on the frontier in >= 95% / 5-95% / <= 5% of bootstrap rounds (the share, "
    "in brackets, is a bootstrap share, not a probability; off = dominated or within the noise of a cheaper arm, "
    "not surely off: docs/statistics.md)",
    "ties: share of the arm's comparisons that are ties; sep. tasks vs: tasks on which it and the `vs` arm differ "
    "(what ΔElo rests on)",
]


def _tokens(x: Any) -> str:
    return fmt_tokens(x, 2)  # the headline shows one more decimal than the detail tables


def fmt_step(d: Any, tokens: Any) -> str:
    """'+43 (+0.9%)': enough digits to see a small step.

    Args:
        d: The token step.
        tokens: The arm's tokens per task.
    """
    if not _ok(d):
        return "—"
    pct = f" ({100 * d / tokens:+.1f}%)" if _ok(tokens) and tokens else ""
    return f"{d:+,.0f}{pct}"


def frontier_cell(r: dict[str, Any]) -> str:
    """The frontier band, with the bootstrap share when there is one ('on (97%)').

    Args:
        r: A headline row.
    """
    band = r.get("frontier_band") or ("on" if r.get("frontier") else "off")
    p = r.get("frontier_prob")
    return f"{band} ({p:.0%})" if _ok(p) else band


def _ratio(r: dict[str, Any]) -> str:
    if r.get("per_1k_resolved") is False:
        return r.get("per_1k_note") or "token step unresolved"
    return _ci(r.get("d_elo_per_1k"), r.get("d_elo_per_1k_lo"), r.get("d_elo_per_1k_hi"), nd=1, sign=True)


def headline_rows(rows: list[dict[str, Any]], anchor: str | None = None) -> list[list[str]]:
    """One list of cells per row of the headline table (dicts of analysis.frontier.headline_table).

    Args:
        rows: The table's rows (dicts of its columns).
        anchor: The arm at 1000 Elo (None: not anchored).
    """
    out = []
    for r in rows:
        arm = r["arm"] + (" (anchor)" if r["arm"] == anchor else "")
        if r.get("seen_in"):
            arm += f" [{r['seen_in']}]"
        ties = r.get("tie_share")
        out.append(
            [
                arm,
                str(r["budget_n"]),
                _tokens(r["tokens_per_task"]),
                fmt_step(r.get("d_tokens"), r["tokens_per_task"]),
                _ci(r["elo"], r.get("elo_lo"), r.get("elo_hi")),
                _ci(r["d_elo"], r.get("d_elo_lo"), r.get("d_elo_hi"), sign=True),
                r.get("vs") or "—",
                _ratio(r),
                frontier_cell(r),
                "—" if not _ok(ties) else f"{ties:.0%}",
                "—" if r.get("separating_vs") is None else str(r["separating_vs"]),
            ]
        )
    return out


def headline_title(result: AnalysisResult, ci: str) -> str:
    """The title states what the table measures: anchor, intervals, the estimand for missing outcomes,
    renormalised weights, and what ΔElo is against.

    Args:
        result: The analysis result.
        ci: The interval level as shown ("95%").
    """
    parts = [f"anchor {result.anchor} = 1000", ci, "ΔElo vs the previous frontier arm", *result.title_notes]
    return "Diminishing returns (" + "; ".join(parts) + ")"
