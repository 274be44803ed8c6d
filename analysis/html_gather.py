"""The HTML report's data, gathered before anything is rendered: `build_document` reads what the page needs
(report.json's numbers, the token split of the validated records, failures by class from the data files and
the ledger, the run's manifest) into one typed HtmlDocument (analysis.html_document); analysis.html only
renders it.

This module is the report's I/O edge: it reads the inputs and the ledger and writes the page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elo_per_token.analysis.html_document import HtmlDocument

if TYPE_CHECKING:  # annotations only: polars and the pipeline are imported where a report is gathered
    import polars as pl
    from polars._typing import PolarsDataType

    from elo_per_token.analysis.pipeline import AnalysisResult


def token_split(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Calls and tokens by (arm, role) from analysis.io's normalised records frame.

    Args:
        frame: The result's validated records.
    """
    import polars as pl

    calls = frame.filter(pl.col("kind") == "call")
    if calls.height == 0:
        return []
    return (
        calls.with_columns(pl.col("role").fill_null("unspecified"))
        .group_by("arm", "role")
        .agg(
            pl.len().alias("calls"),
            pl.col("prompt_tokens").sum().alias("prompt_tokens"),
            pl.col("completion_tokens").sum().alias("completion_tokens"),
            pl.col("usage_missing").sum().cast(pl.Int64).alias("calls_missing_usage"),
            pl.col("task_id").n_unique().alias("tasks"),
        )
        .sort("arm", "role")
        .to_dicts()
    )


def failures_by_class(
    files: Sequence[str], failure_objects: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Failed jobs per (arm, error class): outcome lines with an `error`, plus the ledger's failure objects
    for jobs that never wrote a result (a job counted in both is counted once, by its job key).

    Args:
        files: the run's outcome files.
        failure_objects: the ledger's failure objects (each with its job_key).
    """
    import polars as pl

    rows = _failed_outcomes(*_failure_sources(files))
    seen = set(rows["job_key"].drop_nulls().to_list())
    extra = [
        {
            "arm": _failure_arm(k, f),
            "error_class": _failure_class(f),
            "job_key": k,
            "tokens": _failure_tokens(f),
        }
        for k, f in ((str(f.get("job_key", "")), f) for f in failure_objects)
        if not k or k not in seen
    ]
    if extra:
        rows = pl.concat([rows, pl.DataFrame(extra, schema=rows.schema)])
    if rows.height == 0:
        return []
    return (
        rows.group_by("arm", "error_class")
        .agg(pl.len().alias("count"), pl.col("tokens").sum().alias("tokens_unrecorded"))
        .sort("arm", "error_class")
        .to_dicts()
    )


def _failed_outcomes(jsonl: list[str], segments: list[str]) -> pl.DataFrame:
    """(arm, error_class, job_key, tokens) of each outcome line with an `error` in `jsonl` and `segments`."""
    import polars as pl

    from elo_per_token.analysis.io import storage_options

    schema: dict[str, PolarsDataType] = {
        "kind": pl.String,
        "arm": pl.String,
        "strategy": pl.String,
        "budget_n": pl.Int64,
        "job_key": pl.String,
        "error": pl.Struct({"class": pl.String}),
    }
    rows = pl.DataFrame(
        schema={"arm": pl.String, "error_class": pl.String, "job_key": pl.String, "tokens": pl.Int64}
    )
    arm = pl.coalesce("arm", pl.col("strategy") + "@" + pl.col("budget_n").cast(pl.String)).alias("arm")
    # This job's calls are in the ledger, so already in the token and cost tables.
    no_tokens = pl.lit(0, pl.Int64).alias("tokens")
    failed = (pl.col("kind") == "outcome") & pl.col("error").is_not_null()
    if jsonl:
        opts = storage_options() if any(f.startswith("s3://") for f in jsonl) else None
        rows = (
            pl.scan_ndjson(jsonl, schema=schema, storage_options=opts)
            .filter(failed)
            .select(
                arm,
                pl.col("error").struct.field("class").fill_null("unknown").alias("error_class"),
                "job_key",
                no_tokens,
            )
            .collect()
        )
    if segments:
        opts = storage_options() if any(f.startswith("s3://") for f in segments) else None
        # A segment holds each job's lines as written, `error` as its JSON text; a job in two segments
        # (compactions that overlapped) is one job, as the analysis reads it.
        in_segments = (
            pl.scan_parquet(segments, storage_options=opts)
            .filter(failed)
            .select(
                arm,
                pl.col("error").str.json_path_match("$.class").fill_null("unknown").alias("error_class"),
                "job_key",
                no_tokens,
            )
            .unique("job_key", keep="first", maintain_order=True)
            .collect()
        )
        rows = pl.concat([in_segments, rows])
    return rows


def _failure_sources(files: Sequence[str]) -> tuple[list[str], list[str]]:
    """(JSON Lines inputs, run segments) to read failed outcomes from. A run's `…/jobs/` entry in the inputs
    stands for the job objects no segment holds (analysis.io.read_run): with the run's segments among the
    inputs only those objects are read, not the whole folder (100k objects: 14 s, every one already in a
    segment). Parquet files that are not a run's segments hold no failures this report counts."""
    from elo_per_token.analysis.io import open_run, run_source
    from elo_per_token.ledger import JOB_SUFFIX
    from elo_per_token.ledger.keyspace import unindexed_keys
    from elo_per_token.ledger.segments import read_index, seg_name, segment_state

    jsonl: list[str] = []
    segments: list[str] = []
    given = set(files)
    for f in files:
        src = run_source(f) if f.endswith("/jobs/") else None
        if src is None:
            if not f.endswith(".parquet"):
                jsonl.append(f)
            continue
        led = open_run(src)
        committed = segment_state(led, src.run_id).committed
        urls = [led.blob_url(src.run_id, seg_name(n)) for n in committed]
        if not committed or not given.issuperset(urls):  # the objects alone were read
            jsonl.append(f)
            continue
        segments += urls
        tail, _ = unindexed_keys(led, src.run_id, read_index(led, src.run_id, committed))
        jsonl += [f"{led.run_url(src.run_id)}/jobs/{k}{JOB_SUFFIX}" for k in tail]
    return jsonl, segments


def _failure_tokens(f: Mapping[str, Any]) -> int:
    """Tokens a job spent before it failed without writing a result (its calls are in no table). A failure written
    with spent objects (`spent_tokens` present, contracts.spent) has its calls recorded there: none unrecorded."""
    if "spent_tokens" in f:
        return 0
    t = f.get("tokens")
    return int(t) if isinstance(t, int) and not isinstance(t, bool) and t > 0 else 0


def _failure_class(f: Mapping[str, Any]) -> str:
    err = f.get("error")
    if isinstance(err, Mapping) and err.get("class"):
        return str(err["class"])
    return str(f.get("error_class") or f.get("class") or "unknown")


def _failure_arm(key: str, f: Mapping[str, Any]) -> str:
    if f.get("arm"):
        return str(f["arm"])
    job = f.get("job")
    if isinstance(job, Mapping) and job.get("strategy") is not None:
        from elo_per_token.contracts.jobs import arm_label, params_variant

        return arm_label(
            str(job["strategy"]), int(job.get("budget_n", 0)), params_variant(job.get("params") or {})
        )
    parts = key.split("/")
    return parts[2] if len(parts) >= 4 else "unknown"  # job keys are family/task/arm/rN


def build_document(result: AnalysisResult) -> HtmlDocument:
    """The page's data: report.json's numbers (result.to_json()) plus the run's token split (from the
    result's validated records), failures by class and manifest (from the inputs and the ledger).

    Args:
        result: The analysis result.
    """
    from datetime import UTC, datetime

    from elo_per_token.analysis.io import read_failures, read_manifest, read_records, runs_of_files

    data = result.to_json()
    frame = result.records
    if frame is None:  # an AnalysisResult built without its records: read the inputs again
        frame = read_records(result.inputs, skip_bad=True, tasks_file=result.options.tasks_file).frame
    refs = runs_of_files(list(result.inputs))
    manifest = read_manifest(refs[0]) if len(refs) == 1 else None
    failure_objs: list[dict[str, Any]] = []
    for ref in refs:
        failure_objs += [{"job_key": k, **v} for k, v in read_failures(ref).items()]
    run_name = refs[0].run_id if len(refs) == 1 else None
    warnings = list(data.get("warnings") or [])
    if len(refs) > 1:
        warnings.insert(0, f"the inputs hold {len(refs)} runs; no single run manifest is shown")
    return HtmlDocument(
        title=f"elo-per-token report: {run_name}" if run_name else "elo-per-token report",
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        inputs=[r.url for r in refs] if refs else _shown_inputs(list(data["inputs"])),
        options=data["options"],
        warnings=warnings,
        returns=data["table"],
        anchor=data["anchor"],
        families=data["per_family"],
        token_split=token_split(frame),
        failures=failures_by_class(list(result.inputs), failure_objs),
        breakdown=data.get("breakdown") or [],
        cost_table=data.get("cost_table") or [],
        per_strategy=data.get("per_strategy") or [],
        vs_frontier=data.get("vs_frontier") or [],
        recommendation=data.get("recommendation"),
        accuracy=data.get("accuracy") or [],
        accuracy_family=data.get("accuracy_family") or [],
        pass_at_k=data.get("pass_at_k") or [],
        manifest=manifest,
        counts=data["counts"],
        versions=data["versions"],
    )


def _shown_inputs(inputs: list[str]) -> list[str]:
    """Plain log files as the page lists them: the first five, then how many there are."""
    return inputs if len(inputs) <= 5 else [*inputs[:5], f"… {len(inputs)} files"]


def write_html_doc(doc: HtmlDocument, path: str | Path) -> Path:
    """Render and write atomically (a half-written report never replaces a good one).

    Args:
        doc: The page's data (build_document).
        path: The HTML file to write.
    """
    from elo_per_token.analysis.html import render_html

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.part")
    tmp.write_text(render_html(doc), encoding="utf-8")
    tmp.replace(p)
    return p


def write_html(result: AnalysisResult, path: str | Path) -> Path:
    """The `--html` hook for `ept analyze` and the body of `ept report`: one self-contained file.

    Args:
        result: The analysis result.
        path: The HTML file to write.
    """
    return write_html_doc(build_document(result), path)
