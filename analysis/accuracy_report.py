"""Rows and text of the accuracy / pass@k tables and the recommendation, shared by the terminal, report.md,
arms.csv, the HTML report and the viewer (each renders these rows its own way)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from elo_per_token.analysis.pipeline import AnalysisResult


def _pct(v: Any, lo: Any = None, hi: Any = None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    s = f"{100 * v:.1f}%"
    if lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
        s += f" [{100 * lo:.1f}, {100 * hi:.1f}]"
    return s


def pass_k_values(result: AnalysisResult) -> list[int]:
    """The k of the pass@k columns (k = 1 is the accuracy column itself when scores are pass/fail).

    Args:
        result: The analysis result.
    """
    if result.pass_k is None or result.pass_k.height == 0:
        return []
    return sorted(k for k in set(result.pass_k["k"].to_list()) if k > 1)


def score_label(result: AnalysisResult) -> str:
    """'pass@1' when every analysed arm's scores are 0 or 1 (a pass rate), else 'mean score' (partial
    credit, e.g. the built-in code suite's share of tests passed): the name every surface gives the column.

    Args:
        result: The analysis result.
    """
    return score_label_of(result.accuracy.to_dicts() if result.accuracy is not None else [])


def score_label_of(rows: list[dict[str, Any]]) -> str:
    """score_label over report.json's accuracy rows (the HTML page and the viewer read those).

    Args:
        rows: report.json's accuracy rows.
    """
    flags = [r.get("binary") for r in rows if r.get("binary") is not None]
    return "pass@1" if flags and all(flags) else "mean score"


def marked_arm(row: dict[str, Any]) -> str:
    """The arm as every accuracy table shows it: a partial arm carries the headline table's mark.

    Args:
        row: An accuracy row (arm, seen_in).
    """
    return str(row["arm"]) + (f" [{row['seen_in']}]" if row.get("seen_in") else "")


def accuracy_title(result: AnalysisResult) -> str:
    """The accuracy table's title: what the column is, how it is weighted, the estimand and the interval.

    Args:
        result: The analysis result.
    """
    o = result.options
    kind = "pass@1 (every score 0 or 1)" if score_label(result) == "pass@1" else "mean score (partial credit)"
    return f"Accuracy: {kind}, families weighted like Elo, --missing {o.missing}; Clopper-Pearson intervals"


def accuracy_header(result: AnalysisResult) -> list[str]:
    """The accuracy table's column names: arm, the score, counts, then pass@k.

    Args:
        result: The analysis result.
    """
    pct = f"{round(result.options.level * 100)}%"
    return ["arm", f"{score_label(result)} [{pct} CI]", "tasks", "outcomes"] + [
        f"pass@{k} [{pct} CI]" for k in pass_k_values(result)
    ]


def accuracy_rows(result: AnalysisResult, arms: list[str] | None = None) -> list[list[str]]:
    """Per arm: mean score with its task-bootstrap interval, counts, then pass@k (— without replicates).

    Args:
        result: The analysis result.
        arms: The arms to show, in order (None: every arm).
    """
    if result.accuracy is None:
        return []
    pk = {} if result.pass_k is None else {(r["arm"], r["k"]): r for r in result.pass_k.iter_rows(named=True)}
    keep = set(arms) if arms is not None else None
    rows = []
    for r in result.accuracy.iter_rows(named=True):
        if keep is not None and r["arm"] not in keep:
            continue
        row = [
            marked_arm(r),
            _pct(r["accuracy"], r["accuracy_lo"], r["accuracy_hi"]),
            str(r["tasks"]),
            str(r["outcomes"]),
        ]
        for k in pass_k_values(result):
            p = pk.get((r["arm"], k))
            row.append(_pct(p["pass_at_k"], p["pass_at_k_lo"], p["pass_at_k_hi"]) if p else "—")
        rows.append(row)
    return rows


def family_accuracy_pivot(
    result: AnalysisResult, arms: list[str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """arm x family table of mean scores with intervals.

    Args:
        result: The analysis result.
        arms: The arms to show, in order (None: every arm).
    """
    t = result.accuracy_family
    if t is None or t.height == 0:
        return ["arm"], []
    fams = sorted(set(t["family"].to_list()))
    by = {(r["arm"], r["family"]): r for r in t.iter_rows(named=True)}
    rows = []
    for a in arms or result.arms:
        cells = [by.get((a, f)) for f in fams]
        rows.append(
            [a] + [_pct(c["accuracy"], c["accuracy_lo"], c["accuracy_hi"]) if c else "—" for c in cells]
        )
    return ["arm", *fams], rows


def recommendation_lines(result: AnalysisResult) -> list[str]:
    """The recommendation's text lines (analysis.recommend), empty when there is none.

    Args:
        result: The analysis result.
    """
    rec = result.recommendation
    return list(rec.get("lines") or []) if rec else []


def accuracy_csv_columns(result: AnalysisResult) -> pl.DataFrame:
    """arm, accuracy, accuracy_lo, accuracy_hi, pass_at_<k> columns: joined onto arms.csv.

    Args:
        result: The analysis result.
    """
    base = pl.DataFrame({"arm": result.arms}, schema={"arm": pl.String})
    if result.accuracy is None:
        return base
    out = base.join(
        result.accuracy.select("arm", "accuracy", "accuracy_lo", "accuracy_hi"), on="arm", how="left"
    )
    for k in pass_k_values(result):
        assert result.pass_k is not None
        col = result.pass_k.filter(pl.col("k") == k).select(
            "arm",
            pl.col("pass_at_k").alias(f"pass_at_{k}"),
            pl.col("pass_at_k_lo").alias(f"pass_at_{k}_lo"),
            pl.col("pass_at_k_hi").alias(f"pass_at_{k}_hi"),
        )
        out = out.join(col, on="arm", how="left")
    return out
