"""`ept compare` (the regression gate) and `ept report` (one self-contained HTML file)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

# run_options / run_options_info live with the other surface options (no cli_report <-> surface_options
# import cycle); named here too because the viewer, `ept analyze` and tests import them from this module.
from elo_per_token.analysis.surface_options import run_options as run_options
from elo_per_token.analysis.surface_options import run_options_info as run_options_info

if TYPE_CHECKING:
    from elo_per_token.analysis.compare_types import CompareResult


def register(app: typer.Typer) -> None:
    """Add this stage's commands (compare, report) to `app`.

    Args:
        app: The root `ept` app.
    """
    app.command("compare")(compare)
    app.command("report")(report)


_CompareBaselineOpt = Annotated[
    str,
    typer.Argument(
        help="Baseline run: a ledger run folder/URL (…/runs/ID), a run id in ./ept-out/ledger, or a folder of logs."
    ),
]
_CompareFailOnOpt = Annotated[
    str,
    typer.Option(
        "--fail-on",
        help="Thresholds on the interval: elo-drop=POINTS, tokens-rise=PCT% or tokens-rise=TOKENS; 'none' only "
        "reports. Exit 1 when an arm's whole interval is past a threshold.",
    ),
]
_CompareMarkdownOpt = Annotated[
    Path | None, typer.Option("--markdown", help="Write a pull-request comment (markdown) here.")
]
_CompareWeightsOpt = Annotated[
    str | None, typer.Option("--weights", help="Family weights, e.g. math=0.4,code=0.4,tool_use=0.2.")
]
_CompareRoundsOpt = Annotated[
    int | None,
    typer.Option("--rounds", help="Bootstrap rounds (default: the baseline run's table's, else 1000)."),
]
_CompareSeedOpt = Annotated[
    int | None, typer.Option("--seed", help="Bootstrap seed (default: the baseline run's, else 0).")
]
_CompareLevelOpt = Annotated[
    float | None,
    typer.Option("--level", help="Interval level of the table (default: the baseline run's, else 0.95)."),
]
_CompareAdjustOpt = Annotated[
    str,
    typer.Option(
        "--adjust",
        help="bonferroni: the rule uses intervals widened for the number of arms tested at once (family-wise "
        "false-alarm control); none: the table's intervals.",
    ),
]
_CompareTasksOpt = Annotated[
    str | None, typer.Option("--tasks", help="JSONL with task_id and family, for logs without them.")
]
_CompareSkipBadOpt = Annotated[
    bool, typer.Option("--skip-bad", help="Skip malformed lines instead of stopping.")
]
_CompareLedgerOpt = Annotated[
    str | None,
    typer.Option("--ledger", help="Ledger holding runs given by id; default ./ept-out/ledger."),
]


def compare(
    baseline: _CompareBaselineOpt,
    current: Annotated[str, typer.Argument(help="Current run, same suites and arms as the baseline.")],
    fail_on: _CompareFailOnOpt = "elo-drop=20",
    markdown: _CompareMarkdownOpt = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write every number as JSON here.")] = None,
    weights: _CompareWeightsOpt = None,
    rounds: _CompareRoundsOpt = None,
    seed: _CompareSeedOpt = None,
    level: _CompareLevelOpt = None,
    adjust: _CompareAdjustOpt = "bonferroni",
    tasks: _CompareTasksOpt = None,
    skip_bad: _CompareSkipBadOpt = False,
    ledger: _CompareLedgerOpt = None,
) -> None:
    """Compare two runs arm by arm; exit 1 on a regression the data supports, 2 when not comparable."""
    from elo_per_token.analysis.compare import compare_runs
    from elo_per_token.analysis.compare_gate import parse_fail_on
    from elo_per_token.analysis.compare_load import load_run
    from elo_per_token.analysis.compare_output import to_json_dict, to_markdown
    from elo_per_token.analysis.level import check_level
    from elo_per_token.analysis.surface_options import compare_options

    rule = parse_fail_on(fail_on)  # bad flags fail before any reading
    if level is not None:
        check_level(level)
    baseline, current = resolve_run(baseline, ledger), resolve_run(current, ledger)
    co = compare_options(baseline, current, rounds=rounds, seed=seed, level=level)
    base = load_run(baseline, skip_bad=skip_bad, tasks_file=tasks)
    cur = load_run(current, skip_bad=skip_bad, tasks_file=tasks)
    res = compare_runs(
        base, cur, rule=rule, weights=weights, rounds=co.rounds, seed=co.seed, level=co.level, adjust=adjust
    )
    if co.note:
        res.notes.append(co.note)
    level = co.level

    _write_all({markdown: to_markdown(res), json_out: _dumps(to_json_dict(res))})
    _print_compare(res, baseline, current, level=level, adjust=adjust)
    raise typer.Exit(res.exit_code)


def _print_compare(res: CompareResult, baseline: str, current: str, *, level: float, adjust: str) -> None:
    """The terminal view of `ept compare`: the per-arm table, the rule, notes and the verdict."""
    from rich.table import Table

    from elo_per_token.analysis.numfmt import fmt
    from elo_per_token.analysis.report import make_console

    con = make_console()  # CI logs and pipes: every column in full, not squeezed to 80
    pct = f"{level * 100:g}%"
    t = Table(title=f"ept compare: baseline {baseline} vs current {current}")
    cols = (
        "arm",
        "Elo base",
        "Elo cur",
        f"ΔElo [{pct}]",
        "tok/task base",
        "tok/task cur",
        f"Δtok [{pct}]",
        "drop caught 80%",
        "status",
    )
    for col in cols:
        t.add_column(col, justify="left" if col in ("arm", "status") else "right", no_wrap=col == "arm")
    for r in res.table.iter_rows(named=True):
        flagged = r["arm"] in res.flagged
        t.add_row(
            r["arm"],
            fmt(r["elo_base"], ".0f"),
            fmt(r["elo_cur"], ".0f"),
            f"{fmt(r['d_elo'], '+.1f')} [{fmt(r['d_elo_lo'], '+.1f')}, {fmt(r['d_elo_hi'], '+.1f')}]",
            fmt(r["tokens_base"], ",.0f"),
            fmt(r["tokens_cur"], ",.0f"),
            f"{fmt(_pct(r['d_tokens_rel']), '+.1f')}% "
            f"[{fmt(_pct(r['d_tokens_rel_lo']), '+.1f')}, {fmt(_pct(r['d_tokens_rel_hi']), '+.1f')}]",
            fmt(r["detectable_drop"], ".0f"),
            "[bold red]REGRESSION[/]" if flagged else "ok",
        )
    con.print(t)
    con.print(
        f"rule: {res.rule.describe()}; applied to {res.gate_level * 100:.4g}% intervals"
        + (f" ({pct} adjusted for {res.table.height} arms)" if adjust == "bonferroni" else ""),
        highlight=False,
    )
    con.print(
        "drop caught 80%: per arm, the smallest true Elo drop this rule flags in 80% of runs of this size; "
        "smaller drops usually pass (docs/compare.md)",
        highlight=False,
    )
    for n in res.notes:
        con.print(f"[yellow]note:[/] {n}", highlight=False)
    for arm in res.flagged:
        con.print(f"[bold red]regression[/] {arm}: " + "; ".join(res.reasons[arm]), highlight=False)
    if not res.flagged:
        con.print("[green]no regression the data supports[/]")


_ReportPathsOpt = Annotated[
    list[str],
    typer.Argument(
        help="A run (ledger run folder/URL, or a run id in ./ept-out/ledger) or call-log paths, dirs, globs."
    ),
]
_ReportWeightsOpt = Annotated[
    str | None,
    typer.Option(
        "--weights",
        help="Family weights, e.g. math=0.4,code=0.4,tool_use=0.2 (default: the run's plan, else equal).",
    ),
]
_ReportAnchorOpt = Annotated[
    str | None,
    typer.Option("--anchor", help="Arm pinned at Elo 1000 (default: the run's plan, else the cheapest)."),
]
_ReportRoundsOpt = Annotated[
    int | None,
    typer.Option(
        "--rounds",
        help="Bootstrap rounds, 0: no intervals (default: the run's plan, as in its table; else 1000).",
    ),
]
_ReportSeedOpt = Annotated[
    int | None, typer.Option("--seed", help="Bootstrap seed (default: the run's plan, else 0).")
]
_ReportLevelOpt = Annotated[
    float | None, typer.Option("--level", help="Interval level (default: the run's, else 0.95).")
]
_ReportL2Opt = Annotated[
    float | None,
    typer.Option("--l2", help="L2 penalty of the Bradley-Terry fit (default: the prior of `ept analyze`)."),
]
_ReportMarginOpt = Annotated[
    float,
    typer.Option(
        "--margin", help="Elo: the recommendation's equivalence margin (as `ept analyze --margin`)."
    ),
]
_ReportTasksOpt = Annotated[
    str | None, typer.Option("--tasks", help="JSONL with task_id and family, for logs without them.")
]
_ReportSkipBadOpt = Annotated[
    bool, typer.Option("--skip-bad", help="Skip malformed lines instead of stopping.")
]
_ReportDropTiesOpt = Annotated[
    bool, typer.Option("--drop-ties", help="Drop tied comparisons instead of half wins.")
]
_ReportLedgerOpt = Annotated[
    str | None,
    typer.Option("--ledger", help="Ledger holding a run given by id; default ./ept-out/ledger."),
]
_ReportPricesOpt = Annotated[
    str | None,
    typer.Option(
        "--prices",
        help="USD per 1M tokens, e.g. in=0.15,cached=0.075,out=0.6 (default: the run's profile prices).",
    ),
]
_ReportBudgetOpt = Annotated[
    str | None,
    typer.Option(
        "--budget",
        help="Tokens (3000, 2.5k) or dollars ($0.002) per task: the recommendation adds the best arm under it.",
    ),
]


def report(
    paths: _ReportPathsOpt,
    out: Annotated[Path, typer.Option("--out", help="The HTML file to write.")] = Path("report.html"),
    weights: _ReportWeightsOpt = None,
    anchor: _ReportAnchorOpt = None,
    rounds: _ReportRoundsOpt = None,
    seed: _ReportSeedOpt = None,
    level: _ReportLevelOpt = None,
    l2: _ReportL2Opt = None,
    margin: _ReportMarginOpt = 10.0,
    tasks: _ReportTasksOpt = None,
    skip_bad: _ReportSkipBadOpt = False,
    drop_ties: _ReportDropTiesOpt = False,
    ledger: _ReportLedgerOpt = None,
    prices: _ReportPricesOpt = None,
    budget: _ReportBudgetOpt = None,
) -> None:
    """Analyse a run and write one self-contained HTML report (plots embedded, no external resources)."""
    from elo_per_token.analysis.html_gather import write_html
    from elo_per_token.analysis.pipeline import AnalysisOptions, analyze
    from elo_per_token.analysis.surface_options import options_note

    inputs = [resolve_run(p, ledger) for p in paths]
    base, source, from_run = run_options_info(inputs)
    opts = AnalysisOptions(
        weights=weights if weights is not None else base.weights,
        anchor=anchor if anchor is not None else base.anchor,
        rounds=rounds if rounds is not None else base.rounds,
        seed=seed if seed is not None else base.seed,
        level=level if level is not None else base.level,
        l2=l2,
        drop_ties=drop_ties,
        skip_bad=skip_bad,
        tasks_file=tasks,
        prices=prices if prices is not None else base.prices,
        budget=budget,
        margin=margin,
    )
    result = analyze(inputs, opts)
    write_html(result, out)
    typer.echo(f"wrote {out} ({opts.rounds} bootstrap rounds, seed {opts.seed}; unset options from {source})")
    note = options_note(opts, base, source, from_run)
    if note:
        typer.echo(f"note: {note}", err=True)


def resolve_run(arg: str, ledger: str | None = None) -> str:
    """A bare run id (e.g. `demo`) that is not a path means that run in `ledger` (default ./ept-out/ledger).

    Args:
        arg: A run id, run folder/URL or a folder of logs.
        ledger: The ledger a bare run id is looked up in (None: ./ept-out/ledger).
    """
    from elo_per_token.analysis.io import resolve_input

    return resolve_input(arg, ledger)


def _pct(x: float | None) -> float | None:
    return None if x is None else x * 100.0


def _dumps(obj: object) -> str:
    import json

    return json.dumps(obj, indent=2, default=str) + "\n"


def _write_all(files: dict[Path | None, str]) -> None:
    """Write each output atomically, only after every number is computed (nothing half-written)."""
    for path, text in files.items():
        if path is None:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.part")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
