"""The ordinary analysis of a run an adaptive sweep made, shown as secondary to the sweep's own decisions.

After `ept sweep --adaptive`, arms ran on different numbers of tasks by design (settled arms stop). The
ordinary analysis then reads like a full sweep's and contradicts the adaptive decisions (issue 37 item 5):
its bootstrap bands say `on (100%)` for an arm the sequential rule left open, its recommendation picks from
intervals that ignore the stopping, the missingness check calls the unrun tasks "the harder tasks" and
suggests `ept retry` although nothing failed. This module rewrites those parts of the result, once, from the
adaptive statuses, so every surface that renders the result says the same as the adaptive table: the
frontier column shows the sequential status, the recommendation defers to the adaptive decisions (and names
the arms still open), and the design's own missing outcomes raise no warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from elo_per_token.analysis.pipeline import AnalysisResult

__all__ = ["as_adaptive_secondary"]


def as_adaptive_secondary(result: AnalysisResult, statuses: Mapping[str, str]) -> AnalysisResult:
    """Make `result` agree with an adaptive sweep's decisions.

    Args:
        result: the ordinary analysis of the run (changed in place and returned).
        statuses: arm -> the adaptive status (on / off / within / open), as the adaptive table prints it.

    Returns:
        The result with the frontier column set to "<status> (adaptive)" (no bootstrap share), no
        missingness flags or retry suggestion for tasks the design never ran, a title note, and a
        recommendation that defers to the adaptive decisions and names the open arms.
    """
    band = [f"{statuses.get(a, 'not in the sweep')} (adaptive)" for a in result.table["arm"].to_list()]
    result.table = result.table.with_columns(
        pl.Series("frontier_band", band, dtype=pl.String),
        pl.lit(None, dtype=pl.Float64).alias("frontier_prob"),
    )
    result.missing = None  # unrun tasks are the design's, not failures: no "harder tasks", no flag
    result.warnings = [w for w in result.warnings if not _about_missing(w)]
    result.title_notes.append(
        "adaptive sweep: frontier = the sequential decisions; intervals not adjusted for the stopping"
    )
    open_arms = sorted(a for a, s in statuses.items() if s == "open")
    on = sorted(a for a, s in statuses.items() if s == "on")
    head = (
        "Recommendation: from the adaptive decisions above, not from this table (its intervals ignore the "
        f"adaptive stopping). On the frontier: {', '.join(on) or 'none decided'}"
        + (f"; still open: {', '.join(open_arms)}" if open_arms else "")
        + "."
    )
    result.recommendation = {
        "status": "adaptive",
        "arm": None,
        "best": None,
        "within_noise": [],
        "steps": [],
        "budget": None,
        "lines": [head],
        "adaptive": dict(statuses),
    }
    return result


def _about_missing(warning: str) -> bool:
    """The missingness check's warnings (per arm, and the count with `ept retry`)."""
    return "no score on" in warning or "`ept retry RUN`" in warning
