"""PNG plots of an AnalysisResult (matplotlib, Agg backend: no display needed).

The figure builders take plain rows (dicts, as in report.json), so the HTML report draws the same
figures as SVG. They stay readable for any number of arms:

- Elo vs tokens: every arm is a point with its interval; with more than LABEL_ALL arms only the frontier
  and the anchor are labelled (the HTML report puts every arm's name on hover), points are coloured by
  strategy.
- Per-arm charts (ΔElo per 1k tokens, per-family Elo): with more than MANY_ARMS arms they show the TOP_N
  highest and lowest arms, sorted, as horizontal rows with readable names, and say how many are hidden.

Intervals are drawn as segments from lo to hi, not as error bars relative to the point: percentile
intervals need not contain the point estimate, and matplotlib rejects negative error-bar lengths.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import polars as pl

from elo_per_token.analysis.pipeline import AnalysisResult

PLOT_FILES = ("elo_vs_tokens.png", "d_elo_per_1k.png", "per_family_elo.png")
LABEL_ALL = 12  # up to this many arms, every point is labelled
MANY_ARMS = 20  # above this, per-arm charts switch to a sorted top/bottom view
TOP_N = 15  # arms shown at each end of a sorted top/bottom view

Row = Mapping[str, Any]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _num(x: Any) -> TypeGuard[float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _segments(
    ax: Any,
    pos: Sequence[float],
    lo: Sequence[Any],
    hi: Sequence[Any],
    *,
    horizontal: bool = False,
    **style: Any,
) -> None:
    """Interval segments lo..hi at each position; missing bounds are skipped, crossing bounds are fine."""
    keep = [(p, a, b) for p, a, b in zip(pos, lo, hi, strict=True) if _num(p) and _num(a) and _num(b)]
    if not keep:
        return
    ps, los, his = zip(*keep, strict=True)
    (ax.hlines if horizontal else ax.vlines)(ps, los, his, **style)


def top_bottom(rows: Sequence[Row], key: str, n: int = TOP_N) -> tuple[list[Row], int]:
    """Rows with a numeric `key`, sorted high to low; only the n highest and n lowest when there are more
    than 2n. Returns (rows, number hidden).

    Args:
        rows: The table's rows (dicts of its columns).
        key: The numeric column plotted.
        n: How many of the highest and of the lowest are kept when there are more than 2n.
    """
    have = sorted((r for r in rows if _num(r.get(key))), key=lambda r: -float(r[key]))
    if len(have) <= 2 * n:
        return have, 0
    return have[:n] + have[-n:], len(have) - 2 * n


def _strategy_colours(rows: Sequence[Row]) -> dict[str, Any]:
    import matplotlib

    # Sorted, not in row order: a strategy gets the same colour in every plot and report of the run (and in
    # the SVG plot of `ept view` and the HTML report, which uses the same order: analysis.svgplot).
    strategies = sorted({str(r.get("strategy") or "") for r in rows})
    if len(strategies) > 10:  # more than a qualitative palette can tell apart: one colour
        return {s: "tab:blue" for s in strategies}
    cmap = matplotlib.colormaps["tab10"]
    return {s: cmap(i) for i, s in enumerate(strategies)}


def _say_empty(ax: Any, text: str) -> None:
    """An empty plot saying why: the text in the middle, no axes."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def elo_vs_tokens_figure(
    rows: Sequence[Row],
    level_label: str,
    anchor: str | None = None,
    *,
    gid_prefix: str | None = None,
    figsize: tuple[float, float] = (8, 5),
) -> Any:
    """Elo against tokens per task (log x when all positive), intervals, frontier line, labels.

    Args:
        rows: the returns table's rows.
        level_label: the interval level as shown ("95%").
        anchor: the anchor arm (always labelled).
        gid_prefix: give point i the SVG id f"{gid_prefix}{i}" (index into the plotted rows, see
            `plotted_points`) so the HTML report can attach a hover title to it.
        figsize: the figure size in inches.
    """
    plt = _plt()
    pts = plotted_points(rows)
    fig, ax = plt.subplots(figsize=figsize, dpi=110)
    if not pts:
        _say_empty(ax, "no arm has both Elo and tokens per task")
        return fig
    many = len(pts) > LABEL_ALL
    x = [float(r["tokens_per_task"]) for r in pts]
    y = [float(r["elo"]) for r in pts]
    _segments(
        ax,
        x,
        [r.get("elo_lo") for r in pts],
        [r.get("elo_hi") for r in pts],
        color="tab:gray",
        alpha=0.35 if many else 0.8,
        linewidth=0.8 if many else 1.2,
        zorder=1,
    )
    colours = _strategy_colours(pts)
    _plot_points(ax, pts, x, y, colours, many, gid_prefix)
    _plot_frontier(ax, pts)
    if min(x) > 0:
        ax.set_xscale("log")
        ax.set_xlabel("tokens per task (log scale)")
    else:
        ax.set_xlabel("tokens per task")
    labelled = [r for r in pts if not many or r.get("frontier") or r.get("arm") == anchor]
    labelled.sort(key=lambda r: r.get("arm") != anchor)  # the anchor's label is placed first
    omitted = _place_labels(fig, ax, labelled, anchor, fontsize="x-small" if many else "small")
    ax.set_ylabel("Elo")
    title = f"Elo vs tokens per task ({len(pts)} arms, {level_label} CI)"
    if many:
        title += "; labelled: frontier and anchor"
    if omitted:
        title += f" ({omitted} overlapping labels left out)"
    ax.set_title(title, fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize="x-small", ncol=2 if len(colours) > 5 else 1)
    fig.tight_layout()
    return fig


def _plot_points(
    ax: Any,
    pts: Sequence[Row],
    x: list[float],
    y: list[float],
    colours: dict[str, Any],
    many: bool,
    gid_prefix: str | None,
) -> None:
    """One marker per arm in its strategy's colour; the first of each strategy carries the legend label."""
    size = 4 if len(pts) > 100 else 5 if many else 6
    seen: set[str] = set()
    for i, r in enumerate(pts):
        s = str(r.get("strategy") or "")
        show = len(set(colours)) > 1 and s not in seen and len(colours) <= 10
        seen.add(s)
        ax.plot(
            [x[i]],
            [y[i]],
            "o",
            color=colours[s],
            markersize=size,
            alpha=0.85 if many else 1.0,
            zorder=2,
            label=s if show else None,
            gid=f"{gid_prefix}{i}" if gid_prefix is not None else None,
        )


def _plot_frontier(ax: Any, pts: Sequence[Row]) -> None:
    """The compute-optimal frontier through its arms' point estimates, in token order."""
    front = sorted((r for r in pts if r.get("frontier")), key=lambda r: r["tokens_per_task"])
    if front:
        ax.plot(
            [r["tokens_per_task"] for r in front],
            [r["elo"] for r in front],
            "-",
            color="#1d232b",  # not a strategy colour (tab10 orange is the second strategy's)
            linewidth=1.5,
            zorder=3,
            label="compute-optimal frontier (point estimate)",
        )


def _place_labels(fig: Any, ax: Any, rows: Sequence[Row], anchor: str | None, fontsize: str) -> int:
    """Annotate rows in order, each at the first of a few offsets where it overlaps no earlier label;
    a label that fits nowhere is left out. Returns how many were left out."""
    offsets = [
        ((4, 5), "left", "bottom"),
        ((4, -5), "left", "top"),
        ((-4, 5), "right", "bottom"),
        ((-4, -5), "right", "top"),
    ]
    renderer = fig.canvas.get_renderer()
    placed: list[Any] = []
    omitted = 0
    for r in rows:
        text = str(r["arm"]) + (" (anchor)" if r.get("arm") == anchor else "")
        if _num(r.get("frontier_prob")):  # share of bootstrap rounds with the arm on the frontier
            text += f" (P={r['frontier_prob']:.0%})"
        for off, ha, va in offsets:
            ann = ax.annotate(
                text,
                (r["tokens_per_task"], r["elo"]),
                textcoords="offset points",
                xytext=off,
                ha=ha,
                va=va,
                fontsize=fontsize,
                zorder=4,
            )
            box = ann.get_window_extent(renderer).expanded(1.02, 1.1)
            if (
                not any(box.overlaps(b) for b in placed)
                and ax.bbox.contains(*box.p0)
                and ax.bbox.contains(*box.p1)
            ):
                placed.append(box)
                break
            ann.remove()
        else:
            omitted += 1
    return omitted


def plotted_points(rows: Sequence[Row]) -> list[Row]:
    """The rows elo_vs_tokens_figure draws, in drawing order.

    Args:
        rows: The table's rows (dicts of its columns).
    """
    return [r for r in rows if _num(r.get("tokens_per_task")) and _num(r.get("elo"))]


def _clip_intervals(ax: Any, pos: list[int], rows: Sequence[Row], key: str) -> tuple[list[Any], list[Any]]:
    """One huge interval (a token step near 0) would flatten every other bar: the axis spans the bars and
    the ordinary intervals; a whisker beyond it is cut at the edge and marked with its true end."""
    vals = [float(r[key]) for r in rows]
    ends = [float(r[f"{key}_{s}"]) for r in rows for s in ("lo", "hi") if _num(r.get(f"{key}_{s}"))]
    big = max([abs(v) for v in vals] + [1e-9])
    top = max([0.0, *vals, *(e for e in ends if e <= 3 * big)]) + 0.15 * big
    bottom = min([0.0, *vals, *(e for e in ends if e >= -3 * big)]) - 0.15 * big
    lo, hi = [], []
    for p, r in zip(pos, rows, strict=True):
        a, b = r.get(f"{key}_lo"), r.get(f"{key}_hi")
        for end, edge, mark, va in ((a, bottom, "v", "top"), (b, top, "^", "bottom")):
            if _num(end) and (float(end) > top or float(end) < bottom):
                ax.plot([p], [edge], mark, color="black", markersize=6, clip_on=False)
                ax.annotate(
                    f"{float(end):.3g}",
                    (p, edge),
                    ha="center",
                    va=va,
                    fontsize="x-small",
                    xytext=(0, 6 if va == "bottom" else -6),
                    textcoords="offset points",
                )
        lo.append(None if not _num(a) else min(max(float(a), bottom), top))
        hi.append(None if not _num(b) else min(max(float(b), bottom), top))
    ax.set_ylim(bottom, top)
    return lo, hi


def _mark_hidden(ax: Any, gap: float, hidden: int) -> None:
    """A dotted line at `gap` (between the top and the bottom arms) saying how many arms are not shown."""
    ax.axhline(gap, color="tab:gray", linestyle=":", linewidth=1)
    ax.annotate(
        f"… {hidden} arms not shown …",
        (0.99, gap),
        xycoords=("axes fraction", "data"),
        ha="right",
        va="center",
        fontsize="x-small",
        color="tab:gray",
        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
    )


def bars_figure(
    rows: Sequence[Row], key: str, title: str, ylabel: str, *, n: int = TOP_N, width: float = 8.0
) -> Any:
    """One bar per row of `key` with its `{key}_lo`..`{key}_hi` interval. Up to MANY_ARMS rows: vertical
    bars in the given order; more: horizontal bars of the n highest and n lowest, sorted.

    Args:
        rows: table rows with `arm`, `key` and its interval (rows without a value are counted in the title).
        key: the column plotted.
        title: the figure's title.
        ylabel: the value axis' label.
        n: arms shown at each end when there are more than MANY_ARMS.
        width: figure width in inches.
    """
    plt = _plt()
    have = [r for r in rows if _num(r.get(key))]
    if len(have) < len(rows):  # e.g. unresolved token steps: say so rather than look like a short list
        title += f" ({len(rows) - len(have)} of {len(rows)} rows without a value)"
    if len(have) <= MANY_ARMS:
        fig, ax = plt.subplots(figsize=(width, 4.2), dpi=110)
        if not have:
            ax.text(0.5, 0.5, "no values to plot", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            return fig
        pos = list(range(len(have)))
        ax.bar(pos, [r[key] for r in have], color="tab:green")
        lo, hi = _clip_intervals(ax, pos, have, key)
        _segments(ax, pos, lo, hi, color="black", linewidth=1.2)
        ax.set_xticks(pos, [str(r["arm"]) for r in have], rotation=30, ha="right", fontsize="small")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize="medium")
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        return fig
    shown, hidden = top_bottom(have, key, n)
    fig, ax = plt.subplots(figsize=(width, 0.22 * len(shown) + 1.6), dpi=110)
    pos = list(range(len(shown)))[::-1]  # highest at the top
    colours = ["tab:green" if float(r[key]) >= 0 else "tab:red" for r in shown]
    ax.barh(pos, [r[key] for r in shown], color=colours, height=0.7)
    _segments(
        ax,
        pos,
        [r.get(f"{key}_lo") for r in shown],
        [r.get(f"{key}_hi") for r in shown],
        horizontal=True,
        color="black",
        linewidth=1.0,
    )
    ax.set_yticks(pos, [str(r["arm"]) for r in shown], fontsize="x-small")
    if hidden:
        _mark_hidden(ax, pos[n - 1] - 0.5, hidden)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel(ylabel)
    ax.set_title(f"{title}: top and bottom {n} of {len(have)}" if hidden else title, fontsize="medium")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def per_family_figure(
    arms: Sequence[str],
    families: Sequence[str],
    elo_by: Mapping[tuple[str, str], Any],
    merged: Mapping[str, Any] | None = None,
    weights: Mapping[str, float] | None = None,
    *,
    n: int = TOP_N,
    width: float = 8.0,
) -> Any:
    """Per-family Elo of each arm (elo_by[(family, arm)]), with the merged Elo when given. Up to MANY_ARMS
    arms: one line per family over the arms in the given order; more: a dot plot of the n highest and
    n lowest arms by merged Elo (or by the mean over families), one marker per family.

    Args:
        arms: the arms, in plot order.
        families: the families.
        elo_by: (family, arm) -> Elo.
        merged: arm -> merged Elo (None: not drawn).
        weights: family -> weight, shown in the legend.
        n: arms shown at each end when there are more than MANY_ARMS.
        width: figure width in inches.
    """
    plt = _plt()

    def fam_label(f: str) -> str:
        return f"{f} (w={weights[f]:.2f})" if weights and f in weights else f

    def val(f: str, a: str) -> float:
        v = elo_by.get((f, a))
        return float(v) if _num(v) else float("nan")

    if len(arms) <= MANY_ARMS:
        return _family_lines_figure(arms, families, val, fam_label, merged, width)
    rows = []
    for a in arms:
        vals = [val(f, a) for f in families]
        finite = [v for v in vals if math.isfinite(v)]
        score = merged.get(a) if merged is not None else (sum(finite) / len(finite) if finite else None)
        rows.append({"arm": a, "score": score})
    shown, hidden = top_bottom(rows, "score", n)
    fig, ax = plt.subplots(figsize=(width, 0.22 * len(shown) + 1.6), dpi=110)
    pos = list(range(len(shown)))[::-1]
    markers = "osD^v<>ph*"
    for i, f in enumerate(families):
        ax.plot(
            [val(f, r["arm"]) for r in shown],
            pos,
            markers[i % len(markers)],
            linestyle="none",
            markersize=4,
            alpha=0.8,
            label=fam_label(f),
        )
    if merged is not None:
        ax.plot(
            [float(r["score"]) for r in shown],
            pos,
            "|",
            color="black",
            markersize=9,
            label="merged (centred)",
        )
    ax.set_yticks(pos, [str(r["arm"]) for r in shown], fontsize="x-small")
    if hidden:
        _mark_hidden(ax, pos[n - 1] - 0.5, hidden)
    ax.set_xlabel("Elo (centred: mean 1000 over arms)")
    title = "Per-family Elo by arm"
    ax.set_title(
        f"{title}: top and bottom {n} of {len(rows)} by merged Elo" if hidden else title, fontsize="medium"
    )
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize="x-small", loc="best")
    fig.tight_layout()
    return fig


def _family_lines_figure(
    arms: Sequence[str],
    families: Sequence[str],
    val: Callable[[str, str], float],
    fam_label: Callable[[str], str],
    merged: Mapping[str, Any] | None,
    width: float,
) -> Any:
    """Few arms: one line per family over the arms in the given order, the merged Elo dashed."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(width, 4.2), dpi=110)
    xs = list(range(len(arms)))
    for f in families:
        ax.plot(xs, [val(f, a) for a in arms], "o-", label=fam_label(f))
    if merged is not None:
        ax.plot(
            xs,
            [float(merged[a]) if _num(merged.get(a)) else float("nan") for a in arms],
            "k--",
            label="merged (centred)",
        )
    ax.set_xticks(xs, list(arms), rotation=30, ha="right", fontsize="small")
    ax.set_ylabel("Elo (family-centred)")
    ax.set_title("Per-family Elo by arm", fontsize="medium")
    ax.grid(True, alpha=0.3)
    if families:
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _save(fig: Any, path: Path) -> None:
    plt = _plt()
    fig.savefig(path)
    plt.close(fig)


def plot_elo_vs_tokens(table: pl.DataFrame, path: Path, level_label: str, anchor: str | None = None) -> None:
    """Write the Elo-against-tokens plot of the returns table.

    Args:
        table: The returns table.
        path: The PNG file to write.
        level_label: The interval level as shown ("95%").
        anchor: The arm at 1000 Elo (None: not anchored).
    """
    _save(elo_vs_tokens_figure(table.to_dicts(), level_label, anchor), path)


def plot_d_elo_per_1k(table: pl.DataFrame, path: Path, level_label: str) -> None:
    # Each bar is against the previous frontier arm (the headline table's `vs`), named in its label.
    """Write the ΔElo-per-1k bars, each against the previous frontier arm.

    Args:
        table: The returns table.
        path: The PNG file to write.
        level_label: The interval level as shown ("95%").
    """
    rows = [{**r, "arm": f"{r['arm']} vs {r['vs']}" if r.get("vs") else r["arm"]} for r in table.to_dicts()]
    fig = bars_figure(
        rows,
        "d_elo_per_1k",
        f"Marginal Elo per 1k tokens ({level_label} CI)",
        "ΔElo per 1k tokens (vs the previous frontier arm)",
    )
    _save(fig, path)


def plot_per_family(result: AnalysisResult, path: Path) -> None:
    """Write each arm's per-family Elo with the merged Elo.

    Args:
        result: The analysis result.
        path: The PNG file to write.
    """
    sub = result.per_family
    elo_by = dict(
        zip(
            zip(sub["family"].to_list(), sub["arm"].to_list(), strict=True), sub["elo"].to_list(), strict=True
        )
    )
    # Families are centred (mean Elo 1000 over their arms); centre the merged Elo the same way so the
    # markers share one scale (the anchored values differ by a constant).
    elo = np.asarray(result.elo, dtype=float)
    merged = dict(zip(result.arms, (elo - np.nanmean(elo) + 1000.0).tolist(), strict=True))
    _save(per_family_figure(result.arms, result.families, elo_by, merged, result.family_weights), path)


def write_plots(result: AnalysisResult, out_dir: Path) -> list[str]:
    """Write the three PNGs into out_dir; returns their file names.

    Args:
        result: The analysis result.
        out_dir: The folder to write into.
    """
    label = f"{round(result.options.level * 100)}%"
    plot_elo_vs_tokens(result.table, out_dir / PLOT_FILES[0], label, result.anchor)
    plot_d_elo_per_1k(result.table, out_dir / PLOT_FILES[1], label)
    plot_per_family(result, out_dir / PLOT_FILES[2])
    return list(PLOT_FILES)
