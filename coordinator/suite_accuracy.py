"""Accuracy of strategy arms on the built-in suites against the simulator (in-process, over real HTTP).

Used by `ept suites accuracy` (the table in docs/strategies.md) and by tests/worker/test_strategies.py.
Tasks are drawn evenly from the chosen suites with a seeded shuffle; every arm runs every drawn task.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from elo_per_token.contracts.tasks import Task


def draw_tasks(n_tasks: int, families: list[str], seed: int) -> list[Task]:
    """n_tasks tasks, as evenly as possible from each built-in suite, in a seeded order."""
    from elo_per_token.suites.load import load_builtin_suite

    per, extra = divmod(n_tasks, len(families))
    out: list[Task] = []
    for i, fam in enumerate(families):
        tasks = load_builtin_suite(fam)
        random.Random(f"{seed}:{fam}").shuffle(tasks)
        out.extend(tasks[: per + (1 if i < extra else 0)])
    return out


def run_arms(
    tasks: list[Task],
    arms: list[tuple[str, int]],
    *,
    seed: int = 0,
    workers: int = 8,
    sim_config: dict[str, Any] | None = None,
    supports_n: bool = False,
) -> list[dict[str, Any]]:
    """Run every (task, arm) job against a fresh in-process simulator; one summary row per job."""
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.egress.client import ProviderClient
    from elo_per_token.egress.profiles import Profile
    from elo_per_token.simulator.control import start_in_thread
    from elo_per_token.worker.job import run_job

    sim = start_in_thread(sim_config or {})
    try:
        profile = Profile(
            name="simulator",
            protocol="openai",
            base_url=sim.url,
            api_key_env="EPT_SIM_API_KEY",
            model="ept-sim-1",
            timeout=30.0,
            max_retries=2,
            supports_n=supports_n,
        )
        provider = ProviderClient(profile, api_key="sk-simulator-not-a-secret")
        jobs = [Job("accuracy", t, s, n, seed=seed, profile="simulator") for t in tasks for s, n in arms]

        def one(job: Job) -> dict[str, Any]:
            r = run_job(job, provider, concurrency=1)  # parallelism comes from running jobs side by side
            return {
                "family": job.family,
                "task_id": job.task_id,
                "strategy": job.strategy,
                "budget_n": job.budget_n,
                "arm": job.arm,
                "calls": len(r.calls),
                "tokens": r.tokens,
                "correct": bool(r.outcome.correct),
                "error": (r.outcome.error or {}).get("class"),
            }

        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, jobs))
    finally:
        sim.stop()


def summarise(rows: list[dict[str, Any]]) -> Any:
    """Per arm: jobs, accuracy, calls and tokens per job, and the accuracy gained per extra call compared
    with the previous budget of the same strategy (greedy is the previous budget of the smallest)."""
    import polars as pl

    df = pl.DataFrame(rows)
    t = (
        df.group_by("strategy", "budget_n", "arm")
        .agg(
            pl.len().alias("jobs"),
            pl.col("correct").mean().alias("accuracy"),
            pl.col("calls").mean().alias("calls_per_job"),
            pl.col("tokens").mean().alias("tokens_per_job"),
            pl.col("error").is_not_null().sum().alias("errors"),
        )
        .sort("strategy", "budget_n")
    )
    base = t.filter(pl.col("strategy") == "greedy").select("accuracy", "calls_per_job")
    acc0, calls0 = base.row(0) if base.height else (None, None)
    prev_acc = pl.col("accuracy").shift(1).over("strategy")
    prev_calls = pl.col("calls_per_job").shift(1).over("strategy")
    if acc0 is not None:
        prev_acc = prev_acc.fill_null(acc0)
        prev_calls = prev_calls.fill_null(calls0)
    t = t.with_columns(
        (pl.col("accuracy") - prev_acc).alias("d_accuracy"),
        ((pl.col("accuracy") - prev_acc) / (pl.col("calls_per_job") - prev_calls)).alias(
            "d_acc_per_extra_call"
        ),
    ).with_columns(
        pl.when(pl.col("strategy") == "greedy").then(None).otherwise(pl.col(c)).alias(c)
        for c in ("d_accuracy", "d_acc_per_extra_call")
    )
    order = {"greedy": 0, "majority": 1, "best_of_n": 2, "tree_search": 3}
    return t.sort(pl.col("strategy").replace_strict(order, default=9), "budget_n")


def markdown(table: Any) -> str:
    head = (
        "| arm | jobs | accuracy | calls/job | tokens/job | Δacc vs previous budget | Δacc per extra call |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for r in table.iter_rows(named=True):
        d = "—" if r["d_accuracy"] is None else f"{r['d_accuracy']:+.3f}"
        g = "—" if r["d_acc_per_extra_call"] is None else f"{r['d_acc_per_extra_call']:+.4f}"
        lines.append(
            f"| {r['arm']} | {r['jobs']} | {r['accuracy']:.3f} | {r['calls_per_job']:.1f} | "
            f"{r['tokens_per_job']:.0f} | {d} | {g} |"
        )
    return "\n".join(lines)
