"""Presenting an AnalysisResult: rich terminal tables, report.md, arms.csv, report.json, plots.

Everything is rendered from the result; nothing here computes statistics. Files are written into a
temporary directory next to the destination and moved into place only when all of them are complete.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from elo_per_token.analysis.accuracy_report import (
    accuracy_csv_columns,
    accuracy_header,
    accuracy_rows,
    accuracy_title,
    family_accuracy_pivot,
    recommendation_lines,
)
from elo_per_token.analysis.numfmt import fmt_ci as fmt_ci
from elo_per_token.analysis.numfmt import fmt_num as fmt_num
from elo_per_token.analysis.numfmt import fmt_tokens as fmt_tokens
from elo_per_token.analysis.numfmt import present as _ok
from elo_per_token.analysis.report_headline import HEADLINE_HEADER, LEGEND, headline_rows, headline_title

if TYPE_CHECKING:  # annotations only: `ept tokens` prints through here and needs none of numpy/scipy
    from elo_per_token.analysis.pipeline import AnalysisResult

# ---------------------------------------------------------------- number formatting


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


def _returns_rows(table: pl.DataFrame, anchor: str | None = None) -> list[list[str]]:
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


def _tokens_rows(tokens: pl.DataFrame) -> list[list[str]]:
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


def _per_family_pivot(
    result: AnalysisResult, arms: list[str] | None = None
) -> tuple[list[str], list[list[str]]]:
    header = ["arm"] + [f"{f} (w={result.family_weights[f]:.2f})" for f in result.families]
    by = {(r["arm"], r["family"]): r for r in result.per_family.iter_rows(named=True)}

    def cell(r: dict[str, Any] | None) -> str:
        return "—" if r is None else fmt_ci(r["elo"], r.get("elo_lo"), r.get("elo_hi"))

    rows = [[arm] + [cell(by.get((arm, f))) for f in result.families] for arm in (arms or result.arms)]
    return header, rows


def _level_label(result: AnalysisResult) -> str:
    return f"{round(result.options.level * 100)}%"


# ---------------------------------------------------------------- terminal


# Width for output that is not a terminal (a pipe, a CI log, `docker compose` output): rich would fall back to
# 80 columns and cut the tables' cells and headers. Tables are drawn at their natural width (never padded to the
# console's), so a wide limit costs nothing and keeps every column in full.
PIPE_WIDTH = 1000


def make_console(*, stderr: bool = False, record: bool = False) -> Console:
    """A console that does not squeeze the tables to 80 columns when output is piped or recorded."""
    c = Console(emoji=False, stderr=stderr, record=record)
    if record or not c.is_terminal:
        c = Console(emoji=False, stderr=stderr, record=record, width=PIPE_WIDTH)
    return c


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


def _breakdown_rows(result: AnalysisResult) -> tuple[list[str], list[list[str]]]:
    """Per arm: tasks attempted / answered / lost (scored 0 with their tokens), failures by class, calls cut by
    max_tokens, reasoning share of completion tokens, cached share of input; cost per task when priced."""
    b = result.breakdown
    if b is None or b.height == 0:
        return BREAKDOWN_HEADER, []
    priced = "cost_per_task" in b.columns
    header = BREAKDOWN_HEADER + (["$/task"] if priced else [])
    order = {a: i for i, a in enumerate(result.arms)}
    rows = []
    for r in sorted(b.iter_rows(named=True), key=lambda r: order.get(r["arm"], len(order))):
        row = [
            r["arm"], str(r["tasks_attempted"] or 0), str(r["tasks_answered"] or 0), str(r["tasks_lost"] or 0),
            r["failed_by_class"] or "—", str(r["calls_cut_by_max_tokens"] or 0),
            _pct(r["reasoning_share"]), _pct(r["cached_share"]),
        ]  # fmt: skip
        if priced:
            row.append("—" if r["cost_per_task"] is None else f"{r['cost_per_task']:.5f}")
        rows.append(row)
    return header, rows


def _cost_rows(result: AnalysisResult) -> list[list[str]]:
    t = result.cost_table
    if t is None:
        return []
    renamed = t.rename(lambda c: c.replace("cost_per_task", "tokens_per_task").replace("per_usd", "per_1k"))
    rows = _returns_rows(renamed.with_columns(pl.col("tokens_per_task") * 1000), result.anchor)
    for r, src in zip(rows, t.iter_rows(named=True), strict=True):
        r[2] = f"{src['cost_per_task']:.5f}"
        r[5] = r[5].replace("token step", "cost step")
        v, lo, hi = src.get("d_elo_per_usd"), src.get("d_elo_per_usd_lo"), src.get("d_elo_per_usd_hi")
        if "unresolved" not in r[5] and v is not None and v == v:
            ci = f" [{_compact(lo)}, {_compact(hi)}]" if lo is not None and hi is not None else ""
            r[5] = _compact(v) + ci
    return rows


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
        _md_table(*_spent_rows(result)),
        "",
    ]


def _spent_rows(result: AnalysisResult) -> tuple[list[str], list[list[str]]]:
    """Per arm: calls and tokens (and USD when priced) of failed attempts (analysis.spent). Calls are those that
    reached the provider; attempts that never did (connection refused) have a column of their own when any."""
    rows = result.spent_on_failed_attempts
    priced = any("failed_attempt_usd" in r for r in rows)
    unsent = any(r.get("failed_attempt_unsent") for r in rows)
    header = ["arm", "calls"] + (["not sent (unreachable)"] if unsent else [])
    header += ["prompt tokens", "completion tokens", "tokens"] + (["USD"] if priced else [])
    out = []
    for r in rows:
        row = [str(r["arm"]), str(r["failed_attempt_calls"])]
        row += [str(r.get("failed_attempt_unsent") or 0)] if unsent else []
        row += [fmt_tokens(r["failed_attempt_prompt_tokens"]), fmt_tokens(r["failed_attempt_completion_tokens"]),
                fmt_tokens(r["failed_attempt_tokens"])]  # fmt: skip
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


def _rx(text: Any) -> str:
    """Untrusted text inside a rich markup string."""
    return escape(str(text))


def _rich_table(
    title: str, header: list[str], rows: list[list[str]], right_from: int = 1, groups: list[str] | None = None
) -> Table:
    """groups: one key per row; a rule is drawn where the key changes (rows grouped by strategy)."""
    t = Table(title=title, title_justify="left", header_style="bold", min_width=len(title))
    for i, h in enumerate(header):
        t.add_column(h, justify="right" if i >= right_from else "left", no_wrap=True)
    for i, r in enumerate(rows):
        # escape: arm labels carry variants in brackets (`best_of_n@4[effort=high]`), which rich reads as markup
        t.add_row(
            *(escape(c) for c in r),
            end_section=groups is not None and i + 1 < len(rows) and groups[i + 1] != groups[i],
        )
    return t


def print_tokens(tokens: pl.DataFrame, judge: pl.DataFrame, console: Console) -> None:
    console.print(
        _rich_table(
            "Tokens per arm (strategy cost; judge calls excluded)", TOKENS_HEADER, _tokens_rows(tokens), 2
        )
    )
    if judge.height:
        rows = [
            [
                r["arm"],
                str(r["judge_calls"]),
                str(r["prompt_tokens"]),
                str(r["completion_tokens"]),
                str(r["total_tokens"]),
            ]
            for r in judge.iter_rows(named=True)
        ]
        console.print(
            _rich_table(
                "Evaluation cost: judge calls per judged arm",
                ["arm", "calls", "prompt", "completion", "total"],
                rows,
            )
        )
    missing = int(tokens["calls_missing_usage"].sum()) if tokens.height else 0
    if missing:
        console.print(
            f"[yellow]warning:[/] {missing} call(s) without usage: those arms' totals are lower bounds"
        )


GROUP_FROM = 30  # more arms shown than this: terminal tables are grouped by strategy
ALL_TABLES_MAX = 60  # more than this, unfiltered: only the main table (the rest is in the files)
MAX_WARNINGS = 20  # terminal only; the files list every warning


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    # Only * and ? are wildcards: arm labels contain [ ] (variants), which fnmatch would read as classes.
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern))


def select_arms(result: AnalysisResult, *, top: int | None = None, pattern: str | None = None) -> list[str]:
    """Arms the terminal shows: those whose label contains PATTERN (`*`, `?` wildcards), then the `top`
    highest by Elo among them. Raises InputError when the filter is invalid or matches no arm."""
    from elo_per_token.contracts.errors import InputError

    arms = list(result.arms)
    if pattern is not None:
        rx = _pattern_regex(pattern)
        arms = [a for a in arms if rx.search(a)]
        if not arms:
            raise InputError(
                f"no arm matches {pattern!r}; arms look like {', '.join(result.arms[:3])}", field="--arms"
            )
    if top is not None:
        if top < 1:
            raise InputError(f"must be >= 1, got {top}", field="--top")
        elo = dict(zip(result.arms, result.elo.tolist(), strict=True))
        best = sorted(arms, key=lambda a: -elo[a] if not math.isnan(elo[a]) else math.inf)[:top]
        arms = [a for a in arms if a in set(best)]
    return arms


def print_recommendation(result: AnalysisResult, console: Console) -> None:
    """The recommendation's lines (analysis.recommend), its first line in bold."""
    for line in recommendation_lines(result):
        bold = line.startswith(("Recommendation", "No recommendation"))
        console.print(f"[bold]{_rx(line)}[/]" if bold else _rx(line), highlight=False, soft_wrap=True)


def print_accuracy(result: AnalysisResult, console: Console, arms: list[str]) -> None:
    """Accuracy / pass@1 and pass@k per arm (analysis.accuracy) for the shown arms."""
    rows = accuracy_rows(result, arms)
    if rows:
        console.print(_rich_table(accuracy_title(result), accuracy_header(result), rows))


def print_report(
    result: AnalysisResult, console: Console, *, top: int | None = None, arms: str | None = None
) -> None:
    """The terminal report. top / arms narrow the tables (see select_arms); the files keep every arm."""
    o = result.options
    ci = f"{_level_label(result)} bootstrap CI, {o.rounds} rounds" if o.rounds else "no bootstrap"
    shown = select_arms(result, top=top, pattern=arms)
    filtered = len(shown) < len(result.arms)
    grouped = len(shown) > GROUP_FROM
    keep = pl.col("arm").is_in(shown)
    table = result.table.filter(keep)
    if grouped:  # by strategy (cheapest strategy first), then tokens; Δ columns still vs the next-cheaper arm
        first = table.group_by("strategy").agg(pl.col("tokens_per_task").min().alias("_s"))
        table = table.join(first, on="strategy").sort(
            "_s", "strategy", "tokens_per_task", maintain_order=True
        )
    title = _rx(headline_title(result, ci))
    if filtered:
        title += f"; {len(shown)} of {len(result.arms)} arms shown, Δ vs the next-cheaper of all arms"
    if grouped:
        title += "; grouped by strategy"
    groups = table["strategy"].to_list() if grouped else None
    print_recommendation(result, console)  # first: the answer to "which arm should I use?"
    console.print(
        _rich_table(title, HEADLINE_HEADER, headline_rows(table.to_dicts(), result.anchor), groups=groups)
    )
    if len(shown) > ALL_TABLES_MAX and not filtered:
        console.print(
            f"{len(shown)} arms: the per-strategy, frontier, per-family and per-arm tables are in report.md / report.json "
            "(--out); narrow the terminal with --top N or --arms PATTERN (e.g. --arms 'best_of_n@*').",
            highlight=False,
            soft_wrap=True,
        )
    else:
        print_accuracy(result, console, table["arm"].to_list())
        per_strategy = result.per_strategy.filter(keep)
        console.print(
            _rich_table(
                "Per strategy: each budget against the previous budget of the same strategy",
                RETURNS_HEADER,
                _returns_rows(per_strategy),
                groups=per_strategy["strategy"].to_list() if grouped else None,
            )
        )
        # No separate "vs previous frontier arm" table: the headline table is already against the previous
        # frontier arm and would repeat it; report.json keeps it as vs_frontier.
        header, rows = _per_family_pivot(result, table["arm"].to_list())
        console.print(
            _rich_table(
                f"Per family: Elo from the family's centred theta [{_level_label(result)} CI]",
                header,
                rows,
                groups=groups,
            )
        )
    few = len(shown) <= ALL_TABLES_MAX or filtered  # same rule as the tables above
    shown_set = set(shown)
    header, rows = _breakdown_rows(result)
    rows = [r for r in rows if r[0] in shown_set]
    if rows and few:
        console.print(_rich_table(
            "Per arm: tasks, failures (lost = scored 0 with their tokens), token split", header, rows
        ))  # fmt: skip
    if result.cost_table is not None and few:
        cost_rows = [r for r in _cost_rows(result) if r[0].removesuffix(" (anchor)") in shown_set]
        console.print(_rich_table(f"Cost (prices {result.options.prices}, USD per 1M tokens)", COST_HEADER,
                                  cost_rows))  # fmt: skip
    if result.spent_on_failed_attempts:
        console.print(
            _rich_table("Spent on failed attempts (billed, not in the tables above)", *_spent_rows(result))
        )
    _print_footer(result, console)


def _print_footer(result: AnalysisResult, console: Console) -> None:
    """What was read (files, calls, outcomes, tasks, weights), then the warnings, the first MAX_WARNINGS."""
    c = result.counts
    console.print(
        f"{c['files']} file(s), {c['calls']} calls ({c['judge_calls']} judge), {c['outcomes']} outcomes, "
        f"{c['judgments']} judgments, {c['tasks']} tasks, {len(result.families)} families; "
        f"weights {', '.join(f'{_rx(f)}={w:.3g}' for f, w in result.family_weights.items())}",
        highlight=False,
        soft_wrap=True,
    )
    for w in result.warnings[:MAX_WARNINGS]:
        console.print(f"[yellow]warning:[/] {_rx(w)}", highlight=False, soft_wrap=True)
    if len(result.warnings) > MAX_WARNINGS:  # many arms can raise one warning each
        console.print(
            f"[yellow]… and {len(result.warnings) - MAX_WARNINGS} more warnings[/] (all in report.md / report.json)",
            highlight=False,
        )


# ---------------------------------------------------------------- files


_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_escape(text: Any) -> str:
    """Names (arms, strategies, families) come from untrusted logs: in report.md they are text, never HTML,
    links, images or emphasis. HTML's three characters become entities; Markdown's inline syntax is escaped."""
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
    out += ["| " + " | ".join(md_escape(c) if i < names else c.replace("|", "\\|") for i, c in enumerate(r)) + " |"
            for r in rows]  # fmt: skip
    return "\n".join(out)


def markdown(result: AnalysisResult, plots: list[str] | None = None) -> str:
    o = result.options
    ci = (
        f"{_level_label(result)} bootstrap intervals over tasks ({o.rounds} rounds, seed {o.seed})"
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
        _md_table(RETURNS_HEADER, _returns_rows(result.per_strategy)),
        "",
        "## Per family",
        "",
        "Elo = 1000 + 400/ln10 · θ, θ centred within the family over the arms it observed.",
        "",
        _md_table(*_per_family_pivot(result)),
        "",
        "## Tokens",
        "",
        _md_table(TOKENS_HEADER, _tokens_rows(result.tokens), names=2),
        "",
        "## Per arm: tasks, failures, token split",
        "",
        "lost = tasks where the strategy failed (context overflow, a refused request after spending tokens) and "
        "was scored 0 with its tokens; reasoning = share of completion tokens the server reported as reasoning; "
        "cached in = share of input tokens served from the prompt cache.",
        "",
        _md_table(*_breakdown_rows(result)),
        "",
    ]
    if result.cost_table is not None:
        parts += [
            f"## Cost (prices {result.options.prices}, USD per 1M tokens)",
            "",
            _md_table(COST_HEADER, _cost_rows(result)),
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
    parts += _md_fits_and_end(result, plots)
    return "\n".join(parts)


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


def arms_csv_frame(result: AnalysisResult) -> pl.DataFrame:
    """The returns table plus each arm's raw token counts."""
    extra = result.tokens.select(
        "arm", "calls", "calls_missing_usage", "prompt_tokens", "completion_tokens", "total_tokens", "tasks"
    )
    return (
        result.table.join(extra, on="arm", how="left")
        .with_columns((pl.col("arm") == result.anchor).alias("anchor"))
        .join(accuracy_csv_columns(result), on="arm", how="left")
    )


def _json_default(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def _clean(x: Any) -> Any:
    """NaN/inf are not JSON: write them as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def write_outputs(
    result: AnalysisResult, out_dir: str | os.PathLike[str], *, plots: bool = True
) -> list[Path]:
    """report.md, arms.csv, report.json and (optionally) PNG plots, moved into out_dir only when complete."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ept-report-", dir=out))
    try:
        names: list[str] = []
        if plots:
            from elo_per_token.analysis.plots import write_plots

            names = write_plots(result, tmp)
        (tmp / "report.md").write_text(markdown(result, names), encoding="utf-8")
        arms_csv_frame(result).write_csv(tmp / "arms.csv")
        doc = _clean(json.loads(json.dumps({**result.to_json(), "plots": names}, default=_json_default)))
        (tmp / "report.json").write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        written = []
        for name in ["report.md", "arms.csv", "report.json", *names]:
            os.replace(tmp / name, out / name)
            written.append(out / name)
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
