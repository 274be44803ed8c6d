"""The arm page (/run/<id>/arm?arm=): a summary of the arm — Elo, accuracy, tokens and cost per task, failures,
frontier — taken from the run's report document (the numbers the run page and `ept analyze` show, rendered,
never recomputed), then its tasks, sortable by any column, one page at a time."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from elo_per_token.analysis.html_sections import frontier_text
from elo_per_token.viewer.pages import Pager, _fmt_score, _q, _tokens, e, pager_html, run_url, shell

if TYPE_CHECKING:
    from elo_per_token.viewer.store import RunView

# ?sort= of the task list -> the row key it sorts by (viewer.grids.arm_rows' rows) and the header's label
ARM_SORTS: dict[str, tuple[str, str]] = {
    "family": ("family", "family"), "task": ("task_id", "task"), "score": ("score", "score"),
    "replicates": ("n", "replicates"), "tokens": ("tokens", "tokens"),
}  # fmt: skip


def sort_rows(rows: Sequence[dict[str, Any]], sort: str | None, desc: bool) -> list[dict[str, Any]]:
    """The rows by ARM_SORTS[sort] (family then task when None), missing values last either way; an unknown
    `sort` is an InputError naming the parameter."""
    if sort is None:
        return list(rows)
    if sort not in ARM_SORTS:
        from elo_per_token.contracts.errors import InputError

        raise InputError(f"must be one of {', '.join(ARM_SORTS)}, got {sort[:40]!r}", field="sort")
    key = ARM_SORTS[sort][0]

    def missing(r: Mapping[str, Any]) -> bool:
        x = r.get(key)
        return x is None or (isinstance(x, float) and math.isnan(x))

    have = sorted((r for r in rows if not missing(r)), key=lambda r: (r[key], r["task_id"]), reverse=desc)
    return have + [r for r in rows if missing(r)]


def _row_of(rows: Sequence[Mapping[str, Any]] | None, arm: str) -> Mapping[str, Any]:
    return next((r for r in rows or [] if r.get("arm") == arm), {})


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _dv(x: Any) -> str:
    """A numeric cell's data-value attribute (none for a missing value: the cell shows —)."""
    return f' data-value="{_q(repr(float(x)))}"' if _num(x) else ""


def _cell(name: str, label: str, value: Any, text: str, note: str = "") -> str:
    dv = _dv(value)
    extra = f' <span class="muted">{e(note)}</span>' if note else ""
    return f'<tr data-key="{name}"><th class="t">{e(label)}</th><td class="t"{dv}>{e(text)}{extra}</td></tr>'


def _interval(lo: Any, hi: Any, fmt: str) -> str:
    return f" [{lo:{fmt}}, {hi:{fmt}}]" if _num(lo) and _num(hi) else ""


def summary_html(v: RunView, arm: str) -> str:
    """The arm's summary table from the report document: Elo with its interval, accuracy (pass@1 or mean
    score) with its interval and ± s.e., tokens and cost per task, failures and the frontier placement."""
    doc = v.doc
    if doc is None:
        return ""
    level = f"{round(float((doc.options or {}).get('level') or 0.95) * 100)}%"
    ret, acc = _row_of(doc.returns, arm), _row_of(doc.accuracy, arm)
    brk, cost = _row_of(doc.breakdown, arm), _row_of(doc.cost_table, arm)
    out = ['<table id="arm-summary" class="summary"><tbody>']
    if _num(ret.get("elo")):
        out.append(
            _cell(
                "elo",
                "Elo",
                ret["elo"],
                f"{ret['elo']:.1f}" + _interval(ret.get("elo_lo"), ret.get("elo_hi"), ".1f"),
                f"{level} interval" + (" (the anchor)" if arm == doc.anchor else ""),
            )
        )
    if _num(acc.get("accuracy")):
        from elo_per_token.analysis.accuracy_report import score_label_of

        se = f" ± {acc['accuracy_se']:.1%} s.e." if _num(acc.get("accuracy_se")) else ""
        out.append(
            _cell(
                "accuracy",
                score_label_of([dict(acc)]),
                acc["accuracy"],
                f"{acc['accuracy']:.1%}"
                + _interval(acc.get("accuracy_lo"), acc.get("accuracy_hi"), ".1%")
                + se,
                f"{level} Wilson interval, {acc.get('tasks', 0):,} tasks, {acc.get('outcomes', 0):,} outcomes",
            )
        )
    if _num(ret.get("tokens_per_task")):
        out.append(
            _cell("tokens", "tokens per task", ret["tokens_per_task"], f"{ret['tokens_per_task']:,.0f}")
        )
    if _num(cost.get("cost_per_task")):
        out.append(_cell("cost", "cost per task", cost["cost_per_task"], f"${cost['cost_per_task']:.5f}"))
    out.append(_failures(v, arm, brk))
    if ret:
        p = ret.get("frontier_prob")
        out.append(
            _cell(
                "frontier",
                "frontier",
                p,
                frontier_text(ret),
                f"on the frontier in {p:.0%} of bootstrap rounds" if _num(p) else "",
            )
        )
    out.append("</tbody></table>")
    return "".join(out)


def _failures(v: RunView, arm: str, brk: Mapping[str, Any]) -> str:
    """Jobs of the arm that failed before grading (by error class) and tasks it lost or left unscored."""
    doc = v.doc
    fails = [r for r in (doc.failures if doc else []) or [] if r.get("arm") == arm]
    n = sum(int(r.get("count") or 0) for r in fails)
    text = f"{n:,} job{'s' if n != 1 else ''} failed before grading"
    if fails:
        text += " (" + ", ".join(f"{r.get('error_class')}: {int(r.get('count') or 0):,}" for r in fails) + ")"
    if brk:
        text += (
            f"; of {int(brk.get('tasks_attempted') or 0):,} tasks attempted, {int(brk.get('tasks_lost') or 0):,} "
            f"failed and were scored as losses, {int(brk.get('tasks_unscored') or 0):,} failed unscored"
        )
    link = f' <a id="arm-failures" href="{_q(run_url(v.run_id, "samples", arm=arm, sort="score"))}">its samples, losses first</a>'
    return (
        f'<tr data-key="failures"><th class="t">failures</th><td class="t" data-value="{n}">{e(text)}{link}</td>'
        "</tr>"
    )


def _head(v: RunView, arm: str, sort: str | None, desc: bool) -> str:
    """Header cells whose links sort by the column (a second click reverses the order)."""
    cells = []
    for name, (_, label) in ARM_SORTS.items():
        again = sort == name and not desc
        mark = (" ▼" if desc else " ▲") if sort == name else ""
        url = run_url(v.run_id, "arm", arm=arm, sort=name, desc="1" if again else None)
        cls = ' class="t"' if name in ("family", "task") else ""
        cells.append(f'<th{cls} data-col="{name}"><a href="{_q(url)}">{e(label)}{mark}</a></th>')
    return "".join(cells)


def arm_page(
    v: RunView,
    arm: str,
    rows: Sequence[Mapping[str, Any]],
    pager: Pager | None = None,
    *,
    sort: str | None = None,
    desc: bool = False,
) -> str:
    """The arm's summary, then one page of its tasks (mean score, replicates and tokens per task, each task
    linked), in the order `sort`/`desc` asked for (sort_rows)."""
    count = f"{pager.rows if pager else len(rows):,} tasks."
    body = [
        "<h2>Summary</h2>",
        summary_html(v, arm),
        "<h2>Tasks</h2>",
        f'<p class="muted">{count} Click a column to sort by it (again: the other way).</p>',
        f'<div class="scroll"><table id="arm-tasks"><thead><tr>{_head(v, arm, sort, desc)}</tr></thead><tbody>',
    ]
    for r in rows:
        link = run_url(v.run_id, "task", task=r["task_id"], arm=arm)
        body.append(
            f'<tr data-task="{_q(r["task_id"])}"><td class="t">{e(r["family"])}</td><td class="t">'
            f'<a href="{_q(link)}">{e(r["task_id"])}</a></td><td{_dv(r["score"])}>'
            f"{_fmt_score(r['score'])}</td><td{_dv(r['n'])}>{r['n']}</td>"
            f"<td{_dv(r.get('tokens'))}>{_tokens(r.get('tokens'))}</td></tr>"
        )
    body.append("</tbody></table></div>")
    if pager is not None:
        desc_param = "1" if desc else None
        body.append(
            pager_html(pager, lambda n: run_url(v.run_id, "arm", arm=arm, sort=sort, desc=desc_param, page=n))
        )
    return shell(
        f"{arm} in {v.run_id}",
        body,
        refresh=v.running,
        crumbs=[(v.run_id, run_url(v.run_id)), (arm, run_url(v.run_id, "arm", arm=arm))],
    )
