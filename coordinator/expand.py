"""Plan -> jobs. Deterministic: the same plan always gives the same jobs, keys and seeds, in the same order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contracts.errors import InputError
from contracts.jobs import Job
from coordinator.plan import Plan


def load_tasks(plan: Plan, loader: Callable[[str], list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """The plan's tasks in suite order, keeping the first `tasks_per_family` of each family."""
    if loader is None:
        from contracts.tasks import load_suite_ref as loader
    tasks: list[dict[str, Any]] = []
    for ref in plan.suites:
        tasks.extend(loader(ref))
    if plan.tasks_per_family is not None:
        seen: dict[str, int] = {}
        kept = []
        for t in tasks:
            fam = str(t["family"])
            if seen.get(fam, 0) < plan.tasks_per_family:
                seen[fam] = seen.get(fam, 0) + 1
                kept.append(t)
        tasks = kept
    if not tasks:
        raise InputError("the plan's suites contain no tasks", file=plan.source, field="suites")
    return tasks


def expand(plan: Plan, tasks: list[dict[str, Any]]) -> list[Job]:
    jobs = [
        Job(
            run_id=plan.run_id,
            task=task,
            strategy=arm.strategy,
            budget_n=budget,
            replicate=rep,
            params=dict(arm.params),
            seed=plan.seed,
            profile=plan.profile,
            gen=dict(gen),
            base_gen=dict(plan.generation),
        )
        for task in tasks
        for arm in plan.arms
        for budget in arm.budgets
        for gen in arm.gens
        for rep in range(plan.replicates)
    ]
    seen: dict[str, Job] = {}
    for j in jobs:
        if j.key in seen:
            raise InputError(
                f"two jobs share the key {j.key!r} (task {j.task_id!r} appears twice in the suites, "
                "or two arms have the same strategy, budget and params)",
                file=plan.source, field="suites",
            )  # fmt: skip
        seen[j.key] = j
    return jobs
