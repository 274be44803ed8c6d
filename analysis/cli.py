"""Commands of the analysis stage: `ept analyze` and `ept tokens`, added to the `ept` app by ept.cli."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from elo_per_token.contracts.errors import InputError

if TYPE_CHECKING:  # annotations only: the CLI imports its stages when a command runs
    from rich.console import Console

    from elo_per_token.analysis.io import BadLine
    from elo_per_token.analysis.pipeline import AnalysisOptions, AnalysisResult

PATHS_HELP = (
    "A run id (in --ledger), a run folder or s3://…/runs/<id> URL, or call logs: files, directories (recursive), "
    "globs or s3://bucket/prefix; JSONL, .jsonl.gz, Parquet."
)
BUDGET_HELP = (
    "Tokens (3000, 2.5k) or dollars ($0.002) per task: the recommendation adds the best arm under it."
)
LEDGER_HELP = "Ledger holding a RUN given by id (folder or s3://bucket/prefix); default: ./ept-out/ledger."


def resolve_inputs(paths: list[str], ledger: str | None) -> list[str]:
    """The command's paths with each bare run id resolved to that run's folder or URL in `ledger`.

    Args:
        paths: The command's paths or run ids.
        ledger: The ledger a bare run id is looked up in (None: ./ept-out/ledger).
    """
    from elo_per_token.analysis.io import resolve_input

    return [resolve_input(p, ledger) for p in paths]


def _write_text_or_stdout(dest: str, text: str) -> None:
    if dest == "-":
        sys.stdout.write(text)
    else:
        Path(dest).write_text(text, encoding="utf-8")


def _print_skipped(skipped: Sequence[BadLine], err: Console) -> None:
    if skipped:
        err.print(f"[yellow]--skip-bad: skipped {len(skipped)} bad line(s):[/]", highlight=False)
        for b in skipped[:20]:
            err.print(f"  {b}", highlight=False, soft_wrap=True)
        if len(skipped) > 20:
            err.print(
                f"  … and {len(skipped) - 20} more (all listed in report.json with --out)", highlight=False
            )


def tokens_cmd(
    paths: Annotated[list[str], typer.Argument(help=PATHS_HELP)],
    csv: Annotated[
        str | None, typer.Option("--csv", help="Also write the table as CSV to this file ('-' = stdout).")
    ] = None,
    json_out: Annotated[
        str | None, typer.Option("--json", help="Also write the table as JSON to this file ('-' = stdout).")
    ] = None,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip bad lines (reported) instead of stopping.")
    ] = False,
    tasks: Annotated[
        str | None, typer.Option("--tasks", hidden=True, help="Accepted for symmetry with analyze; unused.")
    ] = None,
    ledger: Annotated[str | None, typer.Option("--ledger", help=LEDGER_HELP)] = None,
) -> None:
    """Tokens per arm (strategy, budget): calls, prompt/completion/total tokens, tasks, tokens per task."""
    from rich.console import Console

    from elo_per_token.analysis.io import TOKENS_FIELDS, read_summary
    from elo_per_token.analysis.report import make_console, print_tokens
    from elo_per_token.analysis.tokens import (
        arm_tokens_from_groups,
        calls_of,
        judge_tokens_from_groups,
        record_groups,
    )

    err = Console(emoji=False, stderr=True)
    # Only call records count; outcome and judgment lines are still read (grouped apart) and validated.
    paths = resolve_inputs(paths, ledger)
    summary = read_summary(paths, record_groups, skip_bad=skip_bad, fields=TOKENS_FIELDS)
    summary.frame = calls_of(summary.frame)
    if summary.frame.height == 0:
        raise InputError(
            "no call records in the input", file=summary.files[0] if len(summary.files) == 1 else None
        )
    table = arm_tokens_from_groups(summary.frame)
    judge = judge_tokens_from_groups(summary.frame)
    to_stdout = "-" in (csv, json_out)
    print_tokens(table, judge, make_console(stderr=to_stdout))
    if csv:
        _write_text_or_stdout(csv, table.write_csv())
    if json_out:
        doc = {"arms": table.to_dicts(), "judge": judge.to_dicts(), "files": summary.files}
        _write_text_or_stdout(json_out, json.dumps(doc, indent=2) + "\n")
    _print_skipped(summary.skipped, err)


# Unset, these come from a run's manifest (the options its own table used), as `ept report` does.
WEIGHTS_HELP = "Family weights, e.g. math=0.4,code=0.4,tool_use=0.2 (default: a run's plan, as in its table; else equal)."
ANCHOR_HELP = "Arm pinned at Elo 1000, e.g. greedy@1 (default: a run's plan, else the cheapest arm)."
ROUNDS_HELP = (
    "Bootstrap rounds (resampling tasks within families); 0 = none (default: a run's plan, as in its "
    "table; else 1000)."
)
MARGIN_HELP = (
    "Elo: the recommendation calls an arm equivalent to the best only when the interval of their "
    "difference lies within +-MARGIN; otherwise 'not separated'."
)
MISSING_HELP = (
    "Outcomes without a score: shared = compare arms on the tasks every arm answered (default), "
    "loss = count a missing score as a loss, drop = each arm on the tasks it answered."
)


def _checked_inputs(
    opts: AnalysisOptions,
    paths: list[str],
    ledger: str | None,
    top: int | None,
    unset: frozenset[str] = frozenset(),
) -> tuple[AnalysisOptions, list[str]]:
    """Options checked before any (long) reading, the inputs resolved; the options in `unset` (not given on
    the command line) and, without --prices, the prices: the run's own (its manifest: the options its table
    used), so `ept analyze RUN` prints the sweep's numbers; a note on stderr when the options used differ from
    the run's (analysis.surface_options.options_note)."""
    from dataclasses import replace

    from elo_per_token.analysis.cli_report import run_options_info
    from elo_per_token.analysis.surface_options import options_note

    opts.validate()
    if top is not None and top < 1:
        raise InputError(f"must be >= 1, got {top}", field="--top")
    paths = resolve_inputs(paths, ledger)
    run, source, from_run = run_options_info(paths)
    fill = {k: getattr(run, k) for k in unset if from_run}
    if opts.prices is None:
        fill["prices"] = run.prices
    opts = replace(opts, **fill)
    note = options_note(opts, run, source, from_run)
    if note:
        from rich.console import Console

        Console(emoji=False, stderr=True).print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
    return opts, paths


_OutOpt = Annotated[
    str | None, typer.Option("--out", help="Write report.md, arms.csv, report.json and PNG plots here.")
]
_SeedOpt = Annotated[
    int | None, typer.Option("--seed", help="Bootstrap seed (default: a run's plan, else 0).")
]
_LevelOpt = Annotated[
    float | None, typer.Option("--level", help="Interval level (default: a run's, else 0.95).")
]
_L2Opt = Annotated[
    float | None,
    typer.Option(
        "--l2",
        help="L2 penalty of the Bradley-Terry fit (default: a prior of one virtual tie per arm, l2 = 0.125).",
    ),
]
_MinTasksOpt = Annotated[
    int,
    typer.Option(
        "--min-tasks",
        help="Families with fewer tasks are left out of the merge and the weights renormalised (with a warning); smaller families cannot show their own task-to-task variance.",
    ),
]
_DropTiesOpt = Annotated[
    bool, typer.Option("--drop-ties", help="Drop ties instead of counting half a win each way.")
]
_SkipBadOpt = Annotated[
    bool, typer.Option("--skip-bad", help="Skip bad lines (reported) instead of stopping.")
]
_TasksOpt = Annotated[str | None, typer.Option("--tasks", help="JSONL tasks file with task_id and family.")]
_PricesOpt = Annotated[
    str | None,
    typer.Option(
        "--prices",
        help="USD per 1M tokens, e.g. in=0.15,cached=0.075,out=0.6: cost per task, ΔElo per $1.",
    ),
]
_HtmlOpt = Annotated[
    str | None, typer.Option("--html", help="Also write a self-contained HTML report to this file.")
]
_TranscriptOpt = Annotated[
    str | None,
    typer.Option("--transcript", help="Also write the command and its terminal output as a markdown file."),
]
_TopOpt = Annotated[
    int | None,
    typer.Option(
        "--top", help="Terminal tables: only the N arms with the highest Elo (files keep every arm)."
    ),
]
_ArmsOpt = Annotated[
    str | None,
    typer.Option(
        "--arms",
        help="Terminal tables: only arms whose label contains PATTERN; * and ? are wildcards, e.g. 'best_of_n@*'.",
    ),
]

_NoCacheOpt = Annotated[
    bool,
    typer.Option(
        "--no-cache",
        help="Store no analysis of a compacted run for `ept view` (as EPT_ANALYZE_CACHE=0).",
    ),
]


def analyze_cmd(
    paths: Annotated[list[str], typer.Argument(help=PATHS_HELP)],
    out: _OutOpt = None,
    weights: Annotated[str | None, typer.Option("--weights", help=WEIGHTS_HELP)] = None,
    anchor: Annotated[str | None, typer.Option("--anchor", help=ANCHOR_HELP)] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", help=ROUNDS_HELP)] = None,
    seed: _SeedOpt = None,
    level: _LevelOpt = None,
    margin: Annotated[float, typer.Option("--margin", help=MARGIN_HELP)] = 10.0,
    l2: _L2Opt = None,
    min_tasks: _MinTasksOpt = 5,
    drop_ties: _DropTiesOpt = False,
    missing: Annotated[str, typer.Option("--missing", help=MISSING_HELP)] = "shared",
    skip_bad: _SkipBadOpt = False,
    tasks: _TasksOpt = None,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="With --out: skip the PNG plots.")] = False,
    prices: _PricesOpt = None,
    budget: Annotated[str | None, typer.Option("--budget", help=BUDGET_HELP)] = None,
    html: _HtmlOpt = None,
    transcript: _TranscriptOpt = None,
    ledger: Annotated[str | None, typer.Option("--ledger", help=LEDGER_HELP)] = None,
    top: _TopOpt = None,
    arms: _ArmsOpt = None,
    no_cache: _NoCacheOpt = False,
) -> None:
    """Elo per token: Bradley-Terry per family, weighted merge, bootstrap CIs, diminishing-returns table.

    With many arms the terminal tables are grouped by strategy; narrow them with --top / --arms."""
    from elo_per_token.analysis.pipeline import AnalysisOptions

    given = {"weights": weights, "anchor": anchor, "rounds": rounds, "seed": seed, "level": level}
    unset = frozenset(k for k, v in given.items() if v is None)
    opts = AnalysisOptions(
        **{k: v for k, v in given.items() if v is not None},  # type: ignore[arg-type]
        l2=l2,
        margin=margin,
        drop_ties=drop_ties,
        skip_bad=skip_bad,
        tasks_file=tasks,
        min_tasks=min_tasks,
        prices=prices,
        missing=missing,
        budget=budget,
    )
    opts, paths = _checked_inputs(opts, paths, ledger, top, unset)
    _analyze_and_report(
        paths,
        opts,
        out=out,
        html=html,
        transcript=transcript,
        top=top,
        arms=arms,
        plots=not no_plots,
        cache=not no_cache,
    )


def _analyze_and_report(
    paths: list[str],
    opts: AnalysisOptions,
    *,
    out: str | None,
    html: str | None,
    transcript: str | None,
    top: int | None,
    arms: str | None,
    plots: bool,
    cache: bool = True,
) -> None:
    """Analyse, print the terminal report, write the files asked for and say what was written."""
    from rich.console import Console

    from elo_per_token.analysis.report import make_console, print_report
    from elo_per_token.analysis.report_files import write_outputs
    from elo_per_token.analysis.runcache import analyze_cache_on, save_run_analysis, state_before
    from elo_per_token.ledger.memo import read_once

    err = Console(emoji=False, stderr=True)
    # One scope: the run's indexes and key records are parsed once for the state, the read and the check.
    with read_once():
        # A compacted run's state: the analysis is left for `ept view` under it.
        before = state_before(paths) if analyze_cache_on(not cache) else None
        result = _analyze_with_progress(paths, opts, err)
        save_run_analysis(paths, opts, result, before)
    console = make_console(record=transcript is not None)
    print_report(result, console, top=top, arms=arms)
    written = write_outputs(result, out, plots=plots) if out else []
    if html:
        from elo_per_token.analysis.html_gather import write_html

        written.append(write_html(result, html))
    for p in written:
        err.print(f"wrote {p}", highlight=False)
    _print_skipped(result.skipped, err)
    if transcript:
        _write_transcript(transcript, console.export_text())


def _analyze_with_progress(paths: list[str], opts: AnalysisOptions, err: Console) -> AnalysisResult:
    """Run the analysis with a transient progress bar on stderr (reading, then the bootstrap rounds)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from elo_per_token.analysis.pipeline import analyze

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        job = bar.add_task("reading inputs", total=max(opts.rounds, 1))

        def progress(done: int) -> None:
            bar.update(job, description="bootstrap rounds", completed=done)

        def step(name: str) -> None:
            bar.update(job, description=name)

        return analyze(paths, opts, progress=progress, on_step=step)


def _write_transcript(path: str, text: str) -> None:
    """The command line and its terminal output as a markdown file (how docs/example-report.md is made)."""
    cmd = "ept " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    Path(path).write_text(
        f"# Example report\n\nProduced by:\n\n```\n{cmd}\n```\n\nTerminal output:\n\n```\n{text}```\n",
        encoding="utf-8",
    )


def register(app: typer.Typer) -> None:
    """Add this stage's commands to `app`.

    Args:
        app: The root `ept` app.
    """
    app.command("analyze")(analyze_cmd)
    app.command("tokens")(tokens_cmd)
