"""The viewer's pages as HTML strings, rendered from plain data (the report doc, job records, transcripts).

Every name and every piece of model output is escaped: run ids, arms, tasks and transcripts are untrusted
text. Numeric cells carry `data-value` like the HTML report's (analysis.html), so a browser test reads them
back and compares them with report.json.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote, urlencode

from elo_per_token.analysis.html import RETURNS_COLUMNS
from elo_per_token.analysis.html import _table as table
from elo_per_token.analysis.html_sections import (
    accuracy_section,
    recommendation_section,
    step_tables_section,
    with_frontier_text,
)
from elo_per_token.analysis.svgplot import FRONTIER_COLOUR, FRONTIER_DASH, elo_tokens_svg, strategy_colours

if TYPE_CHECKING:  # the store is the server's; pages only read the views it hands them
    from elo_per_token.viewer.store import RunView

e = html.escape
REFRESH_S = 5  # a running sweep's pages reload this often


def _q(x: Any) -> str:
    return e(str(x), quote=True)


def run_url(run_id: str, view: str = "", /, **params: Any) -> str:
    """/run/<id>[/view][?params] with every part quoted (a `page` param is a paged list's page number)."""
    base = f"/run/{quote(run_id, safe='')}" + (f"/{view}" if view else "")
    given = {k: v for k, v in params.items() if v is not None}
    return base + ("?" + urlencode(given) if given else "")


def shell(
    title: str, body: list[str], *, refresh: bool = False, crumbs: Sequence[tuple[str, str]] = ()
) -> str:
    """The page around `body`: local CSS/JS only (no CDN), breadcrumbs, optional auto-refresh."""
    nav = " › ".join(['<a href="/">runs</a>'] + [f'<a href="{_q(u)}">{e(t)}</a>' for t, u in crumbs])
    meta = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if refresh else ""
    return (
        "\n".join(
            [
                "<!DOCTYPE html>",
                '<html lang="en"><head><meta charset="utf-8">',
                '<meta name="viewport" content="width=device-width, initial-scale=1">',
                meta,
                f"<title>{e(title)} · ept view</title>",
                '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">',
                '<link rel="stylesheet" href="/static/view.css">',
                '<script src="/static/view.js" defer></script></head><body>',
                f'<nav class="crumbs">{nav}</nav>',
                f'<h1 id="title">{e(title)}</h1>',
                *body,
                "</body></html>",
            ]
        )
        + "\n"
    )


class Pager(NamedTuple):
    """Where one page of a paged list sits: its number, how many pages, how many rows in all."""

    page: int
    pages: int
    rows: int


def pager_html(p: Pager, url: Callable[[int], str]) -> str:
    """'page 2 of 7 (3,400 rows) · previous · next', nothing when the list fits on one page."""
    if p.pages <= 1:
        return ""
    links = [f'<a id="prev-page" href="{_q(url(p.page - 1))}">previous</a>'] if p.page > 1 else []
    links += [f'<a id="next-page" href="{_q(url(p.page + 1))}">next</a>'] if p.page < p.pages else []
    return (
        f'<p class="pager" id="pager">page {p.page} of {p.pages} ({p.rows:,} rows) · {" · ".join(links)}</p>'
    )


MAX_COMPARE_OPTIONS = 2000  # runs offered in the compare form's lists


def _run_row(r: Mapping[str, Any]) -> str:
    name = e(r["run_id"])
    cell = f'<a href="{_q(run_url(r["run_id"]))}">{name}</a>' if r.get("link", True) else name
    if r.get("problem"):  # one unreadable run: said on its row, the others listed as usual
        return (
            f'<tr data-run="{_q(r["run_id"])}" class="unreadable"><td class="t">{cell}</td>'
            f'<td class="t warn" colspan="5">{e(str(r["problem"]))}</td><td class="t">unreadable</td></tr>'
        )
    state = "running" if r["planned"] and r["done"] + r["failed"] < r["planned"] else "done"
    return (
        f'<tr data-run="{_q(r["run_id"])}"><td class="t">{cell}</td><td class="t">{e(str(r.get("started_at") or "—"))}</td>'
        f'<td class="t">{e(str(r.get("profile") or "—"))}</td><td>{r["done"]:,}</td>'
        f"<td>{r['failed']:,}</td><td>{e(str(r['planned'] if r['planned'] is not None else '—'))}</td>"
        f'<td class="t">{state}</td></tr>'
    )


def compare_defaults(
    runs: Sequence[Mapping[str, Any]], names: Sequence[str]
) -> tuple[str | None, str | None]:
    """The compare form's preselected (baseline, current): the newest run and the one started before it
    (started_at of the listed, readable runs), else the first two names; never the same run twice."""
    dated = sorted(
        (str(r["started_at"]), str(r["run_id"]))
        for r in runs
        if r.get("started_at") and not r.get("problem") and r["run_id"] in names
    )
    if len(dated) >= 2:
        return dated[-2][1], dated[-1][1]
    return (names[0], names[1]) if len(names) >= 2 else (None, None)


def runs_page(
    runs: Sequence[Mapping[str, Any]], ledger: str, names: Sequence[str] = (), pager: Pager | None = None
) -> str:
    """The runs of one page of the index (a run that cannot be read is listed as unreadable, with the file and
    field), and a form to compare two of `names` (every run of the ledger)."""
    names = list(names) or [str(r["run_id"]) for r in runs]
    base, cur = compare_defaults(runs, names)

    def opts(chosen: str | None) -> str:
        return "".join(
            f'<option value="{_q(n)}"{" selected" if n == chosen else ""}>{e(n)}</option>'
            for n in names[:MAX_COMPARE_OPTIONS]
        )

    body = [
        f'<p class="muted">Ledger {e(ledger)} (read-only).</p>',
        '<div class="scroll"><table id="runs-table"><thead><tr><th class="t">run</th><th class="t">started</th>'
        '<th class="t">profile</th><th>jobs done</th><th>failed</th><th>planned</th><th class="t">state</th>'
        f"</tr></thead><tbody>{''.join(_run_row(r) for r in runs)}</tbody></table></div>",
    ]
    if pager is not None:
        body.append(pager_html(pager, lambda n: f"/?page={n}"))
    if len(names) > 1:
        body.append(
            '<h2>Compare two runs</h2><form id="compare-form" action="/compare" method="get">'
            f'<label>baseline <select name="a">{opts(base)}</select></label> '
            f'<label>current <select name="b">{opts(cur)}</select></label> '
            '<button type="submit">compare</button></form>'
        )
    return shell("Runs", body)


def _progress(v: RunView) -> str:
    planned = "?" if v.planned is None else f"{v.planned:,}"
    text = f"{v.done:,} of {planned} jobs done, {v.failed:,} failed"
    if v.pending:
        text += f" — being analysed: this page reloads every {REFRESH_S} s until it is ready"
    elif v.running:
        text += f" — the sweep is running: this page follows it (reloads every {REFRESH_S} s; the table is partial)"
    if v.analysed_done is not None and v.doc is not None and v.analysed_done != v.done:
        text += f"; the table is of the first {v.analysed_done:,} (it is updated in the background)"
    return f'<p id="progress" data-done="{v.done}" data-running="{str(v.running).lower()}">{e(text)}</p>'


def budget_pick(v: RunView, text: str | None) -> dict[str, Any] | None:
    """The best arm under a per-task budget ('2k' tokens or '$0.002'), by the same computation as
    `ept analyze --budget` (analysis.recommend.recommend_result over the run's result); None without a budget
    or an analysis. InputError (field budget) for a budget that does not parse."""
    if not text or v.result is None:
        return None
    from elo_per_token.analysis.recommend import parse_budget, recommend_result
    from elo_per_token.contracts.errors import InputError

    try:
        budget = parse_budget(text)
    except InputError as ex:
        raise InputError(ex.message, field="budget") from None
    got: dict[str, Any] | None = recommend_result(v.result, budget)["budget"]
    return got


def _budget_form(v: RunView, text: str | None, pick: Mapping[str, Any] | None, se: bool = False) -> list[str]:
    """A GET form asking for a per-task budget, and the arm it picks (highlighted in the table and plot)."""
    form = (
        f'<form id="budget-form" method="get" action="{_q(run_url(v.run_id))}"><label>Budget per task '
        f'<input name="budget" size="10" placeholder="2k or $0.002" value="{_q(text or "")}"></label> '
        + ('<input type="hidden" name="se" value="1">' if se else "")
        + '<button type="submit">best arm under it</button> <span class="muted">tokens (3000, 2.5k) or dollars '
        "($0.002): the rule of <code>ept analyze --budget</code></span></form>"
    )
    if pick is None:
        return [form]
    arm = pick.get("arm")
    return [
        form,
        f'<p id="budget-pick" data-arm="{_q(arm or "")}" class="{"pick" if arm else "warn"}">'
        f"{e(str(pick.get('text') or ''))}</p>",
    ]


def _se_switch(v: RunView, budget: str | None, se: bool) -> list[str]:
    """A link that shows (or hides) the accuracy table's '± s.e.' column: the page's URL with se=1 (or without)."""
    url = run_url(v.run_id, budget=budget or None, se=None if se else "1")
    text = "hide ± s.e." if se else "show ± s.e. next to accuracy"
    return [
        f'<p class="muted"><a id="se-switch" href="{_q(url)}">{text}</a> (the standard error of the mean '
        "score, as lm-eval prints it; the intervals below are Wilson intervals)</p>"
    ]


def _mark_pick(fragment: str, arm: str | None) -> str:
    """The budget's arm marked (data-budget-pick) in the table rows and plot points that carry data-arm."""
    if not arm:
        return fragment
    a = _q(arm)
    return fragment.replace(f'<tr data-arm="{a}"', f'<tr data-arm="{a}" data-budget-pick="1"').replace(
        f'<g class="pt" data-arm="{a}"', f'<g class="pt budget-pick" data-arm="{a}"'
    )


def run_page(
    v: RunView, budget: str | None = None, pick: Mapping[str, Any] | None = None, se: bool = False
) -> str:
    """Recommendation, the budget form (and its pick, highlighted), the interactive plot with strategy toggles,
    the returns table, accuracy (with a '± s.e.' column when `se`), the step tables and links to the arms, the
    samples and the grid."""
    body = [_progress(v)]
    if v.options_from and "'s plan: " in v.options_from:  # the plan's options were refused
        body.append(f'<p class="warn" id="options-from">Analysed with {e(v.options_from)}.</p>')
    if v.doc is None:
        body.append(f'<p class="warn" id="no-analysis">No analysis yet: {e(v.error or "")}</p>')
        return shell(f"Run {v.run_id}", body, refresh=v.running, crumbs=[(v.run_id, run_url(v.run_id))])
    doc = v.doc
    returns = list(doc.returns or [])
    body += recommendation_section(doc)
    body += _budget_form(v, budget, pick, se)
    first = len(body)
    colours = strategy_colours([str(r.get("strategy") or "") for r in returns])
    toggles = "".join(
        f'<label class="toggle"><input type="checkbox" checked data-strategy="{_q(s)}">'
        f'<span class="swatch" style="background:{c}"></span>{e(s)}</label>'
        for s, c in colours.items()
    )
    level = (doc.options or {}).get("level") or 0.95
    body += [
        "<h2>Elo against tokens per task</h2>",
        f'<div id="toggles">{toggles}<label class="toggle"><input type="checkbox" checked id="show-frontier">'
        f'<svg class="swatch-line" width="26" height="10" aria-hidden="true"><line x1="0" x2="26" y1="5" y2="5" '
        f'stroke="{FRONTIER_COLOUR}" stroke-width="2" stroke-dasharray="{FRONTIER_DASH}"/></svg>frontier</label></div>',
        f'<figure id="plot">{elo_tokens_svg(returns, f"{round(level * 100)}%", doc.anchor)}<div id="tip" hidden></div></figure>',
        "<h2>Diminishing returns</h2>",
        table("returns-table", with_frontier_text(returns), RETURNS_COLUMNS, row_class="frontier"),
        '<h2>Arms</h2><ul id="arm-links">'
        + "".join(
            f'<li><a href="{_q(run_url(v.run_id, "arm", arm=r["arm"]))}">{e(r["arm"])}</a> · '
            f'<a class="arm-samples" data-arm="{_q(r["arm"])}" href="{_q(run_url(v.run_id, "samples", arm=r["arm"], sort="score"))}">'
            "its samples, losses first</a></li>"
            for r in returns
        )
        + "</ul>",
        f'<p><a id="samples-link" href="{_q(run_url(v.run_id, "samples"))}">sample explorer</a> · '
        f'<a id="grid-link" href="{_q(run_url(v.run_id, "grid"))}">arms × tasks grid</a> · '
        f'<a href="{_q(run_url(v.run_id, "report.json"))}">report.json</a></p>',
    ]
    body += _se_switch(v, budget, se)
    body += accuracy_section(doc, table, se=se)
    body += step_tables_section(doc, table)
    for w in doc.warnings or []:
        body.append(f'<p class="warn">{e(str(w))}</p>')
    body[first:] = [_mark_pick(x, (pick or {}).get("arm")) for x in body[first:]]
    return shell(f"Run {v.run_id}", body, refresh=v.running, crumbs=[(v.run_id, run_url(v.run_id))])


def _fmt_score(x: Any) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def _tokens(x: Any) -> str:
    return "—" if x is None else f"{x:,.0f}"


def grid_page(v: RunView, grid: Mapping[str, Any], family: str | None, disagree: bool) -> str:
    """Arms x tasks: each cell the task's mean score (colour) and tokens (hover), filterable by family and
    to the tasks where the arms disagree."""
    arms, fams = grid["arms"], grid["families"]
    sel = "".join(
        f'<option value="{_q(f)}"{" selected" if f == family else ""}>{e(f)}</option>' for f in fams
    )
    form = (
        f'<form id="grid-filter" method="get"><label>family <select name="family"><option value="">all'
        f'</option>{sel}</select></label> <label><input type="checkbox" name="disagree" value="1"'
        f'{" checked" if disagree else ""}> arms disagree</label> <button type="submit">filter</button></form>'
    )
    head = "".join(
        f'<th class="arm"><a href="{_q(run_url(v.run_id, "arm", arm=a))}">{e(a)}</a></th>' for a in arms
    )
    n, run_n = grid["total"], grid.get("in_run", grid["total"])
    count = f"all {n:,} tasks of the run" if n == run_n else f"{n:,} of the run's {run_n:,} tasks match"
    body = [
        form,
        f'<p class="muted" id="grid-count" data-total="{n}">{count}'
        + (f" (the first {len(grid['rows']):,} shown)" if grid.get("clipped") else "")
        + ".</p>",
        f'<div class="scroll"><table id="grid-table"><thead><tr><th class="t">task</th>{head}</tr></thead><tbody>',
    ]
    for r in grid["rows"]:
        link = run_url(v.run_id, "task", task=r["task_id"])
        cells = []
        for a in arms:
            c = r["cells"].get(a)
            if c is None:
                cells.append('<td class="na">—</td>')
                continue
            shade = int(255 - 120 * (c["score"] or 0))
            cells.append(
                f'<td data-arm="{_q(a)}" data-value="{c["score"]}" title="{_q(_tokens(c["tokens"]))} tokens" '
                f'style="background:rgb({shade},{255},{shade})">{_fmt_score(c["score"])}</td>'
            )
        body.append(
            f'<tr data-task="{_q(r["task_id"])}"><td class="t"><a href="{_q(link)}">{e(r["task_id"])}</a></td>'
            + "".join(cells)
            + "</tr>"
        )
    body.append("</tbody></table></div>")
    return shell(
        f"Grid of {v.run_id}",
        body,
        refresh=v.running,
        crumbs=[(v.run_id, run_url(v.run_id)), ("grid", run_url(v.run_id, "grid"))],
    )


def _task_head(about: Mapping[str, Any]) -> list[str]:
    """The prompt the arms were sent and the reference answer, each said missing with why."""
    out = ['<section id="task-prompt"><h2>Prompt</h2>']
    if about.get("prompt"):
        out.append(f'<p class="muted">as sent in job {e(str(about.get("prompt_from")))} (its transcript)</p>')
        for m in about["prompt"]:
            out.append(
                f'<div class="msg"><div class="lbl">{e(str(m.get("role") or "message"))}</div>'
                f"<pre>{pretty(m.get('content'))}</pre></div>"
            )
    else:
        out.append('<p class="muted">No transcript of this task\'s jobs is stored (the run kept none).</p>')
    out.append('</section><section id="task-reference"><h2>Reference</h2>')
    ref = about.get("reference")
    out.append(f'<p class="muted">{e(str(about.get("reference_from") or ""))}</p>')
    if ref is not None:
        out.append(f"<pre>{pretty(ref)}</pre>")
    out.append("</section>")
    return out


def task_page(
    v: RunView,
    task_id: str,
    rows: Sequence[Mapping[str, Any]],
    pager: Pager | None = None,
    *,
    arm: str | None = None,
    about: Mapping[str, Any] | None = None,
) -> str:
    """One task: its prompt and reference, then every arm and replicate on it (one page of them) with score,
    tokens, error class and final answer, each linked to its job. `arm`: the arm the reader came from (the
    breadcrumb names it and its rows are marked)."""
    about = about or {}
    outcomes = about.get("outcomes") or {}
    body = [
        *_task_head(about),
        "<h2>Outcomes</h2>",
        '<div class="scroll"><table id="task-jobs" class="sticky"><thead><tr><th class="t">arm</th><th>replicate</th>'
        '<th>score</th><th>tokens</th><th class="t">error</th><th class="t">final answer</th><th class="t">job</th>'
        "</tr></thead><tbody>",
    ]
    for r in rows:
        link = run_url(v.run_id, "job", key=r["job_key"], arm=arm)
        o = outcomes.get(r["job_key"]) or {}
        ans = o.get("answer")
        mark = ' class="from-arm"' if arm is not None and r["arm"] == arm else ""
        body.append(
            f'<tr data-arm="{_q(r["arm"])}"{mark}><td class="t arm-name">{e(r["arm"])}</td><td>{r["replicate"]}</td>'
            f'<td data-value="{r["score"]}">{_fmt_score(r["score"])}</td><td>{_tokens(r.get("tokens"))}</td>'
            f'<td class="t">{e(str(o.get("error_class") or ""))}</td>'
            f'<td class="t snippet">{"—" if ans is None else e(ans[:120])}</td>'
            f'<td class="t"><a class="job-link" href="{_q(link)}">transcript</a></td></tr>'
        )
    body.append("</tbody></table></div>")
    if pager is not None:
        body.append(pager_html(pager, lambda n: run_url(v.run_id, "task", task=task_id, arm=arm, page=n)))
    crumbs = [(v.run_id, run_url(v.run_id))]
    if arm is not None:
        crumbs.append((arm, run_url(v.run_id, "arm", arm=arm)))
    crumbs.append((task_id, run_url(v.run_id, "task", task=task_id, arm=arm)))
    return shell(f"Task {task_id}", body, crumbs=crumbs)


def error_page(status: int, message: str) -> str:
    return shell(f"{status}", [f'<p class="warn" id="error">{e(message)}</p>'])


def pretty(x: Any) -> str:
    return e(x if isinstance(x, str) else json.dumps(x, indent=2, ensure_ascii=False, default=str))
