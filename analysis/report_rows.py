"""The report's table rows and headers, shared by the terminal report (analysis.report) and report.md (analysis.report_markdown); rendered from the result, nothing computed here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from elo_per_token.analysis.numfmt import fmt_ci, fmt_num, fmt_tokens
from elo_per_token.analysis.numfmt import present as _ok

if TYPE_CHECKING:  # annotations only: importing the pipeline would load numpy/scipy
    from elo_per_token.analysis.pipeline import AnalysisResult


def _per_1k_cell(r: dict[str, Any]) -> str:
    # A ratio over a token step whose interval includes 0 could be anything: say so instead of a number.
    if r.get("per_1k_resolved") is False:
        return r.get("per_1k_note") or "token step unresolved"
    return fmt_ci(r["d_elo_per_1k"], r.get("d_elo_per_1k_lo"), r.get("d_elo_per_1k_hi"), nd=1)


def _frontier_cell(r: dict[str, Any]) -> str:
    """The band (on / uncertain / off, analysis.frontier.band) with the bootstrap share of rounds on the
    frontier when known; the point label alone without rounds."""
    from elo_per_token.analysis.frontier import band

    prob = r.get("frontier_prob")
    label = band(r["frontier"], prob if _ok(prob) else None)
    return f"{label} ({prob:.0%})" if _ok(prob) else label


def returns_rows(table: pl.DataFrame, anchor: str | None = None) -> list[list[str]]:
    """The returns table as text rows: arm (anchor and `vs` arm marked), tokens per task, Elo and its steps with intervals.

    Args:
        table: The returns table (analysis.returns).
        anchor: The arm at 1000 Elo (None: not anchored).
    """
    rows = []
    for r in table.iter_rows(named=True):
        arm = r["arm"] + (" (anchor)" if r["arm"] == anchor else "")
        if r.get("vs"):
            arm += f" vs {r['vs']}"
        rows.append(
            [
                arm,
                str(r["budget_n"]),
                fmt_tokens(r["tokens_per_task"]),
                fmt_ci(r["elo"], r.get("elo_lo"), r.get("elo_hi")),
                fmt_ci(r["d_elo"], r.get("d_elo_lo"), r.get("d_elo_hi"), sign=True),
                _per_1k_cell(r),
                _frontier_cell(r),
            ]
        )
    return rows


RETURNS_HEADER = [
    "arm",
    "budget",
    "tokens/task",
    "Elo [95% CI]",
    "ΔElo [CI]",
    "ΔElo per 1k tokens [CI]",
    "frontier",
]


TOKENS_HEADER = [
    "arm",
    "strategy",
    "budget",
    "calls",
    "no usage",
    "prompt",
    "completion",
    "total",
    "tasks",
    "tokens/task",
]


def tokens_rows(tokens: pl.DataFrame) -> list[list[str]]:
    """The `ept tokens` table as text rows.

    Args:
        tokens: The `ept tokens` table (analysis.tokens.arm_tokens).
    """
    return [
        [
            r["arm"],
            r["strategy"],
            str(r["budget_n"]),
            str(r["calls"]),
            str(r["calls_missing_usage"]),
            str(r["prompt_tokens"]),
            str(r["completion_tokens"]),
            str(r["total_tokens"]),
            str(r["tasks"]),
            fmt_num(r["avg_tokens_per_task"], 1),
        ]
        for r in tokens.iter_rows(named=True)
    ]


def per_family_pivot(
    result: AnalysisResult, arms: list[str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """(header, rows): arm x family table of each family's Elo, the family weights in the header.

    Args:
        result: The analysis result.
        arms: The arms to show, in order (None: every arm).
    """
    header = ["arm"] + [f"{f} (w={result.family_weights[f]:.2f})" for f in result.families]
    by = {(r["arm"], r["family"]): r for r in result.per_family.iter_rows(named=True)}

    def cell(r: dict[str, Any] | None) -> str:
        return "—" if r is None else fmt_ci(r["elo"], r.get("elo_lo"), r.get("elo_hi"))

    rows = [[arm] + [cell(by.get((arm, f))) for f in result.families] for arm in (arms or result.arms)]
    return header, rows


def level_label(result: AnalysisResult) -> str:
    """The interval level as tables show it ("95%").

    Args:
        result: The analysis result.
    """
    return f"{round(result.options.level * 100)}%"


BREAKDOWN_HEADER = [
    "arm",
    "tasks",
    "answered",
    "lost",
    "failed by class",
    "cut by max_tokens",
    "reasoning",
    "cached in",
]


def _pct(x: float | None) -> str:
    return "—" if x is None or x != x else f"{100 * x:.0f}%"


def breakdown_rows(result: AnalysisResult) -> tuple[list[str], list[list[str]]]:
    """Per arm: tasks attempted / answered / lost (scored 0 with their tokens), failures by class, calls cut by
    max_tokens, reasoning share of completion tokens, cached share of input; cost per task when priced.

    Args:
        result: The analysis result.
    """
    b = result.breakdown
    if b is None or b.height == 0:
        return BREAKDOWN_HEADER, []
    priced = "cost_per_task" in b.columns
    header = BREAKDOWN_HEADER + (["$/task"] if priced else [])
    order = {a: i for i, a in enumerate(result.arms)}
    rows = []
    for r in sorted(b.iter_rows(named=True), key=lambda r: order.get(r["arm"], len(order))):
        row = [
            r["arm"],
            str(r["tasks_attempted"] or 0),
            str(r["tasks_answered"] or 0),
            str(r["tasks_lost"] or 0),
            r["failed_by_class"] or "—",
            str(r["calls_cut_by_max_tokens"] or 0),
            _pct(r["reasoning_share"]),
            _pct(r["cached_share"]),
        ]
        if priced:
            row.append("—" if r["cost_per_task"] is None else f"{r['cost_per_task']:.5f}")
        rows.append(row)
    return header, rows


def cost_rows(result: AnalysisResult) -> list[list[str]]:
    """The priced returns table as text rows: cost per task, Elo and ΔElo per $1 with intervals.

    Args:
        result: The analysis result.
    """
    t = result.cost_table
    if t is None:
        return []
    renamed = t.rename(lambda c: c.replace("cost_per_task", "tokens_per_task").replace("per_usd", "per_1k"))
    rows = returns_rows(renamed.with_columns(pl.col("tokens_per_task") * 1000), result.anchor)
    for r, src in zip(rows, t.iter_rows(named=True), strict=True):
        r[2] = f"{src['cost_per_task']:.5f}"
        r[5] = r[5].replace("token step", "cost step")
        v, lo, hi = src.get("d_elo_per_usd"), src.get("d_elo_per_usd_lo"), src.get("d_elo_per_usd_hi")
        if "unresolved" not in r[5] and v is not None and v == v:
            ci = f" [{_compact(lo)}, {_compact(hi)}]" if lo is not None and hi is not None else ""
            r[5] = _compact(v) + ci
    return rows


def spent_table_rows(result: AnalysisResult) -> tuple[list[str], list[list[str]]]:
    """Per arm: calls and tokens (and USD when priced) of failed attempts (analysis.spent). Calls are those that
    reached the provider; attempts that never did (connection refused) have a column of their own when any.

    Args:
        result: The analysis result.
    """
    rows = result.spent_on_failed_attempts
    priced = any("failed_attempt_usd" in r for r in rows)
    unsent = any(r.get("failed_attempt_unsent") for r in rows)
    header = ["arm", "calls"] + (["not sent (unreachable)"] if unsent else [])
    header += ["prompt tokens", "completion tokens", "tokens"] + (["USD"] if priced else [])
    out = []
    for r in rows:
        row = [str(r["arm"]), str(r["failed_attempt_calls"])]
        row += [str(r.get("failed_attempt_unsent") or 0)] if unsent else []
        row += [
            fmt_tokens(r["failed_attempt_prompt_tokens"]),
            fmt_tokens(r["failed_attempt_completion_tokens"]),
            fmt_tokens(r["failed_attempt_tokens"]),
        ]
        if priced:
            row.append(f"{float(r.get('failed_attempt_usd') or 0.0):.4f}")
        out.append(row)
    return header, out


def _compact(x: float | None) -> str:
    """ΔElo per $1 spans orders of magnitude (a cheap model's task costs fractions of a cent): 124k, 3.2M."""
    if x is None or x != x:
        return "—"
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.1f}"


COST_HEADER = ["arm", "budget", "$/task", "Elo [95% CI]", "ΔElo [CI]", "ΔElo per $1 [CI]", "frontier"]
