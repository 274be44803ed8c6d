"""The HTML report's document: everything the page shows, as typed plain data. analysis.html_gather builds
it (the I/O); analysis.html renders it (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True)
class HtmlDocument:
    """Everything the page shows, as plain data (the same numbers report.json holds, so what the page shows
    can be checked against report.json). Field order is the order of `as_dict` (the viewer's JSON).

    returns:      rows of the diminishing-returns table (arm, strategy, budget_n, tokens_per_task, elo, ...)
    anchor:       the arm pinned at Elo 1000 (labelled in the Elo-vs-tokens plot)
    families:     rows (family, arm, theta, elo, weight?): the per-family breakdown
    token_split:  rows (arm, role, calls, prompt_tokens, completion_tokens, tasks?): by arm and call role
    failures:     rows (arm, error_class, count, tokens_unrecorded)
    manifest:     the run manifest (public profile with optional price_in_per_1m / price_out_per_1m)
    """

    title: str = "elo-per-token report"
    generated_at: str = ""
    inputs: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    returns: list[Row] = field(default_factory=list)
    anchor: str | None = None
    families: list[Row] = field(default_factory=list)
    token_split: list[Row] = field(default_factory=list)
    failures: list[Row] = field(default_factory=list)
    breakdown: list[Row] = field(default_factory=list)
    cost_table: list[Row] = field(default_factory=list)
    per_strategy: list[Row] = field(default_factory=list)
    vs_frontier: list[Row] = field(default_factory=list)
    recommendation: dict[str, Any] | None = None
    accuracy: list[Row] = field(default_factory=list)
    accuracy_family: list[Row] = field(default_factory=list)
    pass_at_k: list[Row] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The document as the plain mapping the page sections and the viewer read (no copy of the rows)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
