"""The Elo-vs-tokens plot drawn as SVG text (no plotting library): the viewer's run page and the HTML report
both draw it with `elo_tokens_svg`, so the two show the same figure.

Each arm is a `<g class="pt">` with its numbers in data attributes, a `<title>` (hover works without script)
and, where it collides with no other label or point, its name beside it. The frontier line is drawn in a
colour no strategy has, and the legend above the plot shows each strategy's colour, the frontier line as it
is drawn and the interval bars. Colours are matplotlib's tab10 in the order of the sorted strategy names, as
analysis.plots colours them, so a strategy looks the same in the PNG plots, the HTML report and the viewer.
Every style is an SVG attribute (no stylesheet needed); a page may add its own CSS for hover and toggles.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

TAB10 = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]
FRONTIER_COLOUR = "#1d232b"  # near-black: not one of the strategies' tab10 colours
FRONTIER_DASH = "7 4"
W, H = 1000, 500
LEFT, RIGHT, BOTTOM = 70, 20, 50
FONT = 13  # axis and legend text (viewBox units)
LABEL_FONT = 12
CHAR_W = 0.62  # an upper estimate of a character's width, in ems, for label boxes (DejaVu/Segoe sans)
LABEL_ALL = 40  # above this many arms only the frontier and the anchor are labelled (analysis.plots does too)
MAX_LABELS = 60  # names placed at most (placing is quadratic in the labels; 60 already fill the plot)


class Box(NamedTuple):
    """An axis-aligned box in SVG coordinates (y down)."""

    x0: float
    y0: float
    x1: float
    y1: float

    def hits(self, o: Box) -> bool:
        """Whether the two boxes overlap.

        Args:
            o: The other box.
        """
        return self.x0 < o.x1 and o.x0 < self.x1 and self.y0 < o.y1 and o.y0 < self.y1


def strategy_colours(strategies: Sequence[str]) -> dict[str, str]:
    """Strategy -> colour: tab10 over the sorted names (one colour when there are more than 10).

    Args:
        strategies: The strategies plotted.
    """
    names = sorted(set(strategies))
    if len(names) > 10:
        return {s: TAB10[0] for s in names}
    return {s: TAB10[i] for i, s in enumerate(names)}


PLOT_MAX = 1e15  # a value beyond this (tokens, Elo) is not a measurement: not drawn, so no scale overflows


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and abs(x) <= PLOT_MAX


def _ticks_log(lo: float, hi: float) -> list[float]:
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        out += [m * 10.0**e for m in (1, 2, 5) if lo <= m * 10.0**e <= hi]
    return out or [lo, hi]


def _ticks_lin(lo: float, hi: float, n: int = 6) -> list[float]:
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if m * step >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(min(50, int((hi - first) / step) + 1))]


def _label(x: float) -> str:
    return f"{x / 1000:g}k" if abs(x) >= 1000 else f"{x:g}"


def text_width(text: str, size: float = LABEL_FONT) -> float:
    """An upper estimate of `text`'s width at font size `size` (labels are placed with it).

    Args:
        text: The label.
        size: The font size.
    """
    return len(text) * size * CHAR_W


def _legend(colours: Mapping[str, str], level_label: str) -> tuple[list[str], int]:
    """The legend rows above the plot: a dot per strategy, the frontier line, an interval bar. Returns the
    SVG parts and the height they take."""
    a = html.escape
    items: list[tuple[str, str, float]] = []  # (kind or colour, text, width)
    for s, c in colours.items():
        items.append((c, s or "(no strategy)", 18 + text_width(s or "(no strategy)", FONT) + 16))
    front = "frontier (point estimate)"
    items.append(("frontier", front, 34 + text_width(front, FONT) + 16))
    bar = f"{level_label} interval"
    items.append(("bar", bar, 14 + text_width(bar, FONT)))
    out, x, y = ['<g id="plot-legend">'], float(LEFT), 18.0
    for kind, text, width in items:
        if x + width > W - RIGHT and x > LEFT:
            x, y = float(LEFT), y + 20
        if kind == "frontier":
            out.append(
                f'<line class="legend-frontier" x1="{x:.0f}" x2="{x + 26:.0f}" y1="{y - 4:.0f}" '
                f'y2="{y - 4:.0f}" stroke="{FRONTIER_COLOUR}" stroke-width="2" '
                f'stroke-dasharray="{FRONTIER_DASH}"/>'
            )
            tx = x + 32
        elif kind == "bar":
            out.append(
                f'<line x1="{x + 4:.0f}" x2="{x + 4:.0f}" y1="{y - 12:.0f}" y2="{y + 3:.0f}" '
                'stroke="#555" stroke-width="2" opacity=".6"/>'
            )
            tx = x + 12
        else:
            out.append(f'<circle class="legend-dot" cx="{x + 6:.0f}" cy="{y - 4:.0f}" r="5" fill="{kind}"/>')
            tx = x + 16
        out.append(f'<text x="{tx:.0f}" y="{y:.0f}">{a(text)}</text>')
        x += width
    out.append("</g>")
    return out, int(y) + 14


def elo_tokens_svg(
    rows: Sequence[Mapping[str, Any]], level_label: str = "95%", anchor: str | None = None
) -> str:
    """The plot of every row with a numeric Elo and tokens per task; '' when there is none.

    Args:
        rows: The table's rows (dicts of its columns).
        level_label: The interval level as shown ("95%").
        anchor: The arm at 1000 Elo (None: not anchored).
    """
    pts = [r for r in rows if _num(r.get("elo")) and _num(r.get("tokens_per_task"))]
    if not pts:
        return ""
    colours = strategy_colours([str(r.get("strategy") or "") for r in pts])
    legend, top = _legend(colours, level_label)
    xs = [float(r["tokens_per_task"]) for r in pts]
    log = min(xs) > 0
    ys = [float(r[k]) for r in pts for k in ("elo", "elo_lo", "elo_hi") if _num(r.get(k))]
    x0, x1 = (min(xs) / 1.3, max(xs) * 1.3) if log else (min(0.0, min(xs)), max(xs) * 1.05 + 1)
    pad = max(5.0, (max(ys) - min(ys)) * 0.08)
    y0, y1 = min(ys) - pad, max(ys) + pad
    lx0, lx1 = (math.log(x0), math.log(x1)) if log else (x0, x1)

    def sx(x: float) -> float:
        f = ((math.log(x) if log else x) - lx0) / ((lx1 - lx0) or 1)
        return LEFT + f * (W - LEFT - RIGHT)

    def sy(y: float) -> float:
        return top + (1 - (y - y0) / ((y1 - y0) or 1)) * (H - top - BOTTOM)

    out = [
        f'<svg id="elo-plot" viewBox="0 0 {W} {H}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="Elo against tokens per task" font-size="{FONT}" font-family="sans-serif">',
        *legend,
    ]
    out += _axes(sx, sy, (x0, x1, y0, y1), log, top, level_label)
    front = sorted((r for r in pts if r.get("frontier")), key=lambda r: float(r["tokens_per_task"]))
    if len(front) > 1:
        path = " ".join(f"{sx(float(r['tokens_per_task'])):.1f},{sy(float(r['elo'])):.1f}" for r in front)
        out.append(
            f'<polyline id="frontier-line" class="frontier" points="{path}" fill="none" '
            f'stroke="{FRONTIER_COLOUR}" stroke-width="2" stroke-dasharray="{FRONTIER_DASH}"/>'
        )
    xy = [(sx(float(r["tokens_per_task"])), sy(float(r["elo"]))) for r in pts]
    labels = place_labels(pts, xy, Box(LEFT, top, W - RIGHT, H - BOTTOM), anchor)
    for i, r in enumerate(pts):
        out.append(_point(r, xy[i], sy, colours[str(r.get("strategy") or "")], labels.get(i)))
    omitted = sum(1 for i in range(len(pts)) if i not in labels)
    if omitted:
        out.append(
            f'<text id="labels-omitted" x="{W - RIGHT}" y="{H - 8}" text-anchor="end" font-size="11">'
            f"{omitted} label{'s' if omitted > 1 else ''} left out where they would overlap (hover a point)"
            "</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _axes(
    sx: Callable[[float], float],
    sy: Callable[[float], float],
    span: tuple[float, float, float, float],
    log: bool,
    top: int,
    level_label: str,
) -> list[str]:
    """Grid lines, tick labels and the two axis titles."""
    x0, x1, y0, y1 = span
    out = []
    for t in _ticks_log(x0, x1) if log else _ticks_lin(x0, x1):
        out.append(
            f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{top}" y2="{H - BOTTOM}" class="grid" stroke="#e6e6e6"/>'
            f'<text x="{sx(t):.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{_label(t)}</text>'
        )
    for t in _ticks_lin(y0, y1):
        out.append(
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" class="grid" stroke="#e6e6e6"/>'
            f'<text x="{LEFT - 8}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:g}</text>'
        )
    out.append(
        f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 8}" text-anchor="middle">tokens per task'
        f"{' (log scale)' if log else ''}</text>"
        f'<text transform="translate(16 {(top + H - BOTTOM) / 2}) rotate(-90)" text-anchor="middle">'
        f"Elo ({html.escape(level_label)} interval)</text>"
    )
    return out


# Where a label may sit relative to its point: (dx, dy of the baseline start, text-anchor), tried in order.
_SPOTS = [(9, 4, "start"), (-9, 4, "end"), (0, -10, "middle"), (0, 17, "middle"),
          (7, -8, "start"), (-7, -8, "end"), (7, 15, "start"), (-7, 15, "end")]  # fmt: skip


def _box(x: float, y: float, width: float, anchor: str) -> Box:
    left = x if anchor == "start" else x - width if anchor == "end" else x - width / 2
    return Box(left - 1, y - LABEL_FONT * 0.85, left + width + 1, y + LABEL_FONT * 0.3)


def place_labels(
    pts: Sequence[Mapping[str, Any]], xy: Sequence[tuple[float, float]], area: Box, anchor: str | None = None
) -> dict[int, tuple[float, float, str]]:
    """Point index -> (x, y, text-anchor) of its name, for the points whose name fits at one of a few spots
    around it without touching another label, any point or the plot's edge. The anchor arm is placed first,
    then the frontier, then the rest by Elo; with more than LABEL_ALL points only those two kinds, at most
    MAX_LABELS names placed and 4 * MAX_LABELS points tried (the time stays bounded for any number of arms).

    Args:
        pts: The plotted rows.
        xy: Each point's position on the plot.
        area: The plot area labels must stay inside.
        anchor: The arm at 1000 Elo (None: not anchored).
    """
    import numpy as np

    dots = np.array([(x - 7, y - 7, x + 7, y + 7) for x, y in xy], dtype=float).reshape(-1, 4)
    order = sorted(
        range(len(pts)),
        key=lambda i: (pts[i].get("arm") != anchor, not pts[i].get("frontier"), -float(pts[i]["elo"])),
    )
    if len(pts) > LABEL_ALL:
        order = [i for i in order if pts[i].get("frontier") or pts[i].get("arm") == anchor]
    placed: list[Box] = []
    out: dict[int, tuple[float, float, str]] = {}
    for i in order[: 4 * MAX_LABELS]:
        if len(out) >= MAX_LABELS:
            break
        width = text_width(str(pts[i]["arm"]))
        for dx, dy, how in _SPOTS:
            x, y = xy[i][0] + dx, xy[i][1] + dy
            b = _box(x, y, width, how)
            if not (area.x0 <= b.x0 and b.x1 <= area.x1 and area.y0 <= b.y0 and b.y1 <= area.y1):
                continue
            on_dot = (b.x0 < dots[:, 2]) & (dots[:, 0] < b.x1) & (b.y0 < dots[:, 3]) & (dots[:, 1] < b.y1)
            if not on_dot.any() and not any(b.hits(o) for o in placed):
                placed.append(b)
                out[i] = (x, y, how)
                break
    return out


def _point(
    r: Mapping[str, Any],
    xy: tuple[float, float],
    sy: Callable[[float], float],
    colour: str,
    label: tuple[float, float, str] | None,
) -> str:
    """One arm's group: its interval bar, its dot, its name (when placed) and its hover title."""
    arm, strategy = str(r["arm"]), str(r.get("strategy") or "")
    x, y = xy
    tip = f"{arm}: Elo {float(r['elo']):.0f}"
    if _num(r.get("elo_lo")) and _num(r.get("elo_hi")):
        tip += f" [{float(r['elo_lo']):.0f}, {float(r['elo_hi']):.0f}]"
    tip += f", {float(r['tokens_per_task']):,.0f} tokens/task" + (
        ", on the frontier" if r.get("frontier") else ""
    )
    if _num(r.get("frontier_prob")):
        tip += f" (P {float(r['frontier_prob']):.0%})"
    ci = ""
    if _num(r.get("elo_lo")) and _num(r.get("elo_hi")):
        ci = (
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{sy(float(r["elo_lo"])):.1f}" y2="{sy(float(r["elo_hi"])):.1f}" '
            f'stroke="{colour}" stroke-width="2" opacity=".6"/>'
        )
    a = html.escape
    name = ""
    if label is not None:
        name = (
            f'<text class="pt-label" x="{label[0]:.1f}" y="{label[1]:.1f}" text-anchor="{label[2]}" '
            f'font-size="{LABEL_FONT}" stroke="#fff" stroke-width="3" paint-order="stroke">{a(arm)}</text>'
        )
    return (
        f'<g class="pt" data-arm="{a(arm, quote=True)}" data-strategy="{a(strategy, quote=True)}" '
        f'data-tip="{a(tip, quote=True)}"><title>{a(tip)}</title>{ci}'
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{7 if r.get("frontier") else 5}" fill="{colour}" '
        f'stroke="#222" stroke-width="{1.5 if r.get("frontier") else 0.5}"/>{name}</g>'
    )
