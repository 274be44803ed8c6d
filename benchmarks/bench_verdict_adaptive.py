"""bench_verdict's adaptive-replay scenario: after an adaptive sweep, the table and the recommendation follow
the sequential decisions (issue 37 item 5).

Each run draws a full grid from bench_adaptive's "dominated" model (8 arms, 3 of them dominated), replays the
adaptive policy on it (coordinator/adaptive/replay.py, the real policy), writes the jobs the policy ran as a call log,
analyses it as `ept sweep --adaptive` does (every pair on the tasks both ran, `--missing drop`, then
coordinator/adaptive/secondary.py) and scores the result against the model's truth: the recommendation names as
"on the frontier" only arms that truly are (a truly dominated arm named = a dominated pick), it picks no
partial or flagged arm, and the accuracy intervals cover each arm's true accuracy.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
from bench_adaptive import ISSUE41, Model
from scipy.special import expit

from elo_per_token.analysis.pipeline import AnalysisOptions, analyze
from elo_per_token.coordinator.adaptive.core import run_adaptive
from elo_per_token.coordinator.adaptive.replay import replay_runner
from elo_per_token.coordinator.adaptive.secondary import as_adaptive_secondary
from elo_per_token.coordinator.adaptive.sequential import ON, true_frontier
from elo_per_token.coordinator.adaptive.settings import AdaptiveSettings

MODEL: Model = replace(ISSUE41[0], tasks=300)


def true_accuracy(m: Model) -> np.ndarray:
    """Each arm's mean score over the model's task distribution (as Model.truth integrates it)."""
    rng = np.random.default_rng(12345)
    n = 400_000
    d = rng.normal(0.0, 1.2, n) + np.tile([0.3, -0.2, 0.0], n // 3 + 1)[:n] - 1.0
    acc = expit(np.asarray(m.ability)[None, :] - d[:, None]).mean(axis=0)
    return m.easy_share + (1 - m.easy_share) * acc


def _log(table: object, ran: set[tuple[int, int]], path: Path) -> None:
    """The jobs the adaptive policy ran, as `ept analyze` reads them (one call and one outcome each)."""
    lines = []
    for t, a in sorted(ran):
        base = {"task_id": table.tasks[t], "family": table.families[t], "strategy": table.arms[a],  # type: ignore[attr-defined]
                "budget_n": 1}  # fmt: skip
        tok = int(table.tokens[t, a])  # type: ignore[attr-defined]
        lines.append({**base, "kind": "call", "role": "sample",
                      "usage": {"prompt_tokens": tok - tok // 5, "completion_tokens": tok // 5}})  # fmt: skip
        lines.append({**base, "kind": "outcome", "score": float(table.scores[t, a])})  # type: ignore[attr-defined]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def run_adaptive_replay(n: int, rounds: int, tmp: Path) -> dict[str, list]:
    """n replays scored like bench_verdict.score_run (same keys)."""
    tok_true, bal = MODEL.truth()
    front = true_frontier(tok_true, np.nan_to_num(bal))
    acc_true = true_accuracy(MODEL)
    agg: dict[str, list] = {}
    for e in range(n):
        table = MODEL.draw(np.random.default_rng(70_000 + e))
        ran: set[tuple[int, int]] = set()
        inner = replay_runner(table)

        def runner(r: int, tasks: list[int], arms: list[int], inner=inner, ran=ran) -> object:
            ran.update((t, a) for t in tasks for a in arms)
            return inner(r, tasks, arms)

        res = run_adaptive(table.families, table.arms, runner, AdaptiveSettings(seed=e, epsilon_elo=0))
        f = tmp / f"adaptive-{e}.jsonl"
        _log(table, ran, f)
        result = analyze([str(f)], AnalysisOptions(missing="drop", rounds=rounds, seed=e))
        f.unlink()
        as_adaptive_secondary(result, {f"{a}@1": s for a, s in res.frontier.items()})
        rec = result.recommendation
        named_on = [i for i, a in enumerate(table.arms) if res.frontier[a] == ON]
        out: dict[str, list] = {
            "pick_partial": [rec.get("arm") in result.partial_arms],
            "pick_flagged": [False],  # the adaptive recommendation excludes nothing; it picks from decisions
            "pick_dominated": [any(not front[i] for i in named_on)],
            "declined": [rec.get("arm") is None], "cheapest": [False], "acc": [], "all_solved_lo_below_1": [],
            "budget_over": [],
        }  # fmt: skip
        for row in result.accuracy.iter_rows(named=True):
            i = table.arms.index(row["arm"].removesuffix("@1"))
            if row["accuracy_lo"] is not None:
                out["acc"].append(row["accuracy_lo"] <= acc_true[i] <= row["accuracy_hi"])
            if row["accuracy"] == 1.0:
                out["all_solved_lo_below_1"].append(row["accuracy_lo"] < 1.0)
        for k, v in out.items():
            agg.setdefault(k, []).extend(v)
    return agg
