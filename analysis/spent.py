"""Tokens (and dollars) spent on failed attempts: the run's spent/ objects (contracts.spent), per arm.

A job's object holds only the calls of the attempt that succeeded; the calls of every other attempt — failed
and retried, failed and resumed, or a duplicate copy — are in write-once spent objects. The report adds them
to the arm's token and cost totals in their own columns, marked as spent on failed attempts, so the spend on
a run is the sum of both and equals what the provider billed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from elo_per_token.analysis.io.schema import BadLine
from elo_per_token.contracts.spent import SPENT_DIR, parse_spent, spent_usage_totals
from elo_per_token.ledger import Ledger

# The most spent objects one run is read for (each is one attempt of one job): a bound on time and memory for a
# ledger someone else wrote; beyond it the totals are marked as partial.
MAX_SPENT_OBJECTS = 200_000


def read_spent_lines(
    ledger: Ledger, run_id: str, limit: int = MAX_SPENT_OBJECTS, *, skipped: list[BadLine] | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """The call lines of the run's spent objects (tagged spent_reason/spent_class), and whether every object was
    read (False: more than `limit`). A malformed object raises ValueError naming it; given a `skipped` list
    (--skip-bad), it is left out and named there instead.

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        limit: The most spent objects read.
        skipped: Where bad spent objects are named and left out (--skip-bad); None: raise.
    """
    names = ledger.list_blobs(run_id, SPENT_DIR)
    complete = len(names) <= limit
    lines: list[dict[str, Any]] = []
    for name in names[:limit]:
        data = ledger.get_blob(run_id, name)
        if data is None:
            continue
        where = f"{ledger.run_url(run_id)}/{name}"
        try:
            lines.extend(parse_spent(data, where))
        except ValueError as e:
            if skipped is None:
                raise
            skipped.append(_bad_object(where, str(e)))
    return lines, complete


def _bad_object(where: str, message: str) -> BadLine:
    """parse_spent's message ("<object>:<line>: <why>") as a skipped line: file, line, field `spent`."""
    rest = message.removeprefix(where + ":")
    line, sep, why = rest.lstrip().partition(": ")
    if sep and line.isdigit():
        return BadLine(where, int(line), "spent", why)
    return BadLine(where, 0, "spent", rest.strip())


def spent_rows(lines: Sequence[dict[str, Any]], prices: Any = None) -> list[dict[str, Any]]:
    """One row per arm: failed_attempt_calls (reached the provider) / _unsent (never reached it: not billed) /
    _prompt_tokens / _completion_tokens / _tokens, and
    failed_attempt_usd when `prices` (analysis.breakdown.Prices) is given (input and output at their prices;
    cached input is not split out here: priced as fresh input, an upper bound).

    Args:
        lines: Call lines of spent objects (read_spent_lines).
        prices: USD per 1M tokens (analysis.breakdown.Prices; None: unpriced).
    """
    rows = []
    for arm, t in sorted(spent_usage_totals(lines).items()):
        row: dict[str, Any] = {
            "arm": arm,
            "failed_attempt_calls": t["calls"],
            "failed_attempt_unsent": t["unsent"],
            "failed_attempt_prompt_tokens": t["prompt_tokens"],
            "failed_attempt_completion_tokens": t["completion_tokens"],
            "failed_attempt_tokens": t["tokens"],
        }
        if prices is not None:
            row["failed_attempt_usd"] = (
                t["prompt_tokens"] * prices.input + t["completion_tokens"] * prices.output
            ) / 1e6
        rows.append(row)
    return rows


def run_roots(files: Sequence[str]) -> list[tuple[str, str]]:
    """(ledger root, run id) of every run among the files an analysis read (…/runs/<id>/jobs/… or
    …/runs/<id>/compact/…), in first-seen order; plain call-log files belong to no run.

    Args:
        files: The files the analysis read.
    """
    seen: dict[tuple[str, str], None] = {}
    for f in files:
        m = _IN_RUN.match(str(f))
        if m:
            seen.setdefault((m.group("root") or ".", m.group("run")), None)
    return list(seen)


_IN_RUN = re.compile(r"^(?P<root>.*?)/?runs/(?P<run>[^/]+)/(?:jobs|compact)/")


def spent_for_inputs(
    files: Sequence[str], prices: Any = None, *, skipped: list[BadLine] | None = None
) -> list[dict[str, Any]]:
    """spent_rows over every run the analysed files belong to (plain call-log files have no spent objects);
    `skipped`: bad spent objects are named there and left out instead of raising (--skip-bad).

    Args:
        files: The files the analysis read.
        prices: USD per 1M tokens (analysis.breakdown.Prices; None: unpriced).
        skipped: Where bad spent objects are named and left out (--skip-bad); None: raise.
    """
    from elo_per_token.ledger import open_ledger_for_reading

    lines: list[dict[str, Any]] = []
    for root, run_id in run_roots(files):
        got, _complete = read_spent_lines(open_ledger_for_reading(root), run_id, skipped=skipped)
        lines.extend(got)
    return spent_rows(lines, prices)
