"""Loading a run for `ept compare` and checking two runs can be compared (same families, arms, suites)."""

from __future__ import annotations

from typing import Any

import polars as pl

from elo_per_token.analysis.compare_types import RunInputs
from elo_per_token.contracts.errors import InputError


def check_comparable(base: RunInputs, cur: RunInputs) -> list[str]:
    """Raise InputError when the two runs cannot be compared; return notes on partial task overlap.

    Args:
        base: The baseline run.
        cur: The current run.
    """
    if base.suites is not None and cur.suites is not None and set(base.suites) != set(cur.suites):
        raise InputError(
            f"the runs used different suites: baseline {sorted(base.suites)} vs current {sorted(cur.suites)}",
            file=cur.source,
            field="suites",
        )
    fam_b = set(base.outcomes["family"].unique().to_list())
    fam_c = set(cur.outcomes["family"].unique().to_list())
    if fam_b != fam_c:
        raise InputError(
            "the runs cover different task families: "
            + _diff_text(fam_b, fam_c)
            + " (compare runs of the same suites)",
            file=cur.source,
            field="family",
        )
    arms_b = set(base.arms["arm"].to_list())
    arms_c = set(cur.arms["arm"].to_list())
    if arms_b != arms_c:
        raise InputError(
            "the runs have different arms: "
            + _diff_text(arms_b, arms_c)
            + " (an arm is strategy@budget[variant], its full label)",
            file=cur.source,
            field="arm",
        )
    scored = [
        r.outcomes.filter(pl.col("score").is_not_null()).select("family", "task_id").unique()
        for r in (base, cur)
    ]
    common = scored[0].join(scored[1], on=["family", "task_id"], how="inner")
    notes = []
    for fam in sorted(fam_b):
        n_common = common.filter(pl.col("family") == fam).height
        if n_common == 0:
            raise InputError(
                f"family {fam!r}: no task was graded in both runs, so the two runs' Elo scales cannot be "
                "linked (run the same suite tasks in both, with graded outcomes)",
                file=cur.source,
                field="task_id",
            )
        n_b = scored[0].filter(pl.col("family") == fam).height
        n_c = scored[1].filter(pl.col("family") == fam).height
        if n_common < max(n_b, n_c):
            notes.append(
                f"family {fam}: {n_common} tasks in both runs (baseline {n_b}, current {n_c}); "
                "only the common tasks are paired"
            )
    return notes


def _diff_text(a: set[str], b: set[str]) -> str:
    parts = []
    if a - b:
        parts.append(f"only in baseline: {sorted(a - b)}")
    if b - a:
        parts.append(f"only in current: {sorted(b - a)}")
    return "; ".join(parts)


def manifest_suites(manifest: dict[str, Any] | None) -> tuple[str, ...] | None:
    """The suites a run used, from its manifest (top level or inside the plan), else None.

    Args:
        manifest: The run's manifest (None: none).
    """
    if not manifest:
        return None
    suites = manifest.get("suites")
    if suites is None and isinstance(manifest.get("plan"), dict):
        suites = manifest["plan"].get("suites")
    if not isinstance(suites, list | tuple):
        return None
    names = [s.get("name", _json_key(s)) if isinstance(s, dict) else str(s) for s in suites]
    return tuple(sorted(names))


def _json_key(obj: Any) -> str:
    import json

    return json.dumps(obj, sort_keys=True)


def load_run(path: str, *, skip_bad: bool = False, tasks_file: str | None = None) -> RunInputs:
    """Read one run (a ledger run folder or URL, or a folder of logs) with analyze's reader.

    Args:
        path: A ledger run folder or URL, or a folder of logs.
        skip_bad: Skip bad lines (reported) instead of raising InputError.
        tasks_file: JSONL with task_id and family (None: none).
    """
    from elo_per_token.analysis.io import read_failures, read_manifest, read_records, runs_of_files
    from elo_per_token.analysis.record_checks import check_records
    from elo_per_token.analysis.tokens import task_tokens

    records = read_records([path], skip_bad=skip_bad, tasks_file=tasks_file)
    refs = runs_of_files(records.files)
    if len({r.run_id for r in refs}) > 1:
        names = ", ".join(sorted({r.run_id for r in refs}))
        raise InputError(
            f"holds {len(refs)} runs ({names}); pass one run, e.g. {refs[0].ledger_url}/runs/{refs[0].run_id}",
            file=path,
        )
    frame, _ = check_records(records, skip_bad=skip_bad)
    # Labels as plain strings: the reader keeps them Categorical (analysis.io.LABEL_COLUMNS), and the two
    # runs of a comparison do not share one category dictionary, so their frames could not be joined.
    frame = frame.with_columns(pl.col(pl.Categorical).cast(pl.String))
    calls = frame.filter(pl.col("kind") == "call")
    outcomes = frame.filter(pl.col("kind") == "outcome")
    if outcomes.height == 0:
        raise InputError("no outcome records: a comparison needs graded outcomes", file=path)
    if calls.height == 0:
        raise InputError("no call records: tokens per task cannot be measured", file=path)
    ttok = task_tokens(calls)
    arms = (
        pl.concat(
            [outcomes.select("arm", "strategy", "budget_n"), ttok.select("arm", "strategy", "budget_n")]
        )
        .unique("arm", keep="first")
        .sort("arm")
    )
    manifest = read_manifest(refs[0]) if refs else None
    failed = len(read_failures(refs[0])) if refs else 0
    return RunInputs(
        source=path,
        outcomes=outcomes.select("task_id", "family", "arm", "replicate", "score"),
        task_tokens=ttok.select("task_id", "family", "arm", "tokens"),
        arms=arms,
        suites=manifest_suites(manifest),
        manifest=manifest,
        failed_jobs=failed,
    )
