"""Families a run meant to measure but whose jobs all failed: named on the result, never silently dropped.

The analysis merges the families it has outcomes for. When a whole family is absent because its jobs failed
(code tasks on a machine that cannot start the sandbox, a grader that is down), the Elo, the tokens per task
and the pick are about the other families only: a different question from the one the plan asked. The
caller that knows what was planned and what failed (the sweep) hands the reasons in; this module writes them
where every surface reads them: the headline title (`title_notes`), the warnings, and the recommendation's
first line and data (`recommendation["missing_families"]`), so the terminal, report.md/json and the HTML
page all say the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from elo_per_token.analysis.pipeline import AnalysisResult

__all__ = ["mark_missing_families"]


def mark_missing_families(result: AnalysisResult, reasons: Mapping[str, str]) -> AnalysisResult:
    """Name on `result` the planned families it has no outcomes for.

    Args:
        result: the analysis of the run (changed in place and returned).
        reasons: family -> why it has no outcomes (e.g. "360 jobs failed: SandboxUnavailable ..."); families
            the result does have are ignored.

    Returns:
        The same result, with a title note, a warning and the recommendation's first line naming what is
        missing and on which families the numbers stand.
    """
    missing = {f: r for f, r in sorted(reasons.items()) if f not in result.families}
    if not missing:
        return result
    on = ", ".join(result.families) or "no family"
    names = ", ".join(missing)
    result.title_notes.append(f"{names} missing: measured on {on} only")
    for fam, why in missing.items():
        result.warnings.append(
            f"family {fam} has no outcomes ({why}): Elo, tokens/task and the recommendation are on {on} only"
        )
    rec = result.recommendation
    if rec is not None:
        rec["missing_families"] = dict(missing)
        lines = list(rec.get("lines") or [])
        note = f"[incomplete: {names} missing ({'; '.join(missing.values())}); measured on {on} only]"
        rec["lines"] = [f"{lines[0]} {note}" if lines else note, *lines[1:]]
    return result
