"""`ept demo`: the simulator in-process + the shipped demo plan on the local executor + the report."""

from __future__ import annotations

import secrets
from importlib import resources
from pathlib import Path
from typing import Any

from elo_per_token.contracts import settings

DEMO_KEY_ENV = "EPT_DEMO_API_KEY"


def demo_plan_text() -> str:
    return resources.files(__package__).joinpath("demo_plan.toml").read_text(encoding="utf-8")


def demo_command(out: str | Path, tasks_per_family: int | None, replicates: int | None) -> str:
    """The `ept demo` command line that resumes this demo run (same folder, same size)."""
    import shlex

    parts = ["ept", "demo"]
    if Path(out).resolve() != Path("./ept-out").resolve():
        parts += ["--out", str(out)]
    if tasks_per_family is not None:
        parts += ["--tasks-per-family", str(tasks_per_family)]
    if replicates is not None:
        parts += ["--replicates", str(replicates)]
    return shlex.join(parts)


def run_demo(
    out: str | Path = "./ept-out",
    *,
    tasks_per_family: int | None = None,
    replicates: int | None = None,
    console: Any = None,
) -> Any:
    from elo_per_token.analysis.report import make_console
    from elo_per_token.coordinator.sweep import execute, plan_jobs
    from elo_per_token.simulator.control import start_in_thread

    out = Path(out)
    plan = _demo_plan(out, tasks_per_family, replicates)
    # A throwaway key that exists only in this process: the simulator checks it, the profile carries it (never
    # through the environment, which child processes would inherit), nothing prints it.
    key = settings.read_str(DEMO_KEY_ENV) or "sk-demo-" + secrets.token_hex(16)
    # prompt_cache "warm": earlier messages report as cached input tokens, so the report's token split has both
    # kinds; unlike "seen", the usage does not depend on request order, so every demo run prints the same report.
    sim = start_in_thread({"latency_ms": 0.0, "seed": plan.seed, "api_key": key, "prompt_cache": "warm"})
    try:
        profile = _demo_profile(sim.url, key)
        # The in-process simulator listens on a new port each time: the same model at a moved endpoint.
        result = execute(
            plan,
            plan_jobs(plan),
            profile=profile,
            base_url=sim.url,
            allow_endpoint_change=True,
            console=console or make_console(stderr=True),
            rerun_hint=demo_command(out, tasks_per_family, replicates),
        )
    finally:
        sim.stop()
    if result.analysis is not None:
        from elo_per_token.analysis.report_files import write_outputs

        write_outputs(result.analysis, out / "report")
    return result


def _demo_plan(out: Path, tasks_per_family: int | None, replicates: int | None) -> Any:
    """The demo's plan, its ledger in <out>/ledger, resized and renamed by the command's options."""
    from elo_per_token.coordinator.plan import parse_plan

    plan = parse_plan(demo_plan_text(), file="coordinator/demo_plan.toml")
    plan = plan.with_overrides(ledger=str((out / "ledger").resolve()))
    if tasks_per_family is not None:
        # A different size is a different run: give it its own name so resume never mixes them.
        raw = {**plan.raw, "tasks_per_family": tasks_per_family, "name": f"demo-t{tasks_per_family}"}
        plan = plan.with_overrides(tasks_per_family=tasks_per_family, name=raw["name"], raw=raw)
    if replicates is not None:
        # Replicates re-run every (task, arm) with new seeds (benchmarks/bench_adaptive.py resamples them).
        name = f"{plan.name}-r{replicates}"
        raw = {**plan.raw, "replicates": replicates, "name": name}
        plan = plan.with_overrides(replicates=replicates, name=name, raw=raw)
    return plan


def _demo_profile(url: str, key: str) -> Any:
    """The profile of the in-process simulator at `url`, carrying the throwaway `key` inline."""
    from elo_per_token.egress.profiles import Profile

    return Profile(
        name="simulator",
        protocol="openai",
        base_url=url,
        api_key_env=DEMO_KEY_ENV,
        model="ept-sim-1",
        inline_key=key,
        timeout=30.0,
        max_retries=3,
        # Illustrative prices (USD per 1M tokens) so the demo shows cost per task and ΔElo per $1.
        price_in_per_1m=0.15,
        price_cached_in_per_1m=0.075,
        price_out_per_1m=0.60,
    )
