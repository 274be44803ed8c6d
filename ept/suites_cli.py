"""`ept suites ...`: list, show and validate task suites; measure strategy accuracy on the simulator."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from elo_per_token.contracts.errors import InputError

suites_app = typer.Typer(
    help="Task suites: list, show, validate; strategy accuracy on the simulator.", no_args_is_help=True
)


def _register_graders() -> None:
    """Graders added in worker/graders/ bring their option checks to suite validation when the registry is
    imported (contracts/graders.py says why validation cannot import it itself)."""
    import elo_per_token.worker.graders  # noqa: F401


@suites_app.command("list")
def list_cmd() -> None:
    """The built-in suites with task counts and graders."""
    from collections import Counter

    from rich.table import Table

    from elo_per_token.suites.load import builtin_suite_names, builtin_suite_path, load_builtin_suite

    table = Table("suite", "tasks", "families", "graders", "categories", "mean difficulty", "file")
    for name in builtin_suite_names():
        tasks = load_builtin_suite(name)
        graders = Counter(t["grader"]["type"] for t in tasks)
        fams = sorted({t["family"] for t in tasks})
        diff = sum(t.get("difficulty", 0.5) for t in tasks) / len(tasks)
        cats = Counter(t["meta"]["category"] for t in tasks if "category" in (t.get("meta") or {}))
        table.add_row(
            name,
            str(len(tasks)),
            ",".join(fams),
            ",".join(f"{k}:{v}" for k, v in graders.items()),
            " ".join(f"{k}:{v}" for k, v in cats.items()) or "-",
            f"{diff:.2f}",
            str(builtin_suite_path(name)),
        )
    from elo_per_token.suites.public import INSTALL, not_installed

    for name in not_installed():  # known to ept, its data package missing: say how to get it
        table.add_row(
            name, "-", "-", "-", "-", "-", f"not installed: {INSTALL.get(name, 'install its package')}"
        )
    _console().print(table)


def _console() -> Any:
    """A console that does not cut tables at 80 columns when the output is a pipe."""
    from rich.console import Console

    c = Console(emoji=False)
    return c if c.is_terminal else Console(emoji=False, width=1000)


@suites_app.command("show")
def show_cmd(
    suite: Annotated[str, typer.Argument(help="built-in suite name or JSONL path")],
    task_id: Annotated[str | None, typer.Option("--task", help="show this task in full")] = None,
    limit: Annotated[int, typer.Option(help="tasks to list")] = 5,
) -> None:
    """Show tasks of a suite (one in full with --task)."""
    import json

    from elo_per_token.suites.load import load_suite_ref

    _register_graders()
    tasks = load_suite_ref(suite)
    if task_id is not None:
        found = [t for t in tasks if t["task_id"] == task_id]
        if not found:
            raise InputError(f"no task '{task_id}' in suite", file=suite, field="task_id")
        typer.echo(json.dumps(found[0], indent=2, ensure_ascii=False))
        return
    for t in tasks[:limit]:
        # A loaded task has a prompt or messages (validated), so the fallback is never shown.
        prompt = t.get("prompt") or (t.get("messages") or [{"content": ""}])[-1]["content"]
        typer.echo(
            f"{t['task_id']}  [{t['family']}, {t['grader']['type']}, d={t.get('difficulty', '-')}]  {prompt[:100]}"
        )
    if len(tasks) > limit:
        typer.echo(f"... {len(tasks) - limit} more")


@suites_app.command("validate")
def validate_cmd(path: Annotated[str, typer.Argument(help="JSONL or Parquet suite file")]) -> None:
    """Validate a suite file; exit 2 with file:line: field on the first problem."""
    from elo_per_token.suites.load import load_suite

    _register_graders()
    tasks = load_suite(path)
    typer.echo(f"{path}: {len(tasks)} tasks OK")


@suites_app.command("import")
def import_cmd(
    src: Annotated[str, typer.Argument(help="table to convert: .jsonl, .jsonl.gz, .json, .parquet or .csv")],
    out: Annotated[
        str | None, typer.Option("--out", "-o", help="suite file to write (JSONL); required unless --dry-run")
    ] = None,
    shape: Annotated[
        str, typer.Option(help="qa (question/answer table), code (HumanEval-style) or auto")
    ] = "auto",
    family: Annotated[
        str | None, typer.Option(help="task family (default: the file's name; a 'family' column wins)")
    ] = None,
    grader: Annotated[str, typer.Option(help="qa tables: auto, numeric, math, normalised or exact")] = "auto",
    prefix: Annotated[str, typer.Option(help="prepended to every task id")] = "",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="convert and print the first tasks; write nothing")
    ] = False,
    show: Annotated[int, typer.Option(help="tasks printed by --dry-run")] = 3,
) -> None:
    """Convert a question/answer or HumanEval-style table into a suite (validated; all or nothing)."""
    import json
    from pathlib import Path

    from elo_per_token.coordinator.suite_import import convert, write_jsonl

    if not dry_run and not out:
        raise InputError("give --out FILE.jsonl (or --dry-run)", field="out")
    if dry_run:
        # Every row is converted and validated (errors show now, not at import); only the shown ones
        # get their docstring examples checked in the sandbox.
        used, tasks = convert(
            Path(src), shape=shape, family=family, grader=grader, prefix=prefix, check_visible=False
        )
        _, first = convert(Path(src), shape=used, family=family, grader=grader, prefix=prefix, limit=show)
        for t in first:
            typer.echo(json.dumps(t, indent=2, ensure_ascii=False))
        typer.echo(
            f"dry run: {src} read as a '{used}' table, {len(tasks)} tasks valid; first {len(first)} shown; "
            "nothing written"
        )
        return
    used, tasks = convert(Path(src), shape=shape, family=family, grader=grader, prefix=prefix)
    from collections import Counter

    assert out is not None  # checked above: --out is required without --dry-run
    write_jsonl(tasks, Path(out))
    graders = Counter(t["grader"]["type"] for t in tasks)
    typer.echo(
        f"{out}: {len(tasks)} tasks from {src} ('{used}' table; graders "
        f"{', '.join(f'{k}:{v}' for k, v in sorted(graders.items()))})"
    )


def parse_arms(spec: str) -> list[tuple[str, int]]:
    """'greedy@1,majority@8' -> [("greedy", 1), ("majority", 8)], checked against the registry."""
    from elo_per_token.worker.strategies import get_strategy

    arms = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, n = part.partition("@")
        if not n.isdigit() or int(n) < 1:
            raise InputError(f"arm '{part}' must look like strategy@n with n >= 1", field="arms")
        get_strategy(name)
        arms.append((name, int(n)))
    if not arms:
        raise InputError("no arms given", field="arms")
    return arms


@suites_app.command("accuracy")
def accuracy_cmd(
    tasks: Annotated[int, typer.Option(help="tasks drawn evenly from the suites; jobs = tasks x arms")] = 300,
    arms: Annotated[
        str, typer.Option(help="comma-separated strategy@n")
    ] = "greedy@1,majority@4,majority@8,majority@16,best_of_n@4,best_of_n@8,best_of_n@16",
    families: Annotated[str, typer.Option(help="built-in suites to draw from")] = "math,code,tool_use",
    seed: Annotated[int, typer.Option()] = 0,
    workers: Annotated[int, typer.Option(help="jobs run side by side")] = 8,
    supports_n: Annotated[
        bool, typer.Option(help="ask for n choices in one request (fewer calls, same samples' role)")
    ] = False,
) -> None:
    """Accuracy, calls and tokens per arm on the built-in suites against an in-process simulator (markdown)."""
    import time

    from elo_per_token.coordinator.suite_accuracy import draw_tasks, markdown, run_arms, summarise
    from elo_per_token.suites.load import builtin_suite_names

    arm_list = parse_arms(arms)
    fams = [f.strip() for f in families.split(",") if f.strip()]
    unknown = sorted(set(fams) - set(builtin_suite_names()))
    if unknown:
        raise InputError(
            f"unknown suite '{unknown[0]}' (known: {', '.join(builtin_suite_names())})", field="families"
        )
    if tasks < len(fams):
        raise InputError("need at least one task per suite", field="tasks")
    t0 = time.time()
    drawn = draw_tasks(tasks, fams, seed)
    rows = run_arms(drawn, arm_list, seed=seed, workers=workers, supports_n=supports_n)
    typer.echo(markdown(summarise(rows)))
    typer.echo(
        f"\n{len(rows)} jobs ({len(drawn)} tasks x {len(arm_list)} arms, seed {seed}, "
        f"supports_n={supports_n}) in {time.time() - t0:.0f}s"
    )


def register(app: typer.Typer) -> None:
    """Add this stage's commands to `app`."""
    app.add_typer(suites_app, name="suites")
