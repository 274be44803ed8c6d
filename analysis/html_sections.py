"""Sections of the HTML report that say what the terminal says: the recommendation (first), accuracy and
pass@k, the per-strategy and vs-previous-frontier tables, and a line explaining every column.

Rendered from the report's document (analysis.html_document.HtmlDocument) like the rest of the page (and the
viewer's run page); numeric cells carry `data-value`.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from elo_per_token.analysis.html_document import HtmlDocument


class TableRenderer(Protocol):
    """analysis.html._table: rows as an HTML table, numeric cells carrying `data-value`."""

    def __call__(
        self,
        table_id: str,
        rows: Sequence[Mapping[str, Any]],
        columns: Sequence[tuple[str, str, str | None]],
        row_class: str | None = None,
    ) -> str: ...


# (key, label, format, what the column means): the returns tables' columns, as the terminal shows them.
STEP_COLUMNS: list[tuple[str, str, str | None, str]] = [
    ("arm", "arm", None, "strategy@budget, with its parameter variant"),
    ("budget_n", "budget", "d", "the strategy's budget n (samples, votes, nodes)"),
    (
        "tokens_per_task",
        "tokens/task",
        ",.0f",
        "mean strategy tokens per task (prompt + completion), families "
        "weighted like Elo; judge calls excluded",
    ),
    ("elo", "Elo", ".1f", "merged Bradley-Terry Elo, the anchor at 1000"),
    ("elo_lo", "lo", ".1f", "lower end of the bootstrap interval (tasks resampled within families)"),
    ("elo_hi", "hi", ".1f", "upper end of that interval"),
    ("d_elo", "ΔElo", "+.1f", "Elo minus the previous row's (the comparison named in the table's title)"),
    ("d_elo_lo", "lo", "+.1f", "interval of ΔElo (same bootstrap rounds for both arms)"),
    ("d_elo_hi", "hi", "+.1f", ""),
    (
        "d_elo_per_1k",
        "ΔElo/1k tok",
        ".2f",
        "ΔElo divided by the token step, per 1000 tokens; — where the token "
        "step's interval includes 0 (the ratio could be anything)",
    ),
    ("d_elo_per_1k_lo", "lo", ".2f", "interval of the ratio"),
    ("d_elo_per_1k_hi", "hi", ".2f", ""),
    ("frontier", "frontier", None, "no arm is at least as cheap and at least as strong"),
    ("frontier_prob", "frontier P", ".0%", "share of bootstrap rounds in which the arm is on the frontier"),
]


def frontier_text(row: Mapping[str, Any]) -> str:
    """The frontier cell in words: the point estimate (yes / no) and, when the bootstrap band is not 'on' or
    'off', that the placement is uncertain, so a 'yes' never stands beside a bare 'uncertain'.

    Args:
        row: A returns row (frontier, frontier_band).
    """
    word = "yes" if row.get("frontier") else "no"
    band = str(row.get("frontier_band") or "")
    if band == "uncertain":
        return f"{word}, uncertain"
    return f"{word} (partial arm)" if "partial" in band else word


def with_frontier_text(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The returns rows with `frontier_text` (frontier_text) added for the returns table.

    Args:
        rows: The table's rows (dicts of its columns).
    """
    return [{**r, "frontier_text": frontier_text(r)} for r in rows]


def _cols(keys: Sequence[tuple[str, str, str | None, str]]) -> list[tuple[str, str, str | None]]:
    return [(k, label, fmt) for k, label, fmt, _ in keys]


def column_notes(columns: Sequence[tuple[str, str, str | None, str]]) -> str:
    """A definition list: one line per column that has an explanation.

    Args:
        columns: (key, header, format, explanation) of each column.
    """
    items = "".join(
        f"<dt>{html.escape(label)}</dt><dd>{html.escape(note)}</dd>" for _, label, _, note in columns if note
    )
    return f'<details class="notes"><summary>What each column means</summary><dl>{items}</dl></details>'


def recommendation_section(doc: HtmlDocument) -> list[str]:
    """The recommendation's lines at the top of the page (analysis.recommend).

    Args:
        doc: The page's data (build_document).
    """
    rec = doc.recommendation or {}
    lines = list(rec.get("lines") or [])
    if not lines:
        return []
    head, rest = lines[0], lines[1:]
    status = html.escape(str(rec.get("status", "")), quote=True)
    pick = html.escape(str(rec.get("arm") or ""), quote=True)
    out = [
        f'<section id="recommendation" data-status="{status}" data-arm="{pick}">',
        f'<p class="rec"><strong>{html.escape(head)}</strong></p>',
    ]
    if rest:
        out.append("<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in rest) + "</ul>")
    out.append("</section>")
    return out


def _with_pass_at_k(
    acc: list[Any], pk: dict[tuple[Any, Any], Any], ks: list[Any], marked_arm: Callable[[Any], str]
) -> list[dict[str, Any]]:
    """The accuracy rows (arm names marked) with the pass@k value and interval of each k in ks."""
    rows = []
    for r in acc:
        row = {**r, "arm": marked_arm(r)}
        for k in ks:
            p = pk.get((r["arm"], k)) or {}
            row[f"pass_at_{k}"], row[f"pass_at_{k}_lo"], row[f"pass_at_{k}_hi"] = (
                p.get("pass_at_k"),
                p.get("pass_at_k_lo"),
                p.get("pass_at_k_hi"),
            )
        rows.append(row)
    return rows


def _accuracy_intro(label: str) -> str:
    """The paragraph above the accuracy table: what the score is, how it is averaged and what the marks mean."""
    kind = "every score 0 or 1" if label == "pass@1" else "partial credit"
    return (
        f'<p class="muted">{html.escape(label)} per arm ({kind}): '
        "per task the mean over replicates, per family the mean over tasks, families weighted like Elo, missing "
        "scores as the Elo table counts them; Clopper-Pearson intervals on the effective number of tasks; [family only]: "
        "a partial arm, not comparable. pass@k: the unbiased estimator 1 − C(n−c, k)/C(n, k) over tasks with "
        "n ≥ k replicates.</p>"
    )


def accuracy_section(doc: HtmlDocument, table: TableRenderer, *, se: bool = False) -> list[str]:
    """Accuracy / pass@1 per arm with intervals, pass@k where an arm has replicates, and per family.

    Args:
        doc: the report's data (accuracy, pass_at_k, accuracy_family).
        table: analysis.html._table (passed in: this module does not import the page it is part of).
        se: a '± s.e.' column (the analysis' accuracy_se) after the interval.
    """
    acc = list(doc.accuracy or [])
    if not acc:
        return []
    pk = {(r["arm"], r["k"]): r for r in doc.pass_at_k or []}
    ks = sorted({k for _, k in pk if k > 1})
    from elo_per_token.analysis.accuracy_report import marked_arm, score_label_of

    label = score_label_of(acc)
    rows = _with_pass_at_k(acc, pk, ks, marked_arm)
    cols: list[tuple[str, str, str | None]] = [
        ("arm", "arm", None), ("accuracy", label, ".1%"), ("accuracy_lo", "lo", ".1%"),
        ("accuracy_hi", "hi", ".1%"), ("tasks", "tasks", ",d"), ("outcomes", "outcomes", ",d"),
    ]  # fmt: skip
    if se:
        cols.insert(4, ("accuracy_se", "± s.e.", ".1%"))
    for k in ks:
        cols += [
            (f"pass_at_{k}", f"pass@{k}", ".1%"),
            (f"pass_at_{k}_lo", "lo", ".1%"),
            (f"pass_at_{k}_hi", "hi", ".1%"),
        ]
    out = [
        '<section id="accuracy"><h2>Accuracy</h2>',
        _accuracy_intro(label),
        table("accuracy-table", rows, cols),
    ]
    fam = list(doc.accuracy_family or [])
    if fam:
        out.append(
            table(
                "accuracy-family-table",
                fam,
                [
                    ("family", "family", None),
                    ("arm", "arm", None),
                    ("accuracy", "accuracy", ".1%"),
                    ("accuracy_lo", "lo", ".1%"),
                    ("accuracy_hi", "hi", ".1%"),
                    ("tasks", "tasks", ",d"),
                ],
            )
        )
    out.append("</section>")
    return out


def step_tables_section(doc: HtmlDocument, table: TableRenderer) -> list[str]:
    """The per-strategy and vs-previous-frontier tables, as in the terminal.

    Args:
        doc: The page's data (build_document).
        table: The table renderer (analysis.html._table).
    """
    out: list[str] = []
    cols = _cols(STEP_COLUMNS)
    per = list(doc.per_strategy or [])
    if per:
        out += [
            '<section id="per-strategy"><h2>Per strategy</h2>',
            '<p class="muted">Each budget against the previous budget of the same strategy.</p>',
            table("per-strategy-table", per, cols, row_class="frontier"),
            "</section>",
        ]
    vs = list(doc.vs_frontier or [])
    if vs:
        rows = [{**r, "arm": f"{r['arm']} vs {r['vs']}" if r.get("vs") else r["arm"]} for r in vs]
        out += [
            '<section id="vs-frontier"><h2>Vs previous frontier arm</h2>',
            '<p class="muted">Each arm against the next-cheaper arm on the frontier, so a dominated arm in '
            "between does not inflate the next step.</p>",
            table("vs-frontier-table", rows, cols, row_class="frontier"),
            "</section>",
        ]
    return out
