"""Presenting an AnalysisResult in the terminal: rich tables, the recommendation, warnings.

Everything is rendered from the result; nothing here computes statistics. The table rows are in
analysis.report_rows (shared with report.md, analysis.report_markdown); the files (report.md, arms.csv,
report.json, plots) are written by analysis.report_files.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from elo_per_token.analysis.accuracy_report import (
    accuracy_header,
    accuracy_rows,
    accuracy_title,
    recommendation_lines,
)
from elo_per_token.analysis.report_headline import HEADLINE_HEADER, headline_rows, headline_title
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

if TYPE_CHECKING:  # annotations only: `ept tokens` prints through here and needs none of numpy/scipy
    from elo_per_token.analysis.pipeline import AnalysisResult

# ---------------------------------------------------------------- terminal


# Width for output that is not a terminal (a pipe, a CI log, `docker compose` output): rich would fall back to
# 80 columns and cut the tables' cells and headers. Tables are drawn at their natural width (never padded to the
# console's), so a wide limit costs nothing and keeps every column in full.
PIPE_WIDTH = 1000


def make_console(*, stderr: bool = False, record: bool = False) -> Console:
    """A console that does not squeeze the tables to 80 columns when output is piped or recorded.

    Args:
        stderr: Print to stderr instead of stdout.
        record: Keep what is printed (for --transcript).
    """
    c = Console(emoji=False, stderr=stderr, record=record)
    if record or not c.is_terminal:
        c = Console(emoji=False, stderr=stderr, record=record, width=PIPE_WIDTH)
    return c


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
    """The `ept tokens` tables: per arm, then judge calls per judged arm when there are any.

    Args:
        tokens: The `ept tokens` table (analysis.tokens.arm_tokens).
        judge: Judge calls per judged arm (analysis.tokens.judge_tokens).
        console: The rich console to print to.
    """
    console.print(
        _rich_table(
            "Tokens per arm (strategy cost; judge calls excluded)", TOKENS_HEADER, tokens_rows(tokens), 2
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
    highest by Elo among them. Raises InputError when the filter is invalid or matches no arm.

    Args:
        result: The analysis result.
        top: Keep the N arms with the highest Elo (None: all).
        pattern: Keep arms whose label contains it (`*`, `?` wildcards; None: all).
    """
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
    """The recommendation's lines (analysis.recommend), its first line in bold.

    Args:
        result: The analysis result.
        console: The rich console to print to.
    """
    for line in recommendation_lines(result):
        bold = line.startswith(("Recommendation", "No recommendation"))
        console.print(f"[bold]{_rx(line)}[/]" if bold else _rx(line), highlight=False, soft_wrap=True)


def print_accuracy(result: AnalysisResult, console: Console, arms: list[str]) -> None:
    """Accuracy / pass@1 and pass@k per arm (analysis.accuracy) for the shown arms.

    Args:
        result: The analysis result.
        console: The rich console to print to.
        arms: The arms shown, in order.
    """
    rows = accuracy_rows(result, arms)
    if rows:
        console.print(_rich_table(accuracy_title(result), accuracy_header(result), rows))


def print_report(
    result: AnalysisResult, console: Console, *, top: int | None = None, arms: str | None = None
) -> None:
    """The terminal report (the files keep every arm).

    Args:
        result: the analysis.
        console: where to print.
        top: show the top arms only (see select_arms).
        arms: the --arms selection (see select_arms).
    """
    o = result.options
    ci = f"{level_label(result)} bootstrap CI, {o.rounds} rounds" if o.rounds else "no bootstrap"
    shown = select_arms(result, top=top, pattern=arms)
    filtered = len(shown) < len(result.arms)
    grouped = len(shown) > GROUP_FROM
    keep = pl.col("arm").is_in(shown)
    table = result.table.filter(keep)
    if grouped:  # by strategy (cheapest strategy first), then tokens; Δ columns still vs the next-cheaper arm
        table = _by_strategy(table)
    title = _title(result, ci, len(shown), filtered, grouped)
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
        _print_detail_tables(result, console, table, keep, groups)
    few = len(shown) <= ALL_TABLES_MAX or filtered  # same rule as the tables above
    _print_arm_tables(result, console, set(shown), few)
    _print_footer(result, console)


def _by_strategy(table: pl.DataFrame) -> pl.DataFrame:
    """The headline rows grouped by strategy, the strategy with the cheapest arm first, then by tokens."""
    first = table.group_by("strategy").agg(pl.col("tokens_per_task").min().alias("_s"))
    return table.join(first, on="strategy").sort("_s", "strategy", "tokens_per_task", maintain_order=True)


def _title(result: AnalysisResult, ci: str, n_shown: int, filtered: bool, grouped: bool) -> str:
    """The headline table's title: what it shows, then whether arms are left out or grouped."""
    title = _rx(headline_title(result, ci))
    if filtered:
        title += f"; {n_shown} of {len(result.arms)} arms shown, Δ vs the next-cheaper of all arms"
    if grouped:
        title += "; grouped by strategy"
    return title


def _print_arm_tables(result: AnalysisResult, console: Console, shown: set[str], few: bool) -> None:
    """Per arm breakdown and cost of the shown arms (when `few` enough for the terminal), then the spend on
    failed attempts."""
    header, rows = breakdown_rows(result)
    rows = [r for r in rows if r[0] in shown]
    if rows and few:
        title = "Per arm: tasks, failures (lost = scored 0 with their tokens), token split"
        console.print(_rich_table(title, header, rows))
    if result.cost_table is not None and few:
        shown_cost = [r for r in cost_rows(result) if r[0].removesuffix(" (anchor)") in shown]
        title = f"Cost (prices {result.options.prices}, USD per 1M tokens)"
        console.print(_rich_table(title, COST_HEADER, shown_cost))
    if result.spent_on_failed_attempts:
        console.print(
            _rich_table(
                "Spent on failed attempts (billed, not in the tables above)", *spent_table_rows(result)
            )
        )


def _print_detail_tables(
    result: AnalysisResult, console: Console, table: pl.DataFrame, keep: pl.Expr, groups: list[str] | None
) -> None:
    """Accuracy, per strategy and per family of the shown arms (`table`, `keep`); groups: each row's strategy
    when the tables are grouped by strategy, else None."""
    print_accuracy(result, console, table["arm"].to_list())
    per_strategy = result.per_strategy.filter(keep)
    console.print(
        _rich_table(
            "Per strategy: each budget against the previous budget of the same strategy",
            RETURNS_HEADER,
            returns_rows(per_strategy),
            groups=per_strategy["strategy"].to_list() if groups is not None else None,
        )
    )
    # No separate "vs previous frontier arm" table: the headline table is already against the previous
    # frontier arm and would repeat it; report.json keeps it as vs_frontier.
    header, rows = per_family_pivot(result, table["arm"].to_list())
    console.print(
        _rich_table(
            f"Per family: Elo from the family's centred theta [{level_label(result)} CI]",
            header,
            rows,
            groups=groups,
        )
    )


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
