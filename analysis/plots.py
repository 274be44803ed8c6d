"""PNG plots of an AnalysisResult (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl

from analysis.pipeline import AnalysisResult

PLOT_FILES = ("elo_vs_tokens.png", "d_elo_per_1k.png", "per_family_elo.png")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _err(vals: list[Any], los: list[Any], his: list[Any]) -> list[list[float]]:
    """Asymmetric error bars; 0 where an interval is missing."""

    def ok(x: Any) -> bool:
        return x is not None and not math.isnan(x)

    lower = [v - lo if ok(v) and ok(lo) else 0.0 for v, lo in zip(vals, los, strict=True)]
    upper = [hi - v if ok(v) and ok(hi) else 0.0 for v, hi in zip(vals, his, strict=True)]
    return [lower, upper]


def plot_elo_vs_tokens(table: pl.DataFrame, path: Path, level_label: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    x = table["tokens_per_task"].to_list()
    y = table["elo"].to_list()
    ax.errorbar(
        x, y, yerr=_err(y, table["elo_lo"].to_list(), table["elo_hi"].to_list()),
        fmt="o", color="tab:blue", ecolor="tab:gray", capsize=3, label=f"arm (Elo, {level_label} CI)",
    )
    front = table.filter(pl.col("frontier"))
    ax.plot(front["tokens_per_task"], front["elo"], "-", color="tab:orange", label="compute-optimal frontier (point estimate)")
    # P = share of bootstrap rounds in which the arm is on the frontier (the orange line is the point estimate).
    probs = table["frontier_prob"].to_list() if "frontier_prob" in table.columns else [None] * table.height
    for arm, xi, yi, pr in zip(table["arm"], x, y, probs, strict=True):
        label = arm if pr is None else f"{arm} (P={pr:.0%})"
        ax.annotate(label, (xi, yi), textcoords="offset points", xytext=(4, 6), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("tokens per task (log scale)")
    ax.set_ylabel("Elo")
    ax.set_title("Elo vs tokens per task")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_d_elo_per_1k(table: pl.DataFrame, path: Path, level_label: str) -> None:
    plt = _plt()
    rows = table.filter(pl.col("d_elo_per_1k").is_not_null())
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    vals = rows["d_elo_per_1k"].to_list()
    ax.bar(
        range(rows.height), vals, color="tab:green",
        yerr=_err(vals, rows["d_elo_per_1k_lo"].to_list(), rows["d_elo_per_1k_hi"].to_list()), capsize=3,
    )
    ax.set_xticks(range(rows.height), rows["arm"].to_list(), rotation=20, ha="right", fontsize=8)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel("ΔElo per 1k tokens (vs previous row)")
    ax.set_title(f"Marginal Elo per 1k tokens ({level_label} CI)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_per_family(result: AnalysisResult, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    xs = range(len(result.arms))
    for fam in result.families:
        sub = result.per_family.filter(pl.col("family") == fam)
        by_arm = dict(zip(sub["arm"].to_list(), sub["elo"].to_list(), strict=True))
        ys = [by_arm.get(a) if by_arm.get(a) is not None else float("nan") for a in result.arms]
        ax.plot(xs, ys, "o-", label=f"{fam} (w={result.family_weights[fam]:.2f})")
    ax.plot(xs, result.elo, "k--", label="merged (anchored)")
    ax.set_xticks(list(xs), result.arms, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("Elo (family-centred)")
    ax.set_title("Per-family Elo by arm (arms ordered by tokens per task)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_plots(result: AnalysisResult, out_dir: Path) -> list[str]:
    """Write the three PNGs into out_dir; returns their file names."""
    label = f"{round(result.options.level * 100)}%"
    plot_elo_vs_tokens(result.table, out_dir / PLOT_FILES[0], label)
    plot_d_elo_per_1k(result.table, out_dir / PLOT_FILES[1], label)
    plot_per_family(result, out_dir / PLOT_FILES[2])
    return list(PLOT_FILES)
