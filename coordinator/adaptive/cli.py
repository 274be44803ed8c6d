"""Commands and CLI glue of adaptive sweeps: `ept sweep --adaptive`, `ept replay-adaptive RUN`, and the
adaptive lines of `ept status`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from elo_per_token.coordinator.adaptive.settings import AdaptiveSettings, margin_arg

if TYPE_CHECKING:
    from elo_per_token.coordinator.plan import Plan

__all__ = ["finish_adaptive", "print_state", "replay_adaptive_cmd"]


def finish_adaptive(plan: Plan, profile: Any, base_url: str | None, *, analyze: bool = True) -> None:
    """Run the plan adaptively, compact, print the adaptive report (and the usual Elo table); exit non-zero
    when interrupted (a rerun resumes) or when jobs failed."""
    from elo_per_token.analysis.report import make_console, print_report
    from elo_per_token.contracts.errors import EXIT_FAILED, EXIT_INTERRUPTED
    from elo_per_token.coordinator.adaptive.report import print_adaptive
    from elo_per_token.coordinator.adaptive.sweep import run_adaptive_sweep
    from elo_per_token.coordinator.sweep import analyze_run, compact_note, print_summary
    from elo_per_token.ledger import open_ledger

    console = make_console()
    res = run_adaptive_sweep(plan, profile=profile, base_url=base_url, console=make_console(stderr=True))
    failed = sum(o.tally.failed for o in res.outcomes)
    tokens = sum(o.tally.tokens for o in res.outcomes)
    console.print(
        f"\n[bold]run {plan.run_id}[/] (adaptive) · {len(res.outcomes)} round(s) · tokens this session "
        f"{tokens:,} · {failed} failed job(s) · {res.elapsed_s:.1f}s",
        highlight=False,
    )
    if not res.completed or res.result is None:
        last = res.outcomes[-1] if res.outcomes else None
        if last is not None:  # the stopped round's own summary: failures, an egress stop and its fix
            print_summary(last, console)
        console.print(
            "[yellow]adaptive sweep stopped[/]: rerun the same command to resume (finished rounds are "
            "replayed from the ledger, no job runs twice)"
        )
        raise typer.Exit(last.exit_code if last is not None and last.exit_code else EXIT_INTERRUPTED)
    ledger = open_ledger(plan.ledger)
    console.print(compact_note(ledger, plan.run_id), highlight=False)
    print_adaptive(res.result, console)
    if analyze:
        # Arms ran on different tasks by design: each pair is compared on every task both ran ("drop": the task
        # order is random, so the tasks a pair shares are a random sample), not on the few every arm ran.
        analysis, err = analyze_run(plan, ledger, missing="drop")
        if analysis is not None:
            from elo_per_token.coordinator.adaptive.secondary import as_adaptive_secondary

            as_adaptive_secondary(analysis, res.result.frontier)
            console.print(
                "Elo table of the tasks each arm ran (bootstrap intervals: not adjusted for the adaptive "
                "stopping; the adaptive table above is)",
                highlight=False,
            )
            print_report(analysis, console)
        elif err:
            console.print(f"[yellow]no Elo table:[/] {err}", highlight=False)
    if failed:
        raise typer.Exit(EXIT_FAILED)


def _number(v: Any) -> float:
    """A number from the state blob, 0 for anything else (the blob is read back from storage)."""
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v == v else 0.0


def print_state(ledger: Any, run_id: str, console: Any) -> None:
    """`ept status`: the adaptive sweep's last finished round and the arms still running (nothing otherwise)."""
    from rich.markup import escape

    from elo_per_token.coordinator.adaptive.state import read_state

    st = read_state(ledger, run_id)
    if st is None:
        return
    r_raw, s_raw = st.get("running"), st.get("status")
    running: list[Any] = r_raw if isinstance(r_raw, list) else []
    status: dict[str, Any] = s_raw if isinstance(s_raw, dict) else {}
    head = (
        f"adaptive: round {st.get('round', '?')} of {st.get('rounds', '?')} finished · {st.get('tasks', '?')} tasks · "
        f"{_number(st.get('tokens')):,.0f} tokens"
    )
    if st.get("finished"):
        open_arms = sorted(k for k, v in status.items() if v == "open")
        console.print(
            escape(
                f"{head} · sweep finished: {st.get('stop_reason', '?')} (jobs left pending are not "
                f"needed); decisions still open: {', '.join(open_arms) or 'none'}"
            ),
            highlight=False,
        )
    else:
        console.print(
            escape(f"{head} · arms still running ({len(running)}): {', '.join(map(str, running)) or 'none'}"),
            highlight=False,
        )
    settled = {k: v for k, v in status.items() if v != "open"}
    if settled:
        console.print(
            escape("settled: " + ", ".join(f"{k} ({v})" for k, v in sorted(settled.items()))), highlight=False
        )
    w_raw = st.get("why")
    why: dict[str, Any] = w_raw if isinstance(w_raw, dict) else {}
    if why:
        console.print(
            escape("why each stopped: " + "; ".join(f"{k}: {v}" for k, v in sorted(why.items()))),
            highlight=False,
        )


_EPS_ELO_HELP = (
    "Margin in ΔElo: arms no arm beats by more than this AND --epsilon-tokens are 'within'. auto: the "
    "smallest the run's full grid settles at --alpha; 0: the strict rule (on / off / open)."
)
_EPS_TOK_HELP = (
    "Margin in tokens, a share of the arm's tokens per task (0.05 = 5%); auto: 5% (0 when --epsilon-elo 0)."
)
_ORDERS_HELP = "Replay this many random task orders; print token share and classification error over them."


def _print_orders(table: Any, settings: AdaptiveSettings, orders: int, as_json: bool) -> None:
    """`--orders K`: K task orders replayed, scored against the full grid's own ε-classification."""
    import json

    from elo_per_token.coordinator.adaptive.replay import replay_orders

    summ = replay_orders(table, settings, orders)
    if as_json:
        typer.echo(json.dumps({**summ.__dict__, "arms": table.arms}, sort_keys=True))
    else:
        typer.echo(summ.line())


_RunOpt = Annotated[
    list[str],
    typer.Argument(
        metavar="RUN",
        help="A finished full run: run folder, s3://…/runs/<id>, or its JSONL/Parquet files.",
    ),
]
_AlphaOpt = Annotated[float, typer.Option("--alpha", help="Error budget per decision and per interval.")]
_WidthOpt = Annotated[
    float | None,
    typer.Option("--width", help="Resolve on-frontier arms' ΔElo-per-1k step to this width."),
]
_MaxTokensOpt = Annotated[
    float | None,
    typer.Option("--max-tokens", help="Stop before a round that would pass this many tokens."),
]
_FutilityOpt = Annotated[
    bool,
    typer.Option(
        "--futility/--no-futility", help="Stop arms the full grid could not separate either (open)."
    ),
]
_FutilityPowerOpt = Annotated[
    float,
    typer.Option("--futility-power", help="Conditional power below which a decision counts as out of reach."),
]


def replay_adaptive_cmd(
    run: _RunOpt,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random task order.")] = 0,
    alpha: _AlphaOpt = 0.05,
    rounds: Annotated[int, typer.Option("--rounds", help="Rounds the grid is cut into.")] = 10,
    min_rounds: Annotated[int, typer.Option("--min-rounds", help="Rounds before any decision.")] = 2,
    width: _WidthOpt = None,
    max_tokens: _MaxTokensOpt = None,
    futility: _FutilityOpt = True,
    futility_power: _FutilityPowerOpt = AdaptiveSettings.futility_power,
    epsilon_elo: Annotated[str, typer.Option("--epsilon-elo", help=_EPS_ELO_HELP)] = "auto",
    epsilon_tokens: Annotated[str, typer.Option("--epsilon-tokens", help=_EPS_TOK_HELP)] = "auto",
    orders: Annotated[int, typer.Option("--orders", min=0, max=10_000, help=_ORDERS_HELP)] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """How much would an adaptive sweep have saved on this run? Replays the adaptive policy on the run's stored
    results (each job returns what it returned, with its real tokens) and compares with the full grid."""
    import json

    from elo_per_token.analysis.report import make_console
    from elo_per_token.contracts.errors import InputError
    from elo_per_token.coordinator.adaptive.replay import replay_adaptive
    from elo_per_token.coordinator.adaptive.report import adaptive_json, print_adaptive
    from elo_per_token.coordinator.adaptive.run_table import read_run_table

    try:
        settings = AdaptiveSettings(
            alpha=alpha,
            rounds=rounds,
            min_rounds=min_rounds,
            width=width,
            seed=seed,
            max_tokens=max_tokens,
            futility=futility,
            futility_power=futility_power,
            epsilon_elo=margin_arg(epsilon_elo, "epsilon_elo"),
            epsilon_tokens=margin_arg(epsilon_tokens, "epsilon_tokens"),
        )
        settings.check()
    except ValueError as e:
        key = str(e).split(":")[0]
        raise InputError(str(e).split(": ", 1)[-1], field=f"--{key.replace('_', '-')}") from None
    table = read_run_table(run)
    if orders:
        _print_orders(table, settings, orders, as_json)
        return
    out = replay_adaptive(table, settings)
    if as_json:
        got, of = out.reach
        extra = {
            "full_grid_frontier": out.truth,
            "full_grid_rule": out.full_rule,
            "reach": {"reached": got, "decided": of},
        }
        typer.echo(
            json.dumps({**adaptive_json(out.result, out.full_tokens), **extra}, default=str, sort_keys=True)
        )
        return
    c = make_console()
    print_adaptive(out.result, c, out.full_tokens)
    agree = [
        r.status == ("on" if f else "off")
        for r, f in zip(out.result.reports, out.truth, strict=True)
        if r.status in ("on", "off")
    ]
    within = sum(r.status == "within" for r in out.result.reports)
    c.print(
        f"decided {len(agree)} of {len(out.truth)} arms on/off ({sum(agree)} agree with the full grid's "
        f"frontier); {within} within the margin",
        highlight=False,
    )
    got, of = out.reach
    c.print(
        f"reach: the same test on the full grid (one look) decides {of} arm(s); this sweep decides {got} of "
        "them the same way",
        highlight=False,
    )
