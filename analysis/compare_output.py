"""`ept compare`'s outputs: the Markdown report and the JSON document."""

from __future__ import annotations

from typing import Any

from elo_per_token.analysis.compare_types import CompareResult
from elo_per_token.analysis.numfmt import fmt


def _code(name: object) -> str:
    """An untrusted name as a Markdown code span: nothing inside is HTML or Markdown; only a backtick (which
    would end the span) or a pipe (which would end the table cell) needs replacing."""
    return "`" + str(name).replace("`", "'").replace("|", "\\|").replace("\n", " ") + "`"


def to_markdown(res: CompareResult) -> str:
    """A pull-request comment: verdict first, then the per-arm table, then the method in one paragraph.
    Arm names, families and sources come from the inputs: escaped (report.md's rules), never live HTML.

    Args:
        res: The comparison result.
    """
    from elo_per_token.analysis.report_markdown import md_escape

    pct = f"{res.level * 100:g}%"
    if res.flagged:
        head = f"### ❌ ept compare: regression in {len(res.flagged)} arm(s): " + ", ".join(
            _code(a) for a in res.flagged
        )
    else:
        head = "### ✅ ept compare: no regression the data supports"
    lines = [
        head,
        "",
        f"Baseline {_code(res.sources[0])} vs current {_code(res.sources[1])}. Rule: {res.rule.describe()}, applied to "
        f"{res.gate_level * 100:.4g}% intervals ({pct} adjusted for {res.table.height} arms tested at once).",
        "",
        f"| arm | Elo base | Elo current | ΔElo [{pct} CI] | tokens/task base | tokens/task current | "
        f"Δtokens [{pct} CI] | ΔElo/1k tok base | ΔElo/1k tok current | drop caught 80% | status |",
        "|---|---:|---:|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in res.table.iter_rows(named=True):
        status = "❌ regression" if r["arm"] in res.flagged else "ok"
        rel = r["d_tokens_rel"]
        dtok = (
            f"{fmt(rel * 100 if rel is not None else None, '+.1f')}% "
            f"[{fmt(_mul(r['d_tokens_rel_lo']), '+.1f')}%, {fmt(_mul(r['d_tokens_rel_hi']), '+.1f')}%]"
        )
        lines.append(
            f"| {_code(r['arm'])} | {fmt(r['elo_base'], '.0f')} | {fmt(r['elo_cur'], '.0f')} | "
            f"{fmt(r['d_elo'], '+.1f')} [{fmt(r['d_elo_lo'], '+.1f')}, {fmt(r['d_elo_hi'], '+.1f')}] | "
            f"{fmt(r['tokens_base'], ',.0f')} | {fmt(r['tokens_cur'], ',.0f')} | {dtok} | "
            f"{fmt(r['d_elo_per_1k_base'], '.1f')} | {fmt(r['d_elo_per_1k_cur'], '.1f')} | "
            f"{fmt(r['detectable_drop'], '.0f')} | {status} |"
        )
    if res.flagged:
        lines += ["", "**Why flagged**", ""]
        for arm in res.flagged:
            lines += [f"- {_code(arm)}: " + md_escape("; ".join(res.reasons[arm]))]
    lines += [
        "",
        f"<sub>Both runs fitted together (Bradley-Terry per family over every (run, arm), comparisons within each "
        f"task across runs), families {', '.join(f'{md_escape(f)}={w:.2f}' for f, w in res.family_weights.items())}; "
        f"Elo shown with baseline {_code(res.anchor)} = 1000 (differences do not depend on this anchor). Intervals: "
        f"{res.rounds}-round bootstrap resampling task ids, the same tasks in both runs. ΔElo/1k tok: each arm "
        f"against the previous row, within its run. Drop caught 80%: the smallest true Elo drop this rule "
        f"flags in 80% of runs of this size (margin + (z_gate + 0.84) x the bootstrap sd of ΔElo); smaller "
        f"drops are mostly missed.</sub>",
    ]
    if res.notes:
        lines += ["", *[f"> {md_escape(n)}" for n in res.notes]]
    return "\n".join(lines) + "\n"


def _mul(x: float | None) -> float | None:
    return None if x is None else x * 100.0


def to_json_dict(res: CompareResult) -> dict[str, Any]:
    """Every number of the comparison as JSON (--json): sources, verdict, rule, options and the per-arm table.

    Args:
        res: The comparison result.
    """
    return {
        "baseline": res.sources[0],
        "current": res.sources[1],
        "verdict": "regression" if res.flagged else "ok",
        "flagged": res.flagged,
        "reasons": res.reasons,
        "rule": res.rule.describe(),
        "level": res.level,
        "gate_level": res.gate_level,
        "rounds": res.rounds,
        "failed_rounds": res.failed_rounds,
        "anchor": res.anchor,
        "family_weights": res.family_weights,
        "notes": res.notes,
        "arms": res.table.to_dicts(),
    }
