"""`ept sweep --adaptive` (and `[adaptive]` in the plan): the round loop of coordinator/adaptive/core.py on the real
executors.

Each round's jobs (the round's tasks x the arms still running x replicates) go through sweep.execute, so the
local executor and Celery work as in a full sweep (Celery enqueues only that round's jobs), finished jobs are
skipped, and failures are recorded. After each round that round's results (its jobs' objects, nothing else)
are read back from the ledger and the policy re-assesses; the rounds before are held in memory by the round
loop. Resume: the task order and every decision are a function of the seed and the results, so
rerunning the same command replays the finished rounds from the ledger (no job runs twice) and continues.
The state after each round is written to the run's `adaptive.json` blob for `ept status`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from elo_per_token.contracts.jobs import Job
from elo_per_token.coordinator.adaptive.core import AdaptiveResult, RoundResults, run_adaptive
from elo_per_token.coordinator.adaptive.events import RoundEvent
from elo_per_token.coordinator.adaptive.settings import AdaptiveSettings, settings_from_table
from elo_per_token.coordinator.adaptive.state import write_state
from elo_per_token.coordinator.plan import Plan

__all__ = ["AdaptiveSweep", "run_adaptive_sweep", "settings_of", "start_line"]


def settings_of(plan: Plan) -> AdaptiveSettings:
    """The plan's adaptive settings ([adaptive], defaults otherwise); the task order uses the plan's seed."""
    table = dict(plan.raw.get("adaptive") or {})
    # The run's token cap (`--max-tokens` / [budget] max_tokens) caps the adaptive rounds too (each round's
    # execute also enforces it, counting every earlier session's tokens).
    cap = plan.max_total_tokens
    if "max_tokens" not in table and cap is not None and cap > 0:
        table["max_tokens"] = cap
    return settings_from_table(table, plan.seed)


@dataclass
class AdaptiveSweep:
    result: AdaptiveResult | None
    outcomes: list[Any]  # the SweepOutcome of each round's execute
    completed: bool
    elapsed_s: float


def _round_results(
    ledger: Any, run_id: str, keys: list[str], tidx: dict[str, int], aidx: dict[str, int]
) -> dict[tuple[int, int], tuple[float, float]]:
    """The (task, arm) results of this round's jobs `keys`, read from the ledger (only these objects: the
    rounds before are held by the round loop, core._State; the same reading as a replay's whole-run table)."""
    import numpy as np

    from elo_per_token.coordinator.adaptive.run_table import read_jobs_table

    table = read_jobs_table(ledger.run_url(run_id), keys)
    out: dict[tuple[int, int], tuple[float, float]] = {}
    for i, task in enumerate(table.tasks):
        for j, arm in enumerate(table.arms):
            s, t = table.scores[i, j], table.tokens[i, j]
            if task in tidx and arm in aidx and np.isfinite(s) and np.isfinite(t):
                out[(tidx[task], aidx[arm])] = (float(s), float(t))
    return out


def run_adaptive_sweep(
    plan: Plan,
    *,
    profile: Any,
    base_url: str | None = None,
    executor: str | None = None,
    console: Any = None,
    broker_url: str | None = None,
    run: Any = None,
) -> AdaptiveSweep:
    """Run `plan` adaptively; each round through sweep.execute (module docstring)."""
    from elo_per_token.coordinator.expand import expand, load_tasks
    from elo_per_token.ledger import open_ledger

    settings = settings_of(plan)
    tasks = load_tasks(plan)
    jobs = expand(plan, tasks)
    by_cell: dict[tuple[str, str], list[Job]] = {}
    for j in jobs:
        by_cell.setdefault((j.task_id, j.arm), []).append(j)
    task_ids = sorted({j.task_id for j in jobs})
    fam = {j.task_id: j.family for j in jobs}
    arms = sorted({j.arm for j in jobs})
    ledger = open_ledger(plan.ledger)
    if console is not None:  # the margin first: the classification the sweep will end with is at it
        console.print(
            start_line(settings, [fam[t] for t in task_ids], len(arms), plan.weights or None), highlight=False
        )
    t0 = time.monotonic()
    rr = _RoundRunner(
        plan,
        by_cell,
        task_ids,
        arms,
        len(jobs),
        ledger,
        dict(
            profile=profile,
            base_url=base_url,
            executor=executor,
            console=console,
            broker_url=broker_url,
            run=run,
        ),
    )
    res: AdaptiveResult | None
    try:
        res = run_adaptive(
            [fam[t] for t in task_ids],
            arms,
            rr,
            settings,
            weights=plan.weights or None,
            on_round=lambda ev: write_state(ledger, plan.run_id, ev),
        )
    except _Stopped:
        res = None
    if res is not None:  # `ept status`: the sweep is over, the rest of the grid is not needed
        last = res.history[-1] if res.history else RoundEvent(0, res.rounds_planned, 0, 0.0, (), {})
        write_state(ledger, plan.run_id, replace(last, finished=True, stop_reason=res.stop_reason))
    return AdaptiveSweep(res, rr.outcomes, rr.completed, time.monotonic() - t0)


def start_line(
    settings: AdaptiveSettings, families: list[str], arms: int, weights: dict[str, float] | None
) -> str:
    """The sweep's first line: the design and the margin it classifies at (core.plan_margin, the same
    computation the round loop makes)."""
    from elo_per_token.coordinator.adaptive.core import plan_margin, round_bounds

    margin = plan_margin(families, settings, weights)
    rounds = len(round_bounds(len(families), settings.rounds))
    return (
        f"adaptive sweep: {arms} arms, {len(families)} tasks in {rounds} rounds, each arm classified on, off or "
        f"within the margin of the frontier: {margin.describe()}; each arm's decision wrong with probability <= "
        f"{settings.alpha:g}"
    )


class _RoundRunner:
    """One round = one sweep.execute of the round's jobs, then those jobs' results read back from the ledger."""

    def __init__(
        self,
        plan: Plan,
        by_cell: dict[tuple[str, str], list[Job]],
        task_ids: list[str],
        arms: list[str],
        n_jobs: int,
        ledger: Any,
        kw: dict[str, Any],
    ) -> None:
        self.plan, self.by_cell, self.task_ids, self.arms = plan, by_cell, task_ids, arms
        self.n_jobs, self.ledger, self.kw = n_jobs, ledger, kw
        self.tidx = {t: i for i, t in enumerate(task_ids)}
        self.aidx = {a: i for i, a in enumerate(arms)}
        self.outcomes: list[Any] = []
        self.completed = True

    def __call__(self, r: int, tids: list[int], aids: list[int]) -> RoundResults:
        from elo_per_token.coordinator.sweep import execute

        todo = [j for t in tids for a in aids for j in self.by_cell.get((self.task_ids[t], self.arms[a]), [])]
        out = execute(self.plan, todo, analyze=False, compact=False, manifest_jobs=self.n_jobs, **self.kw)
        self.outcomes.append(out)
        if not out.completed:
            self.completed = False
            raise _Stopped
        got = _round_results(self.ledger, self.plan.run_id, [j.key for j in todo], self.tidx, self.aidx)
        return {(t, a): got[(t, a)] for t in tids for a in aids if (t, a) in got}


class _Stopped(Exception):
    """A round's execute was interrupted or stopped early: the sweep stops; a rerun resumes."""
