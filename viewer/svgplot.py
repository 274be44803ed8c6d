"""The viewer's interactive Elo-vs-tokens plot, drawn as SVG on the server (no plotting library to ship).

Each arm is a `<g class="pt">` with its numbers in data attributes and a `<title>` (hover works without
script); static/view.js adds a richer tooltip and the per-strategy toggles. Colours are matplotlib's tab10 in
the order of the sorted strategy names, as analysis.plots colours them, so a strategy looks the same in the
PNG plots, the HTML report and here.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

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
W, H = 1000, 470
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 50


def strategy_colours(strategies: Sequence[str]) -> dict[str, str]:
    """Strategy -> colour: tab10 over the sorted names (one colour when there are more than 10)."""
    names = sorted(set(strategies))
    if len(names) > 10:
        return {s: TAB10[0] for s in names}
    return {s: TAB10[i] for i, s in enumerate(names)}


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _ticks_log(lo: float, hi: float) -> list[float]:
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        out += [m * 10.0**e for m in (1, 2, 5) if lo <= m * 10.0**e <= hi]
    return out or [lo, hi]


def _ticks_lin(lo: float, hi: float, n: int = 6) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if m * step >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _label(x: float) -> str:
    return f"{x / 1000:g}k" if x >= 1000 else f"{x:g}"


def elo_tokens_svg(rows: Sequence[Mapping[str, Any]], level_label: str = "95%") -> str:
    """The plot of every row with a numeric Elo and tokens per task; '' when there is none."""
    pts = [r for r in rows if _num(r.get("elo")) and _num(r.get("tokens_per_task"))]
    if not pts:
        return ""
    colours = strategy_colours([str(r.get("strategy") or "") for r in pts])
    xs = [float(r["tokens_per_task"]) for r in pts]
    log = min(xs) > 0
    ys = [float(r[k]) for r in pts for k in ("elo", "elo_lo", "elo_hi") if _num(r.get(k))]
    x0, x1 = (min(xs) / 1.3, max(xs) * 1.3) if log else (min(0.0, min(xs)), max(xs) * 1.05 + 1)
    pad = max(5.0, (max(ys) - min(ys)) * 0.08)
    y0, y1 = min(ys) - pad, max(ys) + pad

    def sx(x: float) -> float:
        f = (
            (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            if log
            else (x - x0) / ((x1 - x0) or 1)
        )
        return LEFT + f * (W - LEFT - RIGHT)

    def sy(y: float) -> float:
        return TOP + (1 - (y - y0) / ((y1 - y0) or 1)) * (H - TOP - BOTTOM)

    out = [f'<svg id="elo-plot" viewBox="0 0 {W} {H}" xmlns="http://www.w3.org/2000/svg" role="img" '
           f'aria-label="Elo against tokens per task" font-size="13">']  # fmt: skip
    for t in _ticks_log(x0, x1) if log else _ticks_lin(x0, x1):
        out.append(f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{TOP}" y2="{H - BOTTOM}" class="grid"/>'
                   f'<text x="{sx(t):.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{_label(t)}</text>')  # fmt: skip
    for t in _ticks_lin(y0, y1):
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" class="grid"/>'
                   f'<text x="{LEFT - 8}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:g}</text>')  # fmt: skip
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 8}" text-anchor="middle">tokens per task'
               f'{" (log scale)" if log else ""}</text>'
               f'<text transform="translate(16 {(TOP + H - BOTTOM) / 2}) rotate(-90)" text-anchor="middle">'
               f"Elo ({html.escape(level_label)} interval)</text>")  # fmt: skip
    front = sorted((r for r in pts if r.get("frontier")), key=lambda r: float(r["tokens_per_task"]))
    if len(front) > 1:
        path = " ".join(f"{sx(float(r['tokens_per_task'])):.1f},{sy(float(r['elo'])):.1f}" for r in front)
        out.append(f'<polyline id="frontier-line" class="frontier" points="{path}"/>')
    for r in pts:
        out.append(_point(r, sx(float(r["tokens_per_task"])), sy, colours[str(r.get("strategy") or "")]))
    out.append("</svg>")
    return "".join(out)


def _point(r: Mapping[str, Any], x: float, sy: Any, colour: str) -> str:
    arm, strategy = str(r["arm"]), str(r.get("strategy") or "")
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
    return (f'<g class="pt" data-arm="{a(arm, quote=True)}" data-strategy="{a(strategy, quote=True)}" '
            f'data-tip="{a(tip, quote=True)}"><title>{a(tip)}</title>{ci}'
            f'<circle cx="{x:.1f}" cy="{sy(float(r["elo"])):.1f}" r="{7 if r.get("frontier") else 5}" fill="{colour}" '
            f'stroke="#222" stroke-width="{1.5 if r.get("frontier") else 0.5}"/></g>')  # fmt: skip
