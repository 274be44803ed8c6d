"""Adaptive sweeps: tokens saved, decision error, interval coverage and reach on replays with known truth.

    PYTHONPATH=$PWD python3 benchmarks/bench_adaptive.py [REPLAYS=100] [DEMO_RUN ...] [--no-futility]
        [--futility-power=0.02] [--eps-elo=auto|N] [--eps-tokens=auto|S]
    PYTHONPATH=$PWD python3 benchmarks/bench_adaptive.py 200 --issue41 [--eps-elo=auto] [--eps-tokens=0.05]

`--issue41`: issue 41's designs (ISSUE41: dominated arms, close neighbours, a heavy-token arm, a 16-arm long
frontier), each arm's ε-classification (on / off / within the margin, coordinator/adaptive/epsilon.py) scored against the
model's truth: token share (mean, median, 90th pct), replays with every arm classified, ε-error, coverage.

Scenarios (each replayed REPLAYS times with the replay executor, coordinator/adaptive/replay.py):
- synthetic-12: 12 arms, 600 tasks in 3 families, the expensive arms clearly dominated;
- close-frontier: 8 arms, 600 tasks, frontier arms with close neighbours (0.05 logit apart);
- too-close: 6 arms of equal strength at rising cost: no decision can be made (spend the grid, say open);
- stored run(s) given on the command line (a ledger run folder): `ept demo --replicates 8` is the demo with
  known truth (run_stored: every replay draws each job's result from its replicates); a run with one
  replicate is replayed as it is.
Synthetic runs are drawn afresh for every replay from a known model (score ~ Bernoulli(sigmoid(a_arm - d_task)),
tokens ~ cost_arm * lognormal), so truth is the model: the true win balance of two arms on binary scores is
the difference of their mean accuracies, the true tokens/task the model's mean. A run with replicates is
resampled per job, so its truth is exact (replicate_truth); a run with one replicate is one fixed table, its
replays differ only in the random task order, and its truth is the full grid itself (the population replayed).
Reported: token share of the full grid (mean, min, max), per-arm decision error (a confident on/off decision
contradicting the truth; worst arm, with its 95% Clopper-Pearson upper bound as the Monte-Carlo error), the
share of arms decided, the coverage of the report's intervals (tokens/task and ΔElo vs the anchor), and reach:
of the decisions the full grid makes under the same rule (coordinator/adaptive/sequential.assess_holm on every task of the
replayed table, coordinator/replay.full_rule_decisions), the share the adaptive sweep makes the same way,
summed over replays. "1 look": the full grid's test spends alpha over each arm's 2 (K - 1) pair tests only (a
sweep that looks once pays nothing for peeking: the most the same test decides on that grid, the strict
target). "same z": the full grid at the adaptive sweep's final-look budget (looks = its decision rounds), which
leaves out the price of peeking and isolates what early stopping and futility lose.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl
from scipy.special import expit
from scipy.stats import beta

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from elo_per_token.analysis.io import Records, read_records
from elo_per_token.coordinator.adaptive.core import plan_margin, round_bounds
from elo_per_token.coordinator.adaptive.epsilon import WITHIN, eps_truth, eps_wrong
from elo_per_token.coordinator.adaptive.replay import full_rule_decisions, reach, replay_adaptive
from elo_per_token.coordinator.adaptive.run_table import RunTable, table_from_records
from elo_per_token.coordinator.adaptive.sequential import OFF, ON, OPEN, elo_from_balance, true_frontier
from elo_per_token.coordinator.adaptive.settings import AdaptiveSettings, margin_arg

FAMILIES = ("code", "math", "tool_use")
settings_only: dict[str, str] = {}


@dataclass(frozen=True)
class Model:
    name: str
    ability: tuple[float, ...]
    cost: tuple[float, ...]
    tasks: int = 600
    sigma_tokens: float = 0.35
    easy_share: float = 0.0  # tasks every arm solves (difficulty -inf)
    heavy: tuple[int, float, float] | None = None  # (arm, probability, factor): rare runs at factor x tokens

    def draw(self, rng: np.random.Generator) -> RunTable:
        """One full run of the model: every arm on every task."""
        k, t = len(self.ability), self.tasks
        fam = [FAMILIES[i % 3] for i in range(t)]
        offset = np.asarray([{"code": 0.3, "math": -0.2, "tool_use": 0.0}[f] for f in fam])
        d = rng.normal(0.0, 1.2, t) + offset - 1.0  # task difficulty (negative: easy)
        d[rng.uniform(size=t) < self.easy_share] = -np.inf
        p = expit(np.asarray(self.ability)[None, :] - d[:, None])
        scores = (rng.uniform(size=(t, k)) < p).astype(float)
        length = rng.lognormal(0.0, 0.3, t)[:, None]  # long tasks cost every arm more
        tokens = np.asarray(self.cost)[None, :] * length * rng.lognormal(0.0, self.sigma_tokens, (t, k))
        if self.heavy is not None:
            arm, prob, factor = self.heavy
            tokens[:, arm] *= np.where(rng.uniform(size=t) < prob, factor, 1.0)
        tokens = np.round(tokens)
        arms = [f"arm{i:02d}" for i in range(k)]
        return RunTable(tasks=[f"t{i:04d}" for i in range(t)], families=fam, arms=arms, strategies=arms,
                        budgets=[1] * k, scores=scores, tokens=tokens)  # fmt: skip

    def truth(self) -> tuple[np.ndarray, np.ndarray]:
        """(true tokens/task [K], true win balance [K, K]) by quadrature over 400k task draws."""
        rng = np.random.default_rng(12345)
        n = 400_000
        offset = np.tile([0.3, -0.2, 0.0], n // 3 + 1)[:n]
        d = rng.normal(0.0, 1.2, n) + offset - 1.0
        acc = expit(np.asarray(self.ability)[None, :] - d[:, None]).mean(axis=0)
        acc = self.easy_share + (1 - self.easy_share) * acc
        mean_tok = np.asarray(self.cost) * np.exp(0.3**2 / 2) * np.exp(self.sigma_tokens**2 / 2)
        if self.heavy is not None:
            arm, prob, factor = self.heavy
            mean_tok[arm] *= 1 + prob * (factor - 1)
        return mean_tok, acc[:, None] - acc[None, :]


SYNTH = [
    Model("synthetic-12 (expensive arms dominated)",
          ability=(0.0, 0.6, 1.0, 1.3, 1.5, 0.7, 0.4, 0.5, 0.2, 0.3, -0.1, 0.1),
          cost=(500, 900, 1500, 2500, 4000, 6000, 9000, 13000, 18000, 24000, 32000, 45000)),
    Model("close-frontier (neighbours 0.05 logit apart)",
          ability=(0.0, 0.5, 0.55, 1.0, 1.05, 1.1, 0.2, -0.2),
          cost=(600, 1200, 1300, 3000, 3300, 3600, 9000, 15000)),
    Model("too-close (equal arms)", ability=(1.0,) * 6, cost=(1000, 1500, 2000, 3000, 4000, 6000), tasks=300),
]  # fmt: skip

# Issue 41's designs (held out from the rule's tuning above): each >= 200 replays of fresh draws.
ISSUE41 = [
    Model("dominated (8 arms, 3 x 200 tasks, 3 dominated by 0.3-0.4 logit)",
          ability=(0.0, 0.5, 0.9, 1.2, 1.4, 0.55, 0.9, 1.0),
          cost=(500, 1000, 2000, 4000, 8000, 3000, 6000, 12000)),
    Model("close neighbours (6 arms, 2 x 200 tasks)", ability=(0.0, 0.5, 0.55, 1.0, 1.05, 1.1),
          cost=(600, 1200, 1300, 3000, 3300, 3600), tasks=400),
    Model("heavy-token (5 arms, 40% all-solve, one rare 50x-token arm)", ability=(0.0, 0.4, 0.8, 1.2, 0.9),
          cost=(500, 1000, 2000, 4000, 1500), easy_share=0.4, heavy=(4, 0.04, 50.0)),
    Model("long frontier (16 arms, each 0.12 logit stronger and 1.3x costlier)",
          ability=tuple(0.12 * i for i in range(16)), cost=tuple(round(300 * 1.3**i) for i in range(16))),
    Model("far-dominated (8 arms, 3 x 200 tasks, 4 dominated by 1.1-1.5 logit: off beyond the margin)",
          ability=(0.0, 0.7, 1.2, 1.6, -0.3, 0.2, 0.5, 0.4), cost=(500, 1000, 2000, 4000, 3000, 6000, 9000, 15000)),
]  # fmt: skip


@dataclass
class Tally:
    share: list[float]
    wrong: np.ndarray  # [K] confident wrong decisions
    decided: np.ndarray  # [K] confident decisions
    cover_tok: list[bool]
    cover_elo: list[bool]
    agree: list[float]  # share of arms whose decision equals the full grid's point frontier (decided arms)
    reach: list[int]  # [reached, decided]: the full grid's decisions under the same rule (1 look), reached
    reach_z: list[int]  # the same at the adaptive sweep's final-look z (looks = its decision rounds)
    replays: int = 0


def _score(t: Tally, out: object, truth_on: np.ndarray, tok: np.ndarray, bal: np.ndarray) -> None:
    res = out.result  # type: ignore[attr-defined]
    t.share.append(out.token_share)  # type: ignore[attr-defined]
    anchor = res.arms.index(res.anchor)
    for i, r in enumerate(res.reports):
        wrong = (r.status == ON and not truth_on[i]) or (r.status == OFF and truth_on[i])
        t.wrong[i] += wrong
        t.decided[i] += r.status in (ON, OFF)
        t.cover_tok.append(r.tokens_lo <= tok[i] <= r.tokens_hi)
        if i != anchor and r.d_elo_lo is not None:
            true_d = float(elo_from_balance(bal[i, anchor]))
            t.cover_elo.append(r.d_elo_lo - 1e-9 <= true_d <= r.d_elo_hi + 1e-9)
    full = out.truth  # type: ignore[attr-defined]
    dec = [(r.status == ON) == f for r, f in zip(res.reports, full, strict=True) if r.status in (ON, OFF)]
    t.agree.append(float(np.mean(dec)) if dec else float("nan"))
    got, of = out.reach  # type: ignore[attr-defined]
    t.reach[0] += got
    t.reach[1] += of
    t.replays += 1


def _score_same_z(t: Tally, out: object, table: RunTable, settings: AdaptiveSettings) -> None:
    """Reach against the full grid decided at the adaptive sweep's own final-look z (no peeking price)."""
    n = len(round_bounds(len(table.tasks), settings.rounds))
    looks = n - min(settings.min_rounds, n) + 1
    full = full_rule_decisions(table, settings, looks=looks)
    got, of = reach([r.status for r in out.result.reports], full)  # type: ignore[attr-defined]
    t.reach_z[0] += got
    t.reach_z[1] += of


def _replay_all(
    draw: Callable[[int], RunTable],
    replays: int,
    settings: AdaptiveSettings,
    tok: np.ndarray,
    bal: np.ndarray,
) -> Tally:
    """Replay the policy on draw(r) for r < replays (seed r), each scored against the truth (tok, bal)."""
    truth_on = true_frontier(tok, np.nan_to_num(bal))
    k = tok.size
    t = Tally([], np.zeros(k), np.zeros(k), [], [], [], [0, 0], [0, 0])
    for r in range(replays):
        table = draw(r)
        out = replay_adaptive(table, AdaptiveSettings(**{**settings.__dict__, "seed": r}))
        _score(t, out, truth_on, tok, bal)
        _score_same_z(t, out, table, settings)
    return t


def run_model(m: Model, replays: int, settings: AdaptiveSettings) -> Tally:
    """A synthetic model: every replay is a fresh full run drawn from it."""
    tok, bal = m.truth()
    return _replay_all(lambda r: m.draw(np.random.default_rng(1000 + r)), replays, settings, tok, bal)


def replicate_tables(path: str) -> tuple[RunTable, np.ndarray, np.ndarray]:
    """(the first replicate's table, scores [R, T, K], tokens [R, T, K]) of a run with R replicates per
    (task, arm): one RunTable per replicate, tasks and arms aligned. A run with one replicate (or logs that
    name none) is R = 1: the run's own table."""
    records = read_records([path])
    frame = records.frame
    reps = sorted(int(r) for r in frame["replicate"].drop_nulls().unique().to_list())
    if len(reps) < 2:
        tables = [table_from_records(records)]
    else:
        tables = [
            table_from_records(Records(frame.filter(pl.col("replicate") == r), records.files)) for r in reps
        ]
    first = tables[0]
    for t in tables[1:]:
        if t.tasks != first.tasks or t.arms != first.arms:
            raise SystemExit(f"{path}: replicates do not cover the same tasks and arms")
    return first, np.stack([t.scores for t in tables]), np.stack([t.tokens for t in tables])


def replicate_truth(
    families: list[str], scores: np.ndarray, tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(true tokens/task [K], true win balance [K, K]) of the resampled run: a job's result is a uniform draw
    from its R replicates, independently per (task, arm), so E sign(s_i - s_j) on task t is the mean over all
    R x R replicate pairs, weighted by the task's family weight (the replay's estimand, exactly). With R = 1
    it is the full grid's own win balance and tokens/task."""
    from elo_per_token.coordinator.adaptive.core import task_weights

    w = task_weights(families, None)
    tok = np.nanmean(tokens, axis=(0, 1))
    k = scores.shape[2]
    bal = np.zeros((k, k))
    for i in range(k):
        for j in range(k):
            sign = np.sign(scores[:, None, :, i] - scores[None, :, :, j])  # [R, R, T]
            bal[i, j] = float(np.nanmean(w * np.nanmean(sign, axis=(0, 1))))
    return tok, bal


def run_stored(path: str, replays: int, settings: AdaptiveSettings) -> Tally:
    """A stored run, resampled: every replay draws each job's result from its R replicates (new data each
    replay, with real tokens), so the truth is known exactly (replicate_truth), as for the synthetic models,
    and coverage and error are tested on the simulator's own outcomes. With one replicate every draw is the
    run itself: the replays differ only in the task order, and the truth is the full grid."""
    base, scores, tokens = replicate_tables(path)
    tok, bal = replicate_truth(base.families, scores, tokens)
    r_, t_, k = scores.shape
    cols, rows = np.arange(k)[None, :], np.arange(t_)[:, None]

    def draw(r: int) -> RunTable:
        pick = np.random.default_rng(2000 + r).integers(r_, size=(t_, k))
        return replace(base, scores=scores[pick, rows, cols], tokens=tokens[pick, rows, cols])

    return _replay_all(draw, replays, settings, tok, bal)


def _line(name: str, t: Tally, secs: float) -> str:
    n = t.replays
    worst = int(t.wrong.max())
    hi = float(beta.ppf(0.95, worst + 1, n - worst)) if worst < n else 1.0
    share = np.asarray(t.share)
    agree = np.asarray([a for a in t.agree if np.isfinite(a)])
    return (
        f"| {name} | {n} | {share.mean():.1%} (median {np.median(share):.1%}, 90th pct "
        f"{np.quantile(share, 0.9):.1%}, max {share.max():.1%}) | "
        f"{worst}/{n} = {worst / n:.1%} (95% upper {hi:.1%}) | {t.decided.sum() / (n * t.wrong.size):.0%} | "
        f"{np.mean(t.cover_tok):.1%} ({len(t.cover_tok)}) | "
        f"{(np.mean(t.cover_elo) if t.cover_elo else float('nan')):.1%} ({len(t.cover_elo)}) | "
        f"{(agree.mean() if agree.size else float('nan')):.1%} | {_frac(t.reach)} | {_frac(t.reach_z)} | "
        f"{secs:.0f} s |"
    )


def _frac(x: list[int]) -> str:
    """reached/decided = share (summed over replays); '-' when the full grid decides nothing."""
    return f"{x[0]}/{x[1]} = {x[0] / x[1]:.1%}" if x[1] else "0/0 (nothing to reach)"


def run_eps(m: Model, replays: int, settings: AdaptiveSettings) -> str:
    """One issue-41 row: token share (mean, median, 90th pct), the share of replays with every arm classified
    (no open), ε-classification error against the model's truth (replays with any wrong arm, and the worst
    arm's rate with its 95% Clopper-Pearson upper bound) and interval coverage (tokens/task and ΔElo)."""
    tok, bal = m.truth()
    margin = plan_margin(m.draw(np.random.default_rng(0)).families, settings)  # auto: from the design
    truth = eps_truth(tok, bal, margin)
    share, every, any_wrong, cover = [], 0, 0, []
    wrong = np.zeros(tok.size)
    for r in range(replays):
        out = replay_adaptive(m.draw(np.random.default_rng(1000 + r)), replace(settings, seed=r))
        res = out.result
        st = [x.status for x in res.reports]
        share.append(out.token_share)
        every += OPEN not in st
        bad = [eps_wrong(a, b) for a, b in zip(st, truth, strict=True)]
        wrong += bad
        any_wrong += any(bad)
        anchor = res.arms.index(res.anchor)
        for i, x in enumerate(res.reports):
            cover.append(x.tokens_lo <= tok[i] <= x.tokens_hi)
            if i != anchor and x.d_elo_lo is not None and x.d_elo_hi is not None:
                true_d = float(elo_from_balance(bal[i, anchor]))
                cover.append(x.d_elo_lo - 1e-9 <= true_d <= x.d_elo_hi + 1e-9)
    sh, worst = np.asarray(share), int(wrong.max())
    hi = float(beta.ppf(0.95, worst + 1, replays - worst)) if worst < replays else 1.0
    counts = {c: truth.count(c) for c in (ON, WITHIN, OFF) if c in truth}
    return (f"| {m.name} | {margin.elo:.0f}{' (auto)' if margin.auto else ''} | {counts} | {replays} | {sh.mean():.1%} | {np.median(sh):.1%} | {np.quantile(sh, 0.9):.1%} | "
            f"{every / replays:.1%} | {any_wrong}/{replays} = {any_wrong / replays:.1%} | "
            f"{worst / replays:.1%} (95% upper {hi:.1%}) | {np.mean(cover):.1%} ({len(cover)}) |")  # fmt: skip


def main_eps(replays: int, settings: AdaptiveSettings) -> None:
    """`--issue41`: the ε-classification table on issue 41's designs."""
    print(f"settings: alpha={settings.alpha}, epsilon_elo={settings.epsilon_elo}, "
          f"epsilon_tokens={settings.epsilon_tokens}, rounds={settings.rounds}, futility={settings.futility}")  # fmt: skip
    print("| design | ε Elo | truth | replays | tokens mean | median | 90th pct | every arm classified | "
          "replays with an ε-error | worst arm's ε-error | coverage |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    only = settings_only.get("designs")
    for n, m in enumerate(ISSUE41):
        if only is None or str(n) in only.split(","):
            print(run_eps(m, replays, settings), flush=True)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = dict(a[2:].partition("=")[::2] for a in sys.argv[1:] if a.startswith("--"))
    replays = int(args[0]) if args else 100
    stored = args[1:]
    settings = AdaptiveSettings(
        futility="no-futility" not in flags,
        futility_power=float(flags.get("futility-power", AdaptiveSettings.futility_power)),
        # --issue41 classifies at the sweep's default margin (auto); the strict scenarios at none (0)
        epsilon_elo=margin_arg(flags.get("eps-elo", "auto" if "issue41" in flags else "0"), "--eps-elo"),
        epsilon_tokens=margin_arg(flags.get("eps-tokens", "auto"), "--eps-tokens"),
        rounds=int(flags.get("rounds", AdaptiveSettings.rounds)),
        min_rounds=int(flags.get("min-rounds", AdaptiveSettings.min_rounds)),
    )
    if "designs" in flags:  # --designs=0,4: only these of ISSUE41
        settings_only["designs"] = flags["designs"]
    if "issue41" in flags:
        main_eps(replays, settings)
        return
    print(f"settings: alpha={settings.alpha}, rounds={settings.rounds}, min_rounds={settings.min_rounds}, "
          f"futility={settings.futility} (power {settings.futility_power})")  # fmt: skip
    print("| run | replays | tokens vs full grid | worst arm's decision error | arms decided | "
          "coverage tokens/task | coverage ΔElo | agreement with full grid | reach (1 look) | "
          "reach (same z) | time |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    total, total_z = [0, 0], [0, 0]
    runs = [(m.name, lambda m=m: run_model(m, replays, settings)) for m in SYNTH] + [
        (f"stored run {Path(p).name}", lambda p=p: run_stored(p, replays, settings)) for p in stored
    ]
    for name, go in runs:
        t0 = time.perf_counter()
        t = go()
        print(_line(name, t, time.perf_counter() - t0), flush=True)
        total = [total[0] + t.reach[0], total[1] + t.reach[1]]
        total_z = [total_z[0] + t.reach_z[0], total_z[1] + t.reach_z[1]]
    print(f"overall reach (1 look): {_frac(total)}; at the same z: {_frac(total_z)}")


if __name__ == "__main__":
    main()
