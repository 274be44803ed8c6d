"""ept compare: fail rules, comparability checks, pair building, and the gate's error rates on known models.

Synthetic runs come from a known model (P(correct) = sigmoid(strength[arm] - difficulty[task])), so the
true change of every arm is known: a degraded arm must be flagged, an unchanged one must not.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
import pytest
from scipy.optimize import minimize

from elo_per_token.analysis.bt import prior_l2
from elo_per_token.analysis.compare import compare_runs, pooled_pairs
from elo_per_token.analysis.compare_gate import FailRule, parse_fail_on
from elo_per_token.analysis.compare_load import check_comparable
from elo_per_token.analysis.compare_output import to_json_dict, to_markdown
from elo_per_token.analysis.compare_types import RunInputs
from elo_per_token.contracts.errors import InputError

ARMS = {  # arm -> (strategy, budget, strength, tokens/task)
    "greedy@1": ("greedy", 1, 0.0, 1200.0),
    "majority@4": ("majority", 4, 0.6, 4600.0),
    "best_of_n@8": ("best_of_n", 8, 1.0, 9300.0),
    "best_of_n@16": ("best_of_n", 16, 1.15, 18700.0),
}
FAMILIES = ("math", "code")


def make_run(
    seed: int,
    *,
    n_tasks: int = 120,
    degrade: dict[str, float] | None = None,
    token_scale: dict[str, float] | None = None,
    replicates: int = 1,
    task_seed: int = 7,
    arms: dict | None = None,
    families: tuple[str, ...] = FAMILIES,
    source: str = "run",
) -> RunInputs:
    """One run drawn from the known model. Task difficulties depend on task_seed only (same suite)."""
    arms = arms or ARMS
    degrade = degrade or {}
    token_scale = token_scale or {}
    trng = np.random.default_rng(task_seed)
    rng = np.random.default_rng(seed)
    rows, toks = [], []
    for fam in families:
        diff = trng.normal(0.0, 1.0, n_tasks)
        for t in range(n_tasks):
            tid = f"{fam}-{t:04d}"
            for arm, (_, _, s, tok) in arms.items():
                p = 1.0 / (1.0 + math.exp(-(s - degrade.get(arm, 0.0) - diff[t])))
                spent = []
                for r in range(replicates):
                    rows.append((tid, fam, arm, r, float(rng.random() < p)))
                    spent.append(tok * token_scale.get(arm, 1.0) * rng.lognormal(0.0, 0.25))
                toks.append((tid, fam, arm, float(np.mean(spent))))
    outcomes = pl.DataFrame(rows, schema=["task_id", "family", "arm", "replicate", "score"], orient="row")
    task_tokens = pl.DataFrame(toks, schema=["task_id", "family", "arm", "tokens"], orient="row")
    arm_df = pl.DataFrame(
        [(a, v[0], v[1]) for a, v in arms.items()], schema=["arm", "strategy", "budget_n"], orient="row"
    )
    return RunInputs(source=source, outcomes=outcomes, task_tokens=task_tokens, arms=arm_df)


# ---------------------------------------------------------------- --fail-on


def test_parse_fail_on_reads_thresholds() -> None:
    r = parse_fail_on("elo-drop=20,tokens-rise=10%")
    assert r == FailRule(elo_drop=20.0, tokens_rise=0.10)
    assert parse_fail_on("tokens-rise=500") == FailRule(tokens_rise_abs=500.0)
    assert parse_fail_on("none") == FailRule()
    assert parse_fail_on(" elo-drop = 7.5 ") == FailRule(elo_drop=7.5)


@pytest.mark.parametrize(
    "spec", ["elo-drop", "elo-drop=-3", "elo=20", "elo-drop=20%", "elo-drop=1,elo-drop=2"]
)
def test_parse_fail_on_rejects_bad_specs(spec: str) -> None:
    with pytest.raises(InputError) as e:
        parse_fail_on(spec)
    assert e.value.field == "--fail-on"


# ---------------------------------------------------------------- comparability


def test_different_arms_are_not_comparable() -> None:
    base = make_run(1, n_tasks=10)
    arms = {k: v for k, v in ARMS.items() if k != "best_of_n@16"}
    cur = make_run(2, n_tasks=10, arms=arms, source="cur")
    with pytest.raises(InputError) as e:
        check_comparable(base, cur)
    assert e.value.field == "arm" and "best_of_n@16" in str(e.value) and "only in baseline" in str(e.value)


def test_different_families_are_not_comparable() -> None:
    base = make_run(1, n_tasks=10)
    cur = make_run(2, n_tasks=10, families=("math", "tool_use"))
    with pytest.raises(InputError) as e:
        check_comparable(base, cur)
    assert e.value.field == "family" and "tool_use" in str(e.value) and "code" in str(e.value)


def test_different_suites_in_manifests_are_not_comparable() -> None:
    base = make_run(1, n_tasks=5)
    cur = make_run(2, n_tasks=5)
    base = RunInputs(**{**base.__dict__, "suites": ("math", "code")})
    cur = RunInputs(**{**cur.__dict__, "suites": ("math", "code-hard")})
    with pytest.raises(InputError) as e:
        check_comparable(base, cur)
    assert e.value.field == "suites"


def test_no_common_task_cannot_link_scales() -> None:
    base = make_run(1, n_tasks=5)
    cur = make_run(2, n_tasks=5)
    cur = RunInputs(**{**cur.__dict__, "outcomes": cur.outcomes.with_columns(pl.col("task_id") + "-other")})
    with pytest.raises(InputError) as e:
        check_comparable(base, cur)
    assert e.value.field == "task_id" and "cannot be linked" in str(e.value)


def test_partial_overlap_is_noted() -> None:
    base = make_run(1, n_tasks=10)
    cur = make_run(2, n_tasks=6)
    notes = check_comparable(base, cur)
    assert any("6 tasks in both runs" in n for n in notes)


# ---------------------------------------------------------------- pairs


def test_pooled_pairs_hand_computed() -> None:
    # Task 0: players 0 (score 1), 1 (score 0), 2 (score 1). Task 1: player 0 with 2 replicates (1, 0), player 3: 1.
    o = pl.DataFrame(
        {
            "task": [0, 0, 0, 1, 1, 1],
            "player": [0, 1, 2, 0, 0, 3],
            "replicate": [0, 0, 0, 0, 1, 0],
            "score": [1.0, 0.0, 1.0, 1.0, 0.0, 1.0],
        }
    )
    got = {(r["task"], r["winner"], r["loser"]): r["weight"] for r in pooled_pairs(o).iter_rows(named=True)}
    want = {
        (0, 0, 1): 1.0,  # 1 > 0
        (0, 2, 1): 1.0,
        (0, 0, 2): 0.5,  # tie: both ways, half weight
        (0, 2, 0): 0.5,
        # task 1: replicate r0 (1) ties player 3 (1): 0.5 * 1/2 each way; r1 (0) loses to 3: 1/2
        (1, 0, 3): 0.25,
        (1, 3, 0): 0.25 + 0.5,
    }
    # (1,3,0) appears twice (tie half + a win); sum the rows to compare.
    summed: dict[tuple, float] = {}
    for r in pooled_pairs(o).iter_rows(named=True):
        key = (r["task"], r["winner"], r["loser"])
        summed[key] = summed.get(key, 0.0) + r["weight"]
    assert set(got) == set(want)
    for k, v in want.items():
        assert summed[k] == pytest.approx(v)


# ---------------------------------------------------------------- statistics


def _independent_delta(base: RunInputs, cur: RunInputs, arm_order: list[str], l2: float) -> dict[str, float]:
    """ΔElo per arm from a literal scipy minimisation over explicit comparison lists (no aggregation,
    no polars joins): per family fit the 2K players, centre, equal family weights, cur - base."""
    k = len(arm_order)
    idx = {a: i for i, a in enumerate(arm_order)}
    thetas = []
    for fam in FAMILIES:
        by_task: dict[str, list[tuple[int, float]]] = {}
        for run, r in enumerate((base, cur)):
            for row in r.outcomes.filter(pl.col("family") == fam).iter_rows(named=True):
                by_task.setdefault(row["task_id"], []).append((idx[row["arm"]] + run * k, row["score"]))
        win, lose, w = [], [], []
        for items in by_task.values():
            for (pa, sa), (pb, sb) in itertools.combinations(items, 2):
                if sa > sb:
                    win.append(pa), lose.append(pb), w.append(1.0)
                elif sb > sa:
                    win.append(pb), lose.append(pa), w.append(1.0)
                else:
                    win += [pa, pb]
                    lose += [pb, pa]
                    w += [0.5, 0.5]
        wi, lo, ww = np.array(win), np.array(lose), np.array(w)

        def f(th: np.ndarray, wi=wi, lo=lo, ww=ww) -> float:
            return float(np.sum(ww * np.logaddexp(0.0, -(th[wi] - th[lo]))) + l2 * np.sum(th**2))

        res = minimize(f, np.zeros(2 * k), method="BFGS", options={"gtol": 1e-10})
        thetas.append(res.x - res.x.mean())
    theta = np.mean(thetas, axis=0)
    scale = 400.0 / math.log(10.0)
    return {a: scale * (theta[k + i] - theta[i]) for a, i in idx.items()}


def test_delta_elo_matches_independent_fit() -> None:
    base = make_run(11, n_tasks=40)
    cur = make_run(12, n_tasks=40, degrade={"majority@4": 0.8})
    res = compare_runs(base, cur, rule=FailRule(elo_drop=0.0), rounds=100, seed=1)
    # The default penalty is the prior of `ept analyze` (analysis.bt.prior_l2, issue 12), not the seed's 1e-3.
    want = _independent_delta(base, cur, res.table["arm"].to_list(), prior_l2())
    for row in res.table.iter_rows(named=True):
        assert row["d_elo"] == pytest.approx(want[row["arm"]], abs=1e-3)
        assert row["d_elo_lo"] <= row["d_elo"] <= row["d_elo_hi"]
    # Tokens: plain means of each run's per-task tokens.
    for row in res.table.iter_rows(named=True):
        tb = base.task_tokens.filter(pl.col("arm") == row["arm"])["tokens"].mean()
        tc = cur.task_tokens.filter(pl.col("arm") == row["arm"])["tokens"].mean()
        assert row["tokens_base"] == pytest.approx(tb)
        assert row["tokens_cur"] == pytest.approx(tc)
        assert row["d_tokens_rel"] == pytest.approx(tc / tb - 1.0)
    # Baseline's cheapest arm is the displayed anchor at 1000.
    assert res.anchor == "greedy@1"
    assert res.table.filter(pl.col("arm") == "greedy@1")["elo_base"][0] == pytest.approx(1000.0)


@pytest.mark.parametrize("bad", ["majority@4", "greedy@1"])
def test_degraded_arm_is_flagged_alone(bad: str) -> None:
    # greedy@1 is the display anchor: a pooled fit still sees it drop (anchoring per run would hide it).
    base = make_run(21, n_tasks=150)
    cur = make_run(22, n_tasks=150, degrade={bad: 1.5})
    res = compare_runs(base, cur, rule=parse_fail_on("elo-drop=20"), rounds=300, seed=3)
    assert res.flagged == [bad]
    assert res.exit_code == 1
    row = res.table.filter(pl.col("arm") == bad).row(0, named=True)
    assert row["d_elo_hi"] < -20
    md = to_markdown(res)
    assert f"`{bad}`" in md and "❌" in md
    assert to_json_dict(res)["verdict"] == "regression"


def test_token_rise_is_flagged_only_when_the_interval_supports_it() -> None:
    base = make_run(31, n_tasks=100)
    cur = make_run(32, n_tasks=100, token_scale={"best_of_n@8": 1.35, "majority@4": 1.03})
    res = compare_runs(base, cur, rule=parse_fail_on("tokens-rise=10%"), rounds=300, seed=4)
    assert res.flagged == ["best_of_n@8"]
    assert "tokens/task rose" in res.reasons["best_of_n@8"][0]


@pytest.mark.slow
def test_false_alarm_rate_over_20_seeds() -> None:
    """No change, different seeds: the gate may fire at most twice in 20 runs (the acceptance bound)."""
    alarms = 0
    for s in range(20):
        base = make_run(1000 + s, n_tasks=60)
        cur = make_run(2000 + s, n_tasks=60)
        res = compare_runs(base, cur, rule=parse_fail_on("elo-drop=20,tokens-rise=10%"), rounds=200, seed=s)
        alarms += res.exit_code
    assert alarms <= 2


def test_replicates_and_nulls_are_handled() -> None:
    base = make_run(41, n_tasks=30, replicates=2)
    cur = make_run(42, n_tasks=30, replicates=2)
    # A failed job (no score) is left out, and noted.
    cur = RunInputs(
        **{
            **cur.__dict__,
            "outcomes": cur.outcomes.with_columns(
                pl.when(pl.int_range(pl.len()) == 0).then(None).otherwise(pl.col("score")).alias("score")
            ),
        }
    )
    res = compare_runs(base, cur, rule=FailRule(elo_drop=20.0), rounds=100, seed=5)
    assert res.table.height == len(ARMS)
    assert any("current 1" in n for n in res.notes)


# ---------------------------------------------------------------- ledger runs (real record format)


def write_ledger_run(
    ledger_root,
    run_id: str,
    seed: int,
    *,
    n_tasks: int = 40,
    degrade: dict[str, float] | None = None,
    token_scale: dict[str, float] | None = None,
    manifest: dict | None = None,
    fail_jobs: int = 0,
) -> str:
    """Write a known-model run as real ledger objects (JobResult.to_jsonl via FileLedger); return its folder.

    Each job makes budget_n 'sample' calls (plus one 'verifier' call for best_of_n) whose usage adds up to
    the model's tokens; `fail_jobs` jobs end with a credential error (no score), as a worker records them.
    """
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.contracts.records import CallRecord, JobResult, Outcome
    from elo_per_token.ledger import FileLedger

    run = make_run(seed, n_tasks=n_tasks, degrade=degrade, token_scale=token_scale)
    led = FileLedger(ledger_root)
    led.put_manifest(run_id, manifest or {"run_id": run_id, "plan": {"suites": list(FAMILIES)}})
    toks = {(r["task_id"], r["arm"]): r["tokens"] for r in run.task_tokens.iter_rows(named=True)}
    failed = 0
    for row in run.outcomes.iter_rows(named=True):
        strategy, budget, _, _ = ARMS[row["arm"]]
        job = Job(
            run_id=run_id,
            task={"task_id": row["task_id"], "family": row["family"]},
            strategy=strategy,
            budget_n=budget,
            replicate=row["replicate"],
            seed=seed,
        )
        total = round(toks[(row["task_id"], row["arm"])])
        roles = ["sample"] * budget + (["verifier"] if strategy == "best_of_n" else [])
        share = [total // len(roles)] * len(roles)
        share[0] += total - sum(share)
        calls = [
            CallRecord(
                call_index=i,
                role=role,
                model="sim",
                latency_s=0.0,
                attempts=1,
                usage={"prompt_tokens": s * 3 // 4, "completion_tokens": s - s * 3 // 4, "total_tokens": s},
            )
            for i, (role, s) in enumerate(zip(roles, share, strict=True))
        ]
        if failed < fail_jobs:
            failed += 1
            outcome = Outcome(
                answer=None,
                score=None,
                correct=None,
                error={"class": "credential", "message": "401 from the provider"},
            )
        else:
            outcome = Outcome(answer="x", score=row["score"], correct=bool(row["score"]))
        led.put_job(run_id, job.key, JobResult(job=job, calls=calls, outcome=outcome).to_jsonl())
    return led.run_url(run_id)


def test_gate_interval_is_adjusted_for_the_number_of_arms() -> None:
    base = make_run(51, n_tasks=60)
    cur = make_run(52, n_tasks=60, degrade={"majority@4": 0.4})
    adj = compare_runs(base, cur, rule=FailRule(elo_drop=0.0), rounds=400, seed=6)
    raw = compare_runs(base, cur, rule=FailRule(elo_drop=0.0), rounds=400, seed=6, adjust="none")
    assert adj.gate_level == pytest.approx(1 - 0.05 / len(ARMS))
    assert raw.gate_level == pytest.approx(0.95)
    t = adj.table
    # Wider than the displayed 95% interval, and the unadjusted gate is exactly the displayed interval.
    assert (t["gate_d_elo_lo"] <= t["d_elo_lo"]).all() and (t["gate_d_elo_hi"] >= t["d_elo_hi"]).all()
    assert raw.table["gate_d_elo_hi"].to_list() == raw.table["d_elo_hi"].to_list()
    # Whatever is flagged with the adjustment is flagged without it.
    assert set(adj.flagged) <= set(raw.flagged)
    with pytest.raises(InputError):
        compare_runs(base, cur, rule=FailRule(), rounds=100, adjust="holm")


def test_detectable_drop_is_printed_and_means_what_it_says() -> None:
    # Issue 12 case 7: `elo-drop=20` does not mean "drops over 20 are caught". Each arm's row states the
    # smallest true drop caught 80% of the time: margin + (z_gate + z_0.8) * bootstrap sd of ΔElo.
    from scipy.stats import norm

    caught_big = caught_small = 0
    for s in range(8):
        base = make_run(100 + s, n_tasks=60)
        big = compare_runs(base, make_run(200 + s, n_tasks=60, degrade={"majority@4": 2.0}),
                           rule=FailRule(elo_drop=20.0), rounds=100, seed=s)  # fmt: skip
        small = compare_runs(base, make_run(300 + s, n_tasks=60, degrade={"majority@4": 0.5}),
                             rule=FailRule(elo_drop=20.0), rounds=100, seed=s)  # fmt: skip
        row = big.table.filter(pl.col("arm") == "majority@4").row(0, named=True)
        z = norm.ppf(1 - (1 - big.gate_level) / 2) + norm.ppf(0.8)
        assert row["detectable_drop"] == pytest.approx(20.0 + z * row["d_elo_sd"])
        assert row["detectable_drop"] > 40.0  # far above the margin at 60 tasks per family
        # degrade 2.0 is a drop of ~150 Elo, well above the detectable ~90; 0.5 (~40 Elo) well below.
        caught_big += "majority@4" in big.flagged
        caught_small += "majority@4" in small.flagged
        assert "drop caught 80%" in to_markdown(big)
    # Without an elo-drop rule nothing is ever flagged: no detectable drop to print.
    none = compare_runs(base, base, rule=FailRule(), rounds=60, seed=0)
    assert none.table["detectable_drop"].null_count() == none.table.height
    assert caught_big >= 7, caught_big
    assert caught_small <= 3, caught_small


def test_per_1k_columns_only_where_the_token_step_is_resolved() -> None:
    # Issue 12 case 3 in `ept compare`: majority@4 and best_of_n@8 cost 1% apart, so the ratio between them
    # is not a number (it used to be computed from the rounds that happened to have a positive step).
    arms = {**ARMS, "best_of_n@8": ("best_of_n", 8, 1.0, 4646.0)}
    base, cur = make_run(1, n_tasks=60, arms=arms), make_run(2, n_tasks=60, arms=arms)
    res = compare_runs(base, cur, rule=FailRule(), rounds=200, seed=0)
    row = {r["arm"]: r for r in res.table.iter_rows(named=True)}
    assert (
        row["best_of_n@8"]["d_elo_per_1k_base"] is None and row["best_of_n@8"]["d_elo_per_1k_base_lo"] is None
    )
    assert row["best_of_n@16"]["d_elo_per_1k_base"] is not None  # 4.6k -> 18.7k tokens: resolved


def test_small_families_are_noted() -> None:
    # Issue 12 case 1 in `ept compare`: a family of a few tasks gets a note, not silence.
    res = compare_runs(
        make_run(1, n_tasks=5), make_run(2, n_tasks=5), rule=FailRule(elo_drop=20.0), rounds=60
    )
    assert sum("only 5 task(s)" in n and "little power" in n for n in res.notes) == 2
    assert not any("task(s)" in n for n in compare_runs(make_run(1, n_tasks=40), make_run(2, n_tasks=40),
                                                        rule=FailRule(), rounds=60).notes)  # fmt: skip
