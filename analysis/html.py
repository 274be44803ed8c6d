"""One self-contained HTML report: tables, inline SVG plots, the run manifest. No external resources.

The page is rendered from a document gathered first (analysis.html_document.HtmlDocument, built by
analysis.html_gather from the analysis result and the ledger): this module reads nothing and writes
nothing. The document holds the same numbers report.json holds, so what the page shows can be checked
against report.json. Every numeric table cell carries its exact value in `data-value` next to the rounded
text people read; tables and rows carry ids/`data-*` attributes so a browser test can read them back from
the rendered DOM.

The document's fields are described in analysis/html_document.py.
"""

from __future__ import annotations

import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

from elo_per_token.analysis.html_document import HtmlDocument
from elo_per_token.analysis.html_sections import (
    STEP_COLUMNS,
    accuracy_section,
    column_notes,
    recommendation_section,
    step_tables_section,
    with_frontier_text,
)
from elo_per_token.contracts.secrets import mask_urls, scrub

if TYPE_CHECKING:  # annotations only: matplotlib is imported where a report needs it
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

RETURNS_COLUMNS = [
    ("arm", "arm", None),
    ("budget_n", "budget", "d"),
    ("tokens_per_task", "tokens/task", ",.0f"),
    ("elo", "Elo", ".1f"),
    ("elo_lo", "lo", ".1f"),
    ("elo_hi", "hi", ".1f"),
    ("d_elo", "ΔElo", "+.1f"),
    ("d_elo_lo", "lo", "+.1f"),
    ("d_elo_hi", "hi", "+.1f"),
    ("d_elo_per_1k", "ΔElo/1k tok", ".2f"),
    ("d_elo_per_1k_lo", "lo", ".2f"),
    ("d_elo_per_1k_hi", "hi", ".2f"),
    # The frontier in words (html_sections.frontier_text: yes / no, and 'uncertain' when the bootstrap band
    # is), what each row is against, partial arms, ties: the terminal table says the same.
    ("frontier_text", "frontier", None),
    ("vs", "vs", None),
    ("seen_in", "measured in", None),
    ("tie_share", "ties", ".0%"),
    ("separating_vs", "sep. tasks vs", "d"),
    ("frontier_prob", "frontier P", ".0%"),
]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1300px;
color:#1d232b;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem} h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.95rem;margin:.6rem 0}
th,td{padding:.2rem .36rem;border-bottom:1px solid #e5e5e5;text-align:right;white-space:nowrap}
.scroll{overflow-x:auto}
th{background:#f4f6f8} td.t,th.t{text-align:left}
tr.frontier td{font-weight:600} .muted{color:#667} .warn{background:#fff4e5;padding:.4rem .8rem;
border-left:4px solid #f0a030} pre{background:#f6f8fa;padding:.8rem;overflow:auto;font-size:.8rem}
figure{margin:1rem 0} figure svg{display:block;width:100%;height:auto}
details{margin:.6rem 0} summary{cursor:pointer;color:#445}
#vs-frontier-table td:first-child{white-space:normal;max-width:17rem}
/* the headline table has ~19 columns: names wrap and the type is smaller, so it fits a 1400-px window */
#returns-table{font-size:.8rem} #returns-table th{white-space:normal} #returns-table td.t{white-space:normal;max-width:11rem;overflow-wrap:anywhere}
#recommendation{background:#eef6ee;border-left:4px solid #3a8a3a;padding:.3rem 1rem;margin:1rem 0}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.1rem 1rem;font-size:.85rem} dd{margin:0}
"""

# Plots span the page's text column (1200px) at a size where their text reads like the tables' (about 13-15px).
# Matplotlib's default 10pt labels on a 7.5in figure came out half the page wide with 8px labels.
_FIG_W = 12.0
_RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "ept",
    "font.size": 12,
    "axes.titlesize": 14,
    "axes.labelsize": 12,
    "xtick.labelsize": 11,
    "ytick.labelsize": 11,
    "legend.fontsize": 11,
}


def _is_num(x: Any) -> TypeGuard[float]:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _fmt(x: Any, fmt: str | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, bool):
        return "yes" if x else ""
    if fmt and _is_num(x):
        return format(x, fmt)
    return str(x)


def _cell(col: str, x: Any, fmt: str | None) -> str:
    text = html.escape(_fmt(x, fmt))
    cls = "" if _is_num(x) else ' class="t"'
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return f'<td data-col="{col}" data-null="1"{cls}>{text}</td>'
    value = repr(float(x)) if _is_num(x) else str(x).lower() if isinstance(x, bool) else str(x)
    return f'<td data-col="{col}" data-value="{html.escape(value, quote=True)}"{cls}>{text}</td>'


def _table(
    table_id: str,
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[tuple[str, str, str | None]],
    row_class: str | None = None,
) -> str:
    head = "".join(
        f'<th class="t">{html.escape(label)}</th>' if fmt is None else f"<th>{html.escape(label)}</th>"
        for _, label, fmt in columns
    )
    body = []
    for r in rows:
        cls = f' class="{row_class}"' if row_class and r.get(row_class) else ""
        key = html.escape(str(r.get("arm", "")), quote=True)
        cells = "".join(_cell(c, r.get(c), fmt) for c, _, fmt in columns)
        body.append(f'<tr data-arm="{key}"{cls}>{cells}</tr>')
    return (
        f'<div class="scroll"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    # No metadata block: no date (reproducible bytes) and no links to licence/namespace pages.
    fig.savefig(
        buf,
        format="svg",
        bbox_inches="tight",
        metadata={"Date": None, "Creator": None, "Format": None, "Type": None},
    )
    text = buf.getvalue()
    import matplotlib.pyplot as plt

    plt.close(fig)
    return text[text.index("<svg") :]  # drop the XML prolog/doctype: inline SVG in HTML5


def _plot_elo_vs_tokens(
    rows: Sequence[Mapping[str, Any]], anchor: str | None = None, level_label: str = "95%"
) -> str:
    """The Elo-vs-tokens figure as `ept view` draws it (analysis.svgplot: one renderer for both), with a
    caption; every arm's numbers on hover (a <title> in each point's group, no script needed)."""
    from elo_per_token.analysis.svgplot import elo_tokens_svg

    svg = elo_tokens_svg(rows, level_label, anchor)
    if not svg:
        return ""
    n = svg.count('<g class="pt"')
    cap = f"Elo vs tokens per task ({n} arm{'s' if n != 1 else ''}, {level_label} intervals)"
    if anchor:
        cap += f"; {anchor} is the anchor (Elo 1000)"
    return f"{svg}<figcaption>{html.escape(cap)}</figcaption>"


def _plot_bars(
    labels: list[str],
    values: list[float],
    los: list[float | None],
    his: list[float | None],
    title: str,
    ylabel: str,
) -> str:
    import matplotlib

    from elo_per_token.analysis.plots import bars_figure

    if not labels:
        return ""
    rows = [
        {"arm": a, "v": v, "v_lo": lo, "v_hi": hi}
        for a, v, lo, hi in zip(labels, values, los, his, strict=True)
    ]
    with matplotlib.rc_context(_RC):
        return _svg(bars_figure(rows, "v", title, ylabel, width=_FIG_W))


def _plot_families(rows: Sequence[Mapping[str, Any]]) -> str:
    import matplotlib

    from elo_per_token.analysis.plots import per_family_figure

    fams = sorted({r["family"] for r in rows})
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    if not fams or not arms:
        return ""
    val = {(r["family"], r["arm"]): r.get("elo") for r in rows}
    weights = {r["family"]: r["weight"] for r in rows if _is_num(r.get("weight"))}
    with matplotlib.rc_context(_RC):
        return _svg(per_family_figure(arms, fams, val, weights=weights or None, width=_FIG_W))


def _level_label(doc: HtmlDocument) -> str:
    level = (doc.options or {}).get("level")
    return f"{round(level * 100)}%" if _is_num(level) else "95%"


def _prices(manifest: Mapping[str, Any] | None) -> tuple[float, float] | None:
    """(price_in, price_out) per 1M tokens from the manifest's public profile, when both are known."""
    if not manifest:
        return None
    prof = manifest.get("profile")
    if not isinstance(prof, Mapping):
        return None
    pin, pout = prof.get("price_in_per_1m"), prof.get("price_out_per_1m")
    if _is_num(pin) and _is_num(pout):
        return float(pin), float(pout)
    return None


def token_split_rows(
    token_split: Sequence[Mapping[str, Any]], prices: tuple[float, float] | None
) -> list[dict[str, Any]]:
    """Add totals, shares and (when priced) money to each (arm, role) row.

    Args:
        token_split: Calls and tokens per (arm, role) (analysis.html_gather.token_split).
        prices: (USD per 1M prompt tokens, per 1M completion tokens).
    """
    out = []
    for r in token_split:
        p = r.get("prompt_tokens") or 0
        c = r.get("completion_tokens") or 0
        row = {**r, "total_tokens": p + c}
        if prices is not None:
            row["cost"] = (p * prices[0] + c * prices[1]) / 1e6
        out.append(row)
    return out


def cost_rows(
    returns: Sequence[Mapping[str, Any]],
    token_split: Sequence[Mapping[str, Any]],
    prices: tuple[float, float],
    breakdown: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Money per arm: total strategy cost (judge calls excluded) and per task, from prompt/completion prices.

    Per task: the terminal's $/task (the breakdown's cost_per_task, cached input at its own price) when the
    analysis was priced; else the total over the tasks the arm attempted (every role of the arm counted once
    per task, not the task count of its last role).

    Args:
        returns: The returns table's rows.
        token_split: Calls and tokens per (arm, role) (analysis.html_gather.token_split).
        prices: (USD per 1M prompt tokens, per 1M completion tokens).
        breakdown: Per-arm breakdown rows (tasks attempted, ...).
    """
    totals: dict[str, list[float]] = {}
    for r in token_split:
        if r.get("role") == "judge":
            continue
        t = totals.setdefault(str(r["arm"]), [0.0, 0.0])
        t[0] += r.get("prompt_tokens") or 0
        t[1] += r.get("completion_tokens") or 0
    tasks: dict[str, Any] = {}
    for r in token_split:  # an arm's tasks: the most any of its roles touched (every job makes a sample call)
        if _is_num(r.get("tasks")) and r.get("role") != "judge":
            tasks[str(r["arm"])] = max(tasks.get(str(r["arm"]), 0), r["tasks"])
    for r in breakdown:
        if _is_num(r.get("tasks_attempted")) and r["tasks_attempted"]:
            tasks[str(r["arm"])] = r["tasks_attempted"]
    priced = {str(r["arm"]): r["cost_per_task"] for r in breakdown if _is_num(r.get("cost_per_task"))}
    out = []
    for r in returns:
        arm = str(r["arm"])
        if arm not in totals:
            continue
        p, c = totals[arm]
        cost = (p * prices[0] + c * prices[1]) / 1e6
        n = tasks.get(arm)
        out.append(
            {
                "arm": arm,
                "prompt_tokens": p,
                "completion_tokens": c,
                "cost": cost,
                "cost_per_task": priced.get(arm, cost / n if n else None),
            }
        )
    return out


def render_html(doc: HtmlDocument) -> str:
    """The whole page as one string: no scripts, no external resources.

    Args:
        doc: The page's data (build_document).
    """
    returns = list(doc.returns or [])
    manifest = doc.manifest or None
    prices = _prices(manifest)
    split = token_split_rows(doc.token_split or [], prices)
    parts = _page_head(doc)
    parts += recommendation_section(doc)
    parts += _returns_section(doc, returns)
    parts += accuracy_section(doc, _table)
    parts += step_tables_section(doc, _table)
    parts += _families_section(list(doc.families or []))
    parts += _summary_and_tokens(doc, split, prices)
    parts += _cost_section(doc, returns, split, prices)
    parts += _failures_section(list(doc.failures or []))
    parts += _breakdown_section(list(doc.breakdown or []))
    parts += _page_tail(doc, manifest)
    return "\n".join(parts) + "\n"


def _page_head(doc: HtmlDocument) -> list[str]:
    """Doctype, title, inputs line and the warnings."""
    title = str(doc.title or "elo-per-token report")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f'<h1 id="title">{html.escape(title)}</h1>',
    ]
    meta = []
    if doc.generated_at:
        meta.append(f"generated {html.escape(str(doc.generated_at))}")
    if doc.inputs:
        meta.append("inputs: " + ", ".join(html.escape(str(i)) for i in doc.inputs))
    if meta:
        parts.append(f'<p class="muted">{" · ".join(meta)}</p>')
    for w in doc.warnings or []:
        parts.append(f'<p class="warn">{html.escape(str(w))}</p>')
    return parts


def _returns_section(doc: HtmlDocument, returns: list[dict[str, Any]]) -> list[str]:
    parts: list[str] = []
    parts.append('<section id="returns"><h2>Diminishing returns</h2>')
    parts.append(
        '<p class="muted">Rows ordered by tokens per task; ΔElo and ΔElo per 1k tokens are against the previous '
        "arm on the frontier (column vs); intervals are bootstrap percentile intervals; frontier rows (bold) have no "
        "cheaper arm with a higher Elo; frontier: yes / no for the point estimate, 'uncertain' when the arm is on the "
        "frontier in 5-95% of bootstrap rounds (frontier P: that share, not a probability); 'no' with a share of at most 5% "
        "means dominated or within the noise of a cheaper arm, not surely off; an arm measured in some "
        "families only is off the frontier and its ΔElo is over the shared families.</p>"
    )
    parts.append(_table("returns-table", with_frontier_text(returns), RETURNS_COLUMNS, row_class="frontier"))
    parts.append(column_notes(STEP_COLUMNS))
    parts.append(
        '<figure id="plot-elo-tokens">'
        + _plot_elo_vs_tokens(returns, doc.anchor, _level_label(doc))
        + "</figure>"
    )
    steps = [r for r in returns if _is_num(r.get("d_elo_per_1k"))]
    parts.append(
        '<figure id="plot-delo-per-1k">'
        + _plot_bars(
            [f"{r['arm']} vs {r['vs']}" if r.get("vs") else str(r["arm"]) for r in steps],
            [float(r["d_elo_per_1k"]) for r in steps],
            [r.get("d_elo_per_1k_lo") if _is_num(r.get("d_elo_per_1k_lo")) else None for r in steps],
            [r.get("d_elo_per_1k_hi") if _is_num(r.get("d_elo_per_1k_hi")) else None for r in steps],
            "ΔElo per 1k tokens (vs the previous frontier arm)",
            "ΔElo / 1k tokens",
        )
        + "</figure></section>"
    )
    return parts


def _families_section(families: list[dict[str, Any]]) -> list[str]:
    parts: list[str] = []
    if families:
        parts.append('<section id="families"><h2>Per-family breakdown</h2>')
        fam_cols = [
            ("family", "family", None),
            ("arm", "arm", None),
            ("theta", "θ (centred)", ".3f"),
            ("elo", "Elo", ".1f"),
        ]
        if any("elo_lo" in r for r in families):  # the family's own bootstrap interval
            fam_cols += [("elo_lo", "lo", ".1f"), ("elo_hi", "hi", ".1f")]
        if any("weight" in r for r in families):
            fam_cols.append(("weight", "family weight", ".2f"))
        parts.append(_table("family-table", families, fam_cols))
        parts.append('<figure id="plot-families">' + _plot_families(families) + "</figure></section>")
    return parts


def _summary_and_tokens(
    doc: HtmlDocument, split: list[dict[str, Any]], prices: tuple[float, float] | None
) -> list[str]:
    parts: list[str] = []
    counts = doc.counts or {}
    if counts:
        shown = [
            "tasks",
            "calls",
            "strategy_calls",
            "judge_calls",
            "calls_missing_usage",
            "outcomes",
            "ungraded_outcomes",
            "judgments",
            "comparisons",
            "skipped_lines",
        ]
        items = "".join(
            f'<tr><td class="t">{html.escape(k.replace("_", " "))}</td>'
            f'<td data-col="{k}" data-value="{counts[k]}">{counts[k]:,}</td></tr>'
            for k in shown
            if isinstance(counts.get(k), int)
        )
        parts.append(
            f'<section id="summary"><h2>Run summary</h2><table id="summary-table">{items}</table></section>'
        )
    if split:
        parts.append('<section id="tokens"><h2>Token split</h2>')
        parts.append(
            '<p class="muted">Tokens as returned in each call\'s usage, by arm and call role (sample, verifier, '
            "search_node, tool_turn; judge calls are evaluation cost, not strategy cost).</p>"
        )
        cols = [
            ("arm", "arm", None),
            ("role", "role", None),
            ("calls", "calls", ",d"),
            ("prompt_tokens", "prompt", ",d"),
            ("completion_tokens", "completion", ",d"),
            ("total_tokens", "total", ",d"),
        ]
        if prices is not None:
            cols.append(("cost", "cost", ",.4f"))
        parts.append(_table("token-table", split, cols))
        parts.append("</section>")
    return parts


def _cost_section(
    doc: HtmlDocument,
    returns: list[dict[str, Any]],
    split: list[dict[str, Any]],
    prices: tuple[float, float] | None,
) -> list[str]:
    parts: list[str] = []
    parts.append('<section id="cost"><h2>Cost</h2>')
    if prices is not None and split:
        parts.append(
            f"<p>Prices from the run's profile: {prices[0]:g} per 1M prompt tokens, {prices[1]:g} per 1M "
            "completion tokens.</p>"
        )
        parts.append(
            _table(
                "cost-table",
                cost_rows(returns, split, prices, list(doc.breakdown or [])),
                [
                    ("arm", "arm", None),
                    ("prompt_tokens", "prompt", ",.0f"),
                    ("completion_tokens", "completion", ",.0f"),
                    ("cost", "cost", ",.4f"),
                    ("cost_per_task", "cost / task", ",.5f"),
                ],
            )
        )
    else:
        parts.append(
            '<p class="muted" id="no-prices">The run\'s profile has no prices, so no money figures.</p>'
        )
    cost_table = list(doc.cost_table or [])
    if cost_table:
        parts.append(
            '<p class="muted">Elo per dollar (report.json <code>cost_table</code>): cost per task with cached input at '
            "its own price, rows ordered by it, ΔElo against the previous row and ΔElo per $1 with bootstrap "
            "intervals.</p>"
        )
        parts.append(_table("cost-elo-table", cost_table,
                            [("arm", "arm", None), ("cost_per_task", "$/task", ",.5f"), ("elo", "Elo", ".1f"),
                             ("d_elo", "ΔElo", "+.1f"), ("d_elo_lo", "lo", "+.1f"), ("d_elo_hi", "hi", "+.1f"),
                             ("d_elo_per_usd", "ΔElo per $1", ",.0f"), ("d_elo_per_usd_lo", "lo", ",.0f"),
                             ("d_elo_per_usd_hi", "hi", ",.0f"), ("frontier", "frontier", None),
                             ("frontier_prob", "frontier P", ".0%")], row_class="frontier"))  # fmt: skip
    parts.append("</section>")
    return parts


def _failures_section(failures: list[dict[str, Any]]) -> list[str]:
    parts: list[str] = []
    parts.append('<section id="failures"><h2>Failures by class</h2>')
    if failures:
        parts.append(_table("failure-table", failures,
                            [("arm", "arm", None), ("error_class", "class", None), ("count", "jobs", ",d"),
                             ("tokens_unrecorded", "tokens outside the tables", ",d")]))  # fmt: skip
        parts.append(
            '<p class="muted">A failed job that wrote an outcome has its calls in the tables above; one that '
            "wrote no result (its failure object in the ledger) spent the tokens in the last column, which the "
            "token and cost tables do not include.</p>"
        )
    else:
        parts.append('<p id="no-failures">No failed jobs.</p>')
    parts.append("</section>")
    return parts


def _breakdown_section(breakdown: list[dict[str, Any]]) -> list[str]:
    parts: list[str] = []
    if breakdown:
        parts.append('<section id="breakdown"><h2>Per arm: tasks, failures, token split</h2>')
        parts.append(
            '<p class="muted">lost = tasks where the strategy failed (context overflow, a request refused after '
            "tokens were spent) and was scored 0 with its tokens; reasoning = share of completion tokens reported "
            "as reasoning; cached = share of input served from the prompt cache (usage details as returned).</p>"
        )
        parts.append(_table("breakdown-table", breakdown,
                            [("arm", "arm", None), ("tasks_attempted", "tasks", ",d"),
                             ("tasks_answered", "answered", ",d"), ("tasks_lost", "lost", ",d"),
                             ("failed_by_class", "failed by class", None),
                             ("calls_cut_by_max_tokens", "cut by max_tokens", ",d"),
                             ("reasoning_tokens", "reasoning tokens", ",d"), ("reasoning_share", "reasoning", ".0%"),
                             ("cached_tokens", "cached input", ",d"), ("cached_share", "cached", ".0%")]))  # fmt: skip
        parts.append("</section>")
    return parts


def _endpoints_html(manifest: Mapping[str, Any]) -> str:
    """The endpoints and models the run's sessions used (sessions recorded before endpoints were: the
    manifest's profile), shown above the collapsed manifest: one run should have one."""
    prof: Mapping[str, Any] = manifest["profile"] if isinstance(manifest.get("profile"), Mapping) else {}
    seen: dict[tuple[str, str], list[int]] = {}
    for i, sess in enumerate(manifest.get("sessions") or [], 1):
        sess = sess if isinstance(sess, Mapping) else {}
        key = (
            str(sess.get("endpoint") or prof.get("base_url") or "?"),
            str(sess.get("model") or prof.get("model") or "?"),
        )
        seen.setdefault(key, []).append(i)
    items = "".join(
        f"<li>{html.escape(mask_urls(e))} · model {html.escape(m)} · sessions {', '.join(map(str, s))}</li>"
        for (e, m), s in seen.items()
    )
    return f'<div id="endpoints"><p>Endpoints the run used:</p><ul>{items}</ul></div>' if items else ""


def _page_tail(doc: HtmlDocument, manifest: Mapping[str, Any] | None) -> list[str]:
    """Options, the run manifest (collapsed) and the end of the page."""
    parts: list[str] = []
    if doc.options:
        parts.append(
            '<section id="options"><h2>Options</h2><pre>'
            + html.escape(scrub(json.dumps(doc.options, indent=2, sort_keys=True, default=str)))
            + "</pre></section>"
        )
    parts.append('<section id="manifest"><h2>Run manifest</h2>')
    if manifest:
        parts.append(_endpoints_html(manifest))
        # Long (plan, sessions, profile): collapsed, one click away, so it does not bury the page's end.
        parts.append(
            '<details id="manifest-details"><summary>The run\'s manifest (JSON): plan, profile, code '
            "version, sessions</summary><pre>"
            + html.escape(scrub(json.dumps(manifest, indent=2, sort_keys=True, default=str)))
            + "</pre></details>"
        )
    else:
        parts.append('<p class="muted">No run manifest found (the inputs were plain logs).</p>')
    parts.append("</section></body></html>")
    return parts
