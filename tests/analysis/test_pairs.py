"""Within-task comparisons: hand cases, and a brute-force double loop as the independent reference."""

from __future__ import annotations

import collections
import itertools
import random

import polars as pl
import pytest

from elo_per_token.analysis.pairs import build_pairs, judgment_pairs, outcome_pairs


def outcomes(rows: list[tuple[str, str, int, float | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"task_id": t, "family": t.split("-")[0], "arm": a, "replicate": r, "score": s}
            for t, a, r, s in rows
        ],
        schema={
            "task_id": pl.String,
            "family": pl.String,
            "arm": pl.String,
            "replicate": pl.Int64,
            "score": pl.Float64,
        },
    )


def as_dict(p: pl.DataFrame) -> dict:
    g = p.group_by("task_id", "winner", "loser").agg(pl.col("weight").sum())
    return {(t, w, lo): x for t, w, lo, x in g.rows()}


def test_higher_score_wins_and_ties_split() -> None:
    o = outcomes([("m-1", "a", 0, 0.9), ("m-1", "b", 0, 0.1), ("m-1", "c", 0, 0.9), ("m-2", "a", 0, 0.0)])
    assert as_dict(outcome_pairs(o)) == {
        ("m-1", "a", "b"): 1.0,
        ("m-1", "c", "b"): 1.0,
        ("m-1", "a", "c"): 0.5,
        ("m-1", "c", "a"): 0.5,
    }  # m-2 has one arm: no comparison
    assert as_dict(outcome_pairs(o, drop_ties=True)) == {("m-1", "a", "b"): 1.0, ("m-1", "c", "b"): 1.0}


def test_replicates_meet_pairwise_with_normalised_weight() -> None:
    # a: [1, 0, 0], b: [1, 1] -> 6 meetings of weight 1/6: (1,1) x2 ties, (0,1) x4 b wins.
    o = outcomes(
        [("t-1", "a", 0, 1), ("t-1", "a", 1, 0), ("t-1", "a", 2, 0), ("t-1", "b", 0, 1), ("t-1", "b", 1, 1)]
    )
    got = as_dict(outcome_pairs(o))
    assert got == pytest.approx({("t-1", "a", "b"): 2 / 6 * 0.5, ("t-1", "b", "a"): 4 / 6 + 2 / 6 * 0.5})
    assert sum(got.values()) == pytest.approx(1.0)


def test_null_scores_are_not_compared() -> None:
    o = outcomes([("t-1", "a", 0, None), ("t-1", "b", 0, 0.5), ("t-1", "a", 1, 1.0)])
    assert as_dict(outcome_pairs(o)) == {("t-1", "a", "b"): 1.0}


def test_judgments_used_as_given() -> None:
    j = pl.DataFrame(
        {"task_id": ["t-1", "t-1", "t-2"], "family": ["t"] * 3, "arm_a": ["a", "a", "b"], "arm_b": ["b", "b", "c"],
         "winner": ["A", "B", "tie"]}
    )  # fmt: skip
    assert as_dict(judgment_pairs(j)) == {
        ("t-1", "a", "b"): 1.0,
        ("t-1", "b", "a"): 1.0,
        ("t-2", "b", "c"): 0.5,
        ("t-2", "c", "b"): 0.5,
    }
    assert as_dict(judgment_pairs(j, drop_ties=True)) == {("t-1", "a", "b"): 1.0, ("t-1", "b", "a"): 1.0}
    both = build_pairs(outcomes([("t-1", "a", 0, 1.0), ("t-1", "b", 0, 0.0)]), j)
    assert sorted(set(both["source"])) == ["judgment", "outcome"]
    assert as_dict(both)[("t-1", "a", "b")] == 2.0


def test_matches_brute_force_double_loop_on_random_outcomes() -> None:
    rng = random.Random(11)
    rows = []
    for t in range(60):
        for arm in rng.sample(["a", "b", "c", "d"], k=rng.randint(1, 4)):
            for r in range(rng.randint(1, 3)):
                rows.append((f"f{t % 3}-{t}", arm, r, rng.choice([0.0, 0.5, 1.0])))
    got = as_dict(outcome_pairs(outcomes(rows)))

    want: dict = collections.defaultdict(float)
    by_task: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    for t, a, _, s in rows:
        by_task[t][a].append(s)
    for t, arms in by_task.items():
        for a, b in itertools.combinations(sorted(arms), 2):
            w = 1.0 / (len(arms[a]) * len(arms[b]))
            for sa in arms[a]:
                for sb in arms[b]:
                    if sa > sb:
                        want[(t, a, b)] += w
                    elif sb > sa:
                        want[(t, b, a)] += w
                    else:
                        want[(t, a, b)] += w / 2
                        want[(t, b, a)] += w / 2
    assert got == pytest.approx(dict(want))
