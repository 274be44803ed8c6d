"""The report's files: report.md, arms.csv, report.json and the plots, moved into place only when all are complete."""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from elo_per_token.analysis.accuracy_report import (
    accuracy_csv_columns,
)
from elo_per_token.analysis.report_markdown import markdown

if TYPE_CHECKING:  # annotations only: importing the pipeline would load numpy/scipy
    from elo_per_token.analysis.pipeline import AnalysisResult


def arms_csv_frame(result: AnalysisResult) -> pl.DataFrame:
    """The returns table plus each arm's raw token counts.

    Args:
        result: The analysis result.
    """
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
    """report.md, arms.csv, report.json and (optionally) PNG plots, moved into out_dir only when complete.

    Args:
        result: The analysis result.
        out_dir: The folder to write into.
        plots: Also write the PNG plots.
    """
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
