"""The compare page (/compare?a=&b=): `ept compare A B --fail-on none` rendered — the interval level it used,
per arm the Elo, tokens per task and accuracy of both runs with the changes and their intervals, the notes and
the verdict. The Elo and token changes are compare's (analysis.compare); each run's accuracy is its own run
page's (analysis.accuracy, from that run's report document)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from elo_per_token.analysis.html import _table as table
from elo_per_token.viewer.pages import _q, e, run_url, shell


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _level_line(res: Mapping[str, Any]) -> str:
    """Which intervals the table shows, and which the gate would use."""
    level, gate = res.get("level"), res.get("gate_level")
    text = (
        f"Intervals (lo, hi): {level:.0%} bootstrap percentile intervals over {int(res.get('rounds') or 0):,} "
        "rounds, tasks resampled within families, the same rounds for both runs"
        if _num(level)
        else "No intervals (no bootstrap rounds)"
    )
    if _num(gate) and _num(level) and gate != level:
        text += f"; a --fail-on gate would use {gate:.1%} intervals (adjusted for the number of arms)"
    failed = int(res.get("failed_rounds") or 0)
    if failed:
        text += f"; {failed:,} rounds did not converge"
    return f'<p id="compare-level" data-level="{_q(level)}">{e(text)}.</p>'


def _with_accuracy(
    arms: Sequence[Mapping[str, Any]], acc_a: Sequence[Mapping[str, Any]], acc_b: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """compare's rows with each run's accuracy (its run page's) and the change in percentage points."""
    ba = {r["arm"]: r for r in acc_a}
    cu = {r["arm"]: r for r in acc_b}
    out = []
    for r in arms:
        x: Any = (ba.get(r["arm"]) or {}).get("accuracy")
        y: Any = (cu.get(r["arm"]) or {}).get("accuracy")
        d = (float(y) - float(x)) * 100 if _num(x) and _num(y) else None
        out.append({**r, "acc_base": x, "acc_cur": y, "d_acc_pp": d})
    return out


def compare_page(
    a: str,
    b: str,
    res: Mapping[str, Any],
    acc_a: Sequence[Mapping[str, Any]] = (),
    acc_b: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The per-arm table (Elo, tokens, accuracy of both runs and their changes), the level, notes, verdict.
    acc_a, acc_b: each run's accuracy rows (its report document's `accuracy`), [] when not analysed."""
    cols: list[tuple[str, str, str | None]] = [
        ("arm", "arm", None), ("elo_base", "Elo base", ".0f"), ("elo_cur", "Elo current", ".0f"),
        ("d_elo", "ΔElo", "+.1f"), ("d_elo_lo", "lo", "+.1f"), ("d_elo_hi", "hi", "+.1f"),
        ("tokens_base", "tok/task base", ",.0f"), ("tokens_cur", "tok/task current", ",.0f"),
        ("d_tokens_rel", "Δtok", "+.1%"), ("d_tokens_rel_lo", "lo", "+.1%"), ("d_tokens_rel_hi", "hi", "+.1%"),
        ("acc_base", "accuracy base", ".1%"), ("acc_cur", "accuracy current", ".1%"),
        ("d_acc_pp", "Δaccuracy (points)", "+.1f"), ("detectable_drop", "Elo drop caught 80%", ".0f"),
    ]  # fmt: skip
    rows = _with_accuracy(list(res.get("arms") or []), acc_a, acc_b)
    body = [
        f'<p>Baseline (base) <a href="{_q(run_url(a))}">{e(a)}</a>, current <a href="{_q(run_url(b))}">{e(b)}</a>; '
        f"gate: {e(str(res.get('rule')))}.</p>",
        _level_line(res),
        table("compare-table", rows, cols),
        '<p class="muted">ΔElo and Δtok (the relative change in tokens per task) are compare\'s, with their '
        "intervals; accuracy is each run's own (its run page has the Wilson intervals), Δaccuracy the difference "
        "of the two in percentage points; Elo drop caught 80%: the Elo drop this comparison would detect 80% "
        "of the time.</p>",
    ]
    body += [f'<p class="warn">{e(str(n))}</p>' for n in res.get("notes") or []]
    flagged = res.get("flagged") or []
    body.append(
        f'<p id="verdict">{"regression: " + e(", ".join(flagged)) if flagged else "no regression the data supports"}</p>'
    )
    return shell(f"{a} vs {b}", body)
