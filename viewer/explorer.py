"""The sample explorer page (/run/<id>/samples): the query (viewer.samples) run over the run's job rows, one
page of them, with the filter form, sortable headers and the notes on what the search covered. Every link
carries the whole query, so a filtered, sorted, searched view is a deep link."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from elo_per_token.viewer.pages import Pager, _q, e, pager_html, run_url, shell
from elo_per_token.viewer.samples import (
    ANY_ERROR,
    COLUMNS,
    NO_ERROR,
    SEARCH_MAX_BYTES,
    SNIPPET_CHARS,
    Found,
    Query,
)

if TYPE_CHECKING:
    from elo_per_token.viewer.store import RunView


def _select(name: str, label: str, options: Sequence[str], chosen: str | None) -> str:
    opts = "".join(
        f'<option value="{_q(o)}"{" selected" if o == chosen else ""}>{e(o)}</option>' for o in options
    )
    return f'<label>{e(label)} <select name="{name}"><option value="">all</option>{opts}</select></label>'


def _form(frame: pl.DataFrame, q: Query) -> str:
    """The filter form (GET: its fields are the URL's parameters); sort and order ride along hidden."""

    def vals(col: str) -> list[str]:
        return sorted(frame[col].drop_nulls().unique().to_list())

    errors = [ANY_ERROR, NO_ERROR, *vals("error_class")]

    def num(n: str, v: float | None) -> str:
        return f'<input type="number" step="any" name="{n}" value="{_q("" if v is None else f"{v:g}")}" size="5">'

    hidden = "".join(
        f'<input type="hidden" name="{k}" value="{_q(v)}">'
        for k, v in q.params().items()
        if k in ("sort", "desc")
    )
    return (
        '<form id="samples-filter" method="get" class="filters">'
        + _select("family", "family", vals("family"), q.family)
        + _select("arm", "arm", vals("arm"), q.arm)
        + f"<label>score {num('smin', q.score_min)} to {num('smax', q.score_max)}</label>"
        + _select("error", "error", errors, q.error)
        + f'<label><input type="checkbox" name="disagree" value="1"{" checked" if q.disagree else ""}> arms disagree</label>'
        + f'<label>search <input type="search" name="q" value="{_q(q.q or "")}" maxlength="200" '
        'placeholder="text in prompts, completions, answers"></label>'
        + f'{hidden}<button type="submit">apply</button> <a href="?">clear</a></form>'
    )


def _head(run_id: str, q: Query) -> str:
    """Column headers: each a link sorting by it (ascending; again: descending)."""
    out = []
    for col, label in COLUMNS.items():
        desc = q.sort == col and not q.desc
        mark = (" ▾" if q.desc else " ▴") if q.sort == col else ""
        link = run_url(run_id, "samples", **q.params(sort=col, desc=desc, page=1))
        cls = "t" if col in ("task_id", "family", "arm", "error_class", "answer") else ""
        out.append(
            f'<th class="{cls}" data-col="{col}"><a class="sort" href="{_q(link)}">{e(label)}{mark}</a></th>'
        )
    return "<tr>" + "".join(out) + '<th class="t">job</th></tr>'


def _num(x: Any, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def _row(run_id: str, r: Mapping[str, Any]) -> str:
    task = run_url(run_id, "task", task=r["task_id"], arm=r["arm"])
    job = run_url(run_id, "job", key=r["job_key"]) if r.get("job_key") else None
    ans = r.get("answer")
    snippet = "—" if ans is None else (ans[:SNIPPET_CHARS] + ("…" if len(ans) > SNIPPET_CHARS else ""))
    cells = [
        f'<td class="t"><a href="{_q(task)}">{e(r["task_id"])}</a></td>',
        f'<td class="t">{e(str(r["family"]))}</td>',
        f'<td class="t arm-name">{e(str(r["arm"]))}</td>',
        f"<td>{r['replicate']}</td>",
        f'<td data-value="{r["score"]}">{_num(r["score"], ".2f")}</td>',
        f'<td data-value="{r["tokens"]}">{_num(r["tokens"], ",.0f")}</td>',
        f'<td data-value="{r["cost"]}">{_num(r["cost"], ".5f")}</td>',
        f'<td data-value="{r["latency_s"]}">{_num(r["latency_s"], ".2f")}</td>',
        f'<td class="t">{e(str(r["error_class"] or ""))}</td>',
        f'<td class="t snippet">{e(snippet)}</td>',
        f'<td class="t"><a class="job-link" href="{_q(job)}">job</a></td>' if job else '<td class="t">—</td>',
    ]
    return f'<tr data-arm="{_q(r["arm"])}" data-task="{_q(r["task_id"])}" data-key="{_q(r.get("job_key") or "")}">{"".join(cells)}</tr>'


def explorer_page(v: RunView, frame: pl.DataFrame, q: Query, found: Found, pager: Pager) -> str:
    """One page of the explorer: form, counts, search coverage, table, pager."""
    count = (
        f"all {frame.height:,} samples (one per job)"
        if found.total == frame.height
        else f"{found.total:,} of the run's {frame.height:,} samples match"
    )
    notes = []
    if q.q is not None:
        cover = (
            f"searched the final answers of all {found.candidates:,} filtered samples and the transcripts of "
            f"{found.scanned:,}"
        )
        if found.capped:
            cover += (
                f": the search stops after {SEARCH_MAX_BYTES // 2**20} MB of transcript text per request; "
                "narrow the filter to search the rest"
            )
        notes.append(f'<p class="{"warn" if found.capped else "muted"}" id="search-cover">{e(cover)}.</p>')
    if v.samples_note:
        notes.append(f'<p class="muted">{e(v.samples_note)}.</p>')
    body = [
        _form(frame, q),
        f'<p class="muted" id="samples-count" data-total="{found.total}">{count}.</p>',
        *notes,
        f'<div class="scroll"><table id="samples-table" class="sticky"><thead>{_head(v.run_id, q)}</thead><tbody>',
        *(_row(v.run_id, r) for r in found.rows),
        "</tbody></table></div>",
        pager_html(pager, lambda n: run_url(v.run_id, "samples", **q.params(page=n))),
    ]
    return shell(
        f"Samples of {v.run_id}",
        body,
        refresh=False,
        crumbs=[(v.run_id, run_url(v.run_id)), ("samples", run_url(v.run_id, "samples"))],
    )
