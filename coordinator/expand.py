"""Plan -> jobs. Deterministic: the same plan always gives the same jobs, keys and seeds, in the same order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.tasks import Task
from elo_per_token.coordinator.plan import Plan, check_job_count

if TYPE_CHECKING:  # polars is imported only when the key space is built
    import polars as pl


def load_tasks(plan: Plan, loader: Callable[[str], list[Task]] | None = None) -> list[Task]:
    """The plan's tasks in suite order, keeping the first `tasks_per_family` of each family."""
    if loader is None:
        from elo_per_token.suites.load import load_suite_ref

        loader = load_suite_ref
    tasks: list[Task] = []
    for ref in plan.suites:
        try:
            tasks.extend(loader(ref))
        except InputError as e:
            if e.file is not None:  # an error inside a suite file names that file and line
                raise
            raise InputError(
                e.message, file=plan.source, line=_suites_line(plan.source), field="suites"
            ) from None
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


def _suites_line(source: str) -> int | None:
    """The line of `suites = …` in the plan file, when it is a readable file."""
    from pathlib import Path

    from elo_per_token.common.tomlpos import toml_line

    try:
        return toml_line(Path(source).read_text(encoding="utf-8"), "suites")
    except (OSError, UnicodeDecodeError):
        return None


def iter_jobs(plan: Plan, tasks: list[Task]) -> Iterator[Job]:
    """The plan's jobs one at a time, in plan order: a million-job plan is never a million objects at once."""
    for task in tasks:
        for arm in plan.arms:
            for budget in arm.budgets:
                for gen in arm.gens:
                    for rep in range(plan.replicates):
                        yield Job(
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


def count_jobs(plan: Plan, tasks: list[Task]) -> int:
    return len(tasks) * sum(len(arm.budgets) * len(arm.gens) for arm in plan.arms) * plan.replicates


def check_unique_keys(plan: Plan, tasks: list[Task]) -> None:
    """Job keys are family/task/arm/replicate: they are unique iff the (family, task) parts and the arm parts
    are, which is checked on tasks and arms (thousands) rather than on jobs (millions)."""
    if not tasks or not plan.arms:
        return
    probe = Job(run_id=plan.run_id, task=tasks[0], strategy="x", budget_n=0)
    seen_task: dict[str, str] = {}
    for t in tasks:
        part = "/".join(Job(**{**probe.to_dict(), "task": t}).key.split("/")[:2])
        if part in seen_task:
            _dup(plan, f"{part}/…")
        seen_task[part] = str(t["task_id"])
    seen_arm: set[str] = set()
    for arm in plan.arms:
        for budget in arm.budgets:
            for gen in arm.gens:
                j = Job(
                    run_id=plan.run_id,
                    task=tasks[0],
                    strategy=arm.strategy,
                    budget_n=budget,
                    params=dict(arm.params),
                    gen=dict(gen),
                )
                part = j.key.split("/")[2]
                if part in seen_arm:
                    _dup(plan, j.key)
                seen_arm.add(part)


def plan_keys(plan: Plan, tasks: list[Task]) -> pl.Series:
    """Every job key of the plan as a polars String Series, without building a Job per job: a key is
    <task part>/<arm part>/r<replicate> (contracts.jobs.Job.key), so it is the product of the task parts, the
    arm parts and the replicates — thousands of Jobs built, not millions. Equal to {j.key for j in iter_jobs}
    (tests/ledger/test_keyspace.py checks it)."""
    import polars as pl

    if not tasks or not plan.arms:
        return pl.Series("job_key", [], dtype=pl.String)
    probe = Job(run_id=plan.run_id, task=tasks[0], strategy="x", budget_n=0)
    task_parts = ["/".join(Job(**{**probe.to_dict(), "task": t}).key.split("/")[:2]) for t in tasks]
    arm_parts = [
        Job(
            run_id=plan.run_id,
            task=tasks[0],
            strategy=arm.strategy,
            budget_n=budget,
            params=dict(arm.params),
            gen=dict(gen),
        ).key.split("/")[2]
        for arm in plan.arms
        for budget in arm.budgets
        for gen in arm.gens
    ]
    reps = [f"r{r}" for r in range(plan.replicates)]
    grid = (
        pl.DataFrame({"t": task_parts})
        .join(pl.DataFrame({"a": arm_parts}), how="cross")
        .join(pl.DataFrame({"r": reps}), how="cross")
    )
    return grid.select(pl.concat_str("t", "a", "r", separator="/").alias("job_key"))["job_key"]


def _dup(plan: Plan, key: str) -> None:
    raise InputError(
        f"two jobs share the key {key!r} (task {key.split('/')[1]!r} appears twice in the suites, "
        "or two arms have the same strategy, budget and params)",
        file=plan.source,
        field="suites",
    )


def expand(plan: Plan, tasks: list[Task]) -> list[Job]:
    check_job_count(plan, len(tasks))  # from counts, before a single job is built
    check_unique_keys(plan, tasks)
    return list(iter_jobs(plan, tasks))
