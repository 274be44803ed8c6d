"""`ept import batch|inspect`: other tools' logs -> a records JSONL that `ept analyze` reads (docs/imports.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from elo_per_token.contracts.errors import InputError, printable

if TYPE_CHECKING:
    from elo_per_token.analysis.imports.common import Collector

import_app = typer.Typer(
    help="Other tools' logs (OpenAI Batch API, inspect_ai) -> records for `ept analyze`.",
    no_args_is_help=True,
)


def _finish(col: Collector, out: str, what: str) -> None:
    from collections import Counter

    from rich.console import Console

    from elo_per_token.analysis.cli import _print_skipped
    from elo_per_token.analysis.imports.common import write_records

    err = Console(emoji=False, stderr=True)
    kinds = Counter(r["kind"] for r in col.records)
    if not kinds.get("call") and not kinds.get("outcome"):
        raise InputError(f"no records found in the {what}")
    write_records(col.records, out)
    arms = sorted({r["arm"] for r in col.records})
    tasks = {r["task_id"] for r in col.records}
    # Arm names come from the user's files (custom_ids, metadata): escape control characters before a terminal
    # sees them (an OSC 52 sequence in an arm name would write the clipboard).
    typer.echo(
        printable(
            f"{out}: {kinds.get('call', 0)} call and {kinds.get('outcome', 0)} outcome records; "
            f"{len(tasks)} tasks, arms: {', '.join(arms)}"
        )
    )
    for note in col.notes:
        err.print(f"note: {printable(note)}", highlight=False, markup=False)
    _print_skipped(col.skipped, err)
    typer.echo(f"next: ept analyze {out}")


_OutputsOpt = Annotated[
    list[str] | None, typer.Argument(help="Batch output file(s) (JSONL from the batch's output_file_id)")
]
_InputFileOpt = Annotated[
    str | None,
    typer.Option("--input", help="the batch input file (request body.metadata maps custom_id)"),
]
_MappingOpt = Annotated[
    str | None, typer.Option("--mapping", help="CSV/JSONL: custom_id, task_id, arm, replicate, family")
]
_IdTemplateOpt = Annotated[
    str | None,
    typer.Option("--id-template", help="parse custom_id, e.g. '{task_id}__{arm}__r{replicate}'"),
]
_OutcomesOpt = Annotated[
    str | None,
    typer.Option(
        "--outcomes", help="CSV/JSONL scores: custom_id (or task_id, arm, replicate) + score|correct"
    ),
]
_WriteTemplateOpt = Annotated[
    str | None,
    typer.Option("--write-template", help="write a mapping CSV to fill in, from --input, and stop"),
]
_SkipBadOpt = Annotated[
    bool, typer.Option("--skip-bad", help="Skip bad lines (reported) instead of stopping.")
]


@import_app.command("batch")
def batch_cmd(
    outputs: _OutputsOpt = None,
    out: Annotated[str | None, typer.Option("--out", "-o", help="records JSONL to write")] = None,
    input_file: _InputFileOpt = None,
    mapping: _MappingOpt = None,
    id_template: _IdTemplateOpt = None,
    outcomes: _OutcomesOpt = None,
    write_template: _WriteTemplateOpt = None,
    skip_bad: _SkipBadOpt = False,
) -> None:
    """OpenAI Batch API output -> call records (usage per response) + outcome records (your scores)."""
    from elo_per_token.analysis.imports.batch import import_batch, mapping_template
    from elo_per_token.analysis.imports.common import Collector

    if write_template:
        if not input_file:
            raise InputError("--write-template needs --input (the batch input file)", field="input")
        import polars as pl

        rows = mapping_template(input_file, Collector(skip_bad=skip_bad))
        pl.DataFrame(rows, schema=["custom_id", "task_id", "arm", "replicate", "family"]).write_csv(
            write_template
        )
        typer.echo(
            f"{write_template}: {len(rows)} custom_ids; fill in task_id and arm (replicate, family optional), "
            f"then pass it as --mapping"
        )
        return
    if not outputs:
        raise InputError("give the batch output file(s)", field="outputs")
    if not out:
        raise InputError("give --out records.jsonl", field="out")
    col = import_batch(
        outputs,
        input_file=input_file,
        mapping=mapping,
        id_template=id_template,
        outcomes=outcomes,
        skip_bad=skip_bad,
    )
    _finish(col, out, "batch output")


@import_app.command("inspect")
def inspect_cmd(
    logs: Annotated[
        list[str], typer.Argument(help="inspect_ai eval logs (.eval or .json) or folders of them")
    ],
    out: Annotated[str, typer.Option("--out", "-o", help="records JSONL to write")],
    arm_from: Annotated[
        str,
        typer.Option(
            "--arm-from",
            help="arm name: auto | model | task | solver | "
            "a task/model arg or generate-config key (e.g. temperature) | file",
        ),
    ] = "auto",
    score_key: Annotated[
        str | None, typer.Option("--score", help="which scorer's score becomes the outcome (default: first)")
    ] = None,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip bad samples/logs (reported) instead of stopping.")
    ] = False,
) -> None:
    """inspect_ai eval logs -> call records (per-sample model usage) + outcome records (scores)."""
    from elo_per_token.analysis.imports.inspect_log import import_inspect

    col = import_inspect(logs, arm_from=arm_from, score_key=score_key, skip_bad=skip_bad)
    _finish(col, out, "inspect logs")


def register(app: typer.Typer) -> None:
    """Add the `import` commands (batch, inspect) to `app`.

    Args:
        app: The root `ept` app.
    """
    app.add_typer(import_app, name="import")
