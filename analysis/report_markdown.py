"""report.md: the analysis result as Markdown (the same tables as the terminal report, escaped)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from elo_per_token.analysis.accuracy_report import (
    accuracy_header,
    accuracy_rows,
    accuracy_title,
    family_accuracy_pivot,
    recommendation_lines,
)
from elo_per_token.analysis.report_headline import HEADLINE_HEADER, LEGEND, headline_rows, headline_title
from elo_per_token.analysis.report_rows import (
    COST_HEADER,
    RETURNS_HEADER,
    TOKENS_HEADER,
    breakdown_rows,
    cost_rows,
    level_label,
    per_family_pivot,
    returns_rows,
    spent_table_rows,
    tokens_rows,
)

if TYPE_CHECKING:  # annotations only: importing the pipeline would load numpy/scipy
    from elo_per_token.analysis.pipeline import AnalysisResult


def _md_spent(result: AnalysisResult) -> list[str]:
    if not result.spent_on_failed_attempts:
        return []
    return [
        "## Spent on failed attempts",
        "",
        "Billed calls of attempts whose result is not the job's record (failed and retried or resumed, a "
        "duplicate copy, or lost with a killed worker): not in the tables above; an arm's spend is its tokens "
        "plus these.",
        "",
        _md_table(*spent_table_rows(result)),
        "",
    ]


_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_escape(text: Any) -> str:
    """Names (arms, strategies, families) come from untrusted logs: in report.md they are text, never HTML,
    links, images or emphasis. HTML's three characters become entities; Markdown's inline syntax is escaped.

    Args:
        text: Any value (shown as str).
    """
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")
    return _MD_SPECIAL.sub(r"\\\1", s)


def _md_vs(rows: list[list[str]]) -> list[list[str]]:
    """The headline rows with their `vs` cell (an arm name, untrusted like the arm column) Markdown-escaped."""
    i = HEADLINE_HEADER.index("vs")
    return [[md_escape(c) if j == i else c for j, c in enumerate(r)] for r in rows]


def _md_table(header: list[str], rows: list[list[str]], names: int = 1) -> str:
    """A Markdown table; the header and the first `names` columns (arm, strategy) are escaped, the numbers
    (ours) are written as they are."""
    out = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += [
        "| "
        + " | ".join(md_escape(c) if i < names else c.replace("|", "\\|") for i, c in enumerate(r))
        + " |"
        for r in rows
    ]
    return "\n".join(out)


def markdown(result: AnalysisResult, plots: list[str] | None = None) -> str:
    """report.md: the run's tables, recommendation, fits and inputs.

    Args:
        result: the analysis.
        plots: the plot files to link (None: none).
    """
    o = result.options
    ci = (
        f"{level_label(result)} bootstrap intervals over tasks ({o.rounds} rounds, seed {o.seed})"
        if o.rounds
        else "no bootstrap"
    )
    parts = [
        "# Elo per token",
        "",
        f"Anchor: **{md_escape(result.anchor)}** = 1000. {ci}. Family weights: "
        + ", ".join(f"{md_escape(f)}={w:.3g}" for f, w in result.family_weights.items())
        + ".",
        "",
        *_md_recommendation(result),
        "## Diminishing returns",
        "",
        md_escape(headline_title(result, ci)) + ".",
        "",
        _md_table(HEADLINE_HEADER, _md_vs(headline_rows(result.table.to_dicts(), result.anchor))),
        "",
        *[f"- {md_escape(line)}" for line in LEGEND],
        "",
        *_md_accuracy(result),
        "## Per strategy",
        "",
        "Each budget against the previous budget of the same strategy.",
        "",
        _md_table(RETURNS_HEADER, returns_rows(result.per_strategy)),
        "",
        "## Per family",
        "",
        "Elo = 1000 + 400/ln10 · θ, θ centred within the family over the arms it observed.",
        "",
        _md_table(*per_family_pivot(result)),
        "",
        "## Tokens",
        "",
        _md_table(TOKENS_HEADER, tokens_rows(result.tokens), names=2),
        "",
        "## Per arm: tasks, failures, token split",
        "",
        "lost = tasks where the strategy failed (context overflow, a refused request after spending tokens) and "
        "was scored 0 with its tokens; reasoning = share of completion tokens the server reported as reasoning; "
        "cached in = share of input tokens served from the prompt cache.",
        "",
        _md_table(*breakdown_rows(result)),
        "",
    ]
    parts += _md_costs(result)
    parts += _md_fits_and_end(result, plots)
    return "\n".join(parts)


def _md_costs(result: AnalysisResult) -> list[str]:
    """The cost table when priced, what failed attempts spent, and the judges' tokens."""
    parts: list[str] = []
    if result.cost_table is not None:
        parts += [
            f"## Cost (prices {result.options.prices}, USD per 1M tokens)",
            "",
            _md_table(COST_HEADER, cost_rows(result)),
            "",
        ]
    parts += _md_spent(result)
    if result.judge_tokens.height:
        parts += [
            "Judge calls (evaluation cost, not strategy cost): "
            + ", ".join(
                f"{md_escape(r['arm'])}: {r['total_tokens']} tokens"
                for r in result.judge_tokens.iter_rows(named=True)
            ),
            "",
        ]
    return parts


def _md_recommendation(result: AnalysisResult) -> list[str]:
    lines = recommendation_lines(result)
    return ["## Recommendation", "", *[f"- {md_escape(x)}" for x in lines], ""] if lines else []


def _md_accuracy(result: AnalysisResult) -> list[str]:
    rows = accuracy_rows(result)
    if not rows:
        return []
    header, fam_rows = family_accuracy_pivot(result)
    return [
        "## Accuracy",
        "",
        md_escape(accuracy_title(result))
        + ". Per task the mean over replicates, per family the mean over tasks. pass@k: the unbiased estimator "
        "1 - C(n-c, k)/C(n, k) over tasks with n >= k replicates (c passed).",
        "",
        _md_table(accuracy_header(result), rows),
        "",
        "Per family:",
        "",
        _md_table(header, fam_rows),
        "",
    ]


def _md_fits_and_end(result: AnalysisResult, plots: list[str] | None) -> list[str]:
    """The end of report.md: the fits, warnings, plots, inputs and versions."""
    parts: list[str] = []
    parts += ["## Fits", ""]
    for f in result.fits:
        unobs = f" unobserved arms: {', '.join(md_escape(a) for a in f.unobserved)}." if f.unobserved else ""
        parts.append(
            f"- {md_escape(f.family)}: {f.tasks} tasks, comparison weight {f.comparisons:g}, "
            f"{'converged' if f.converged else 'NOT converged'} in {f.n_iter} iterations.{unobs}"
        )
    parts.append("")
    if result.warnings:
        parts += ["## Warnings", ""] + [f"- {md_escape(w)}" for w in result.warnings] + [""]
    if plots:
        parts += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    parts += [
        "## Inputs",
        "",
        *[f"- {md_escape(f)}" for f in result.inputs[:50]],
        *([f"- … and {len(result.inputs) - 50} more"] if len(result.inputs) > 50 else []),
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in result.versions.items()),
        "",
    ]
    return parts
