"""200 arms end to end: every output written, readable plots, grouped and filtered terminal tables.

Kept fast: 200 arms x 3 families x 3 tasks (every arm runs every task, so ~180k comparison rows), 20 rounds.
The full-size run (100 tasks per family, 200 rounds; K = 1,000) is benchmarks/bench_arms.py."""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import re
from pathlib import Path

import pytest
from cli_runner import run_ept

ROOT = Path(__file__).resolve().parents[2]


def _bench_arms():
    spec = importlib.util.spec_from_file_location("bench_arms", ROOT / "benchmarks" / "bench_arms.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ept = functools.partial(run_ept, cwd=ROOT, columns=200)  # the CLI in this process (testkit/cli_runner.py)


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    log = tmp_path_factory.mktemp("grid") / "grid.jsonl"
    _bench_arms().write_grid(log, 200, 3, seed=1)
    return log


@pytest.mark.slow
def test_200_arms_write_every_file_with_filtered_terminal(grid: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = ept(
        "analyze",
        str(grid),
        "--rounds",
        "20",
        "--out",
        str(out),
        "--html",
        str(out / "report.html"),
        "--top",
        "8",
        "--arms",
        "best_of_n@*",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    for name in (
        "report.md",
        "arms.csv",
        "report.json",
        "elo_vs_tokens.png",
        "d_elo_per_1k.png",
        "per_family_elo.png",
        "report.html",
    ):
        assert (out / name).stat().st_size > 0, name
    doc = json.loads((out / "report.json").read_text())
    assert len(doc["table"]) == 200 == len(doc["arms"])  # files keep every arm
    # Terminal: the 8 best best_of_n arms by Elo, no other arm.
    bon = sorted((r for r in doc["table"] if r["arm"].startswith("best_of_n@")), key=lambda r: -r["elo"])
    main = proc.stdout.split("Per strategy")[0]
    printed = set(re.findall(r"^│ (\w+@\d+\[[^\]]*\])", main, flags=re.M))  # table rows, not the title
    assert printed == {r["arm"] for r in bon[:8]}
    assert "8 of 200 arms shown" in proc.stdout
    # HTML: every plotted arm has a hover title in the Elo-vs-tokens figure.
    html = (out / "report.html").read_text()
    fig = html[html.index('<figure id="plot-elo-tokens">') :]
    fig = fig[: fig.index("</figure>")]
    assert fig.count("<title>") == 200
    assert "best_of_n@16[effort=0,verifier=0]: Elo" in fig


def test_200_arms_terminal_grouped_by_strategy(grid: Path) -> None:
    proc = ept("analyze", str(grid), "--rounds", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "grouped by strategy" in proc.stdout and "--top N or --arms PATTERN" in proc.stdout
    main = proc.stdout.split("grouped by strategy")[1]
    strategies = [m.group(1) for m in re.finditer(r"^\S?\s*(\w+)@\d+\[", main, flags=re.M)]
    # Grouped: each strategy's rows are contiguous.
    changes = sum(a != b for a, b in itertools.pairwise(strategies))
    assert len(strategies) == 200 and changes == 3


def test_bad_filters_exit_2(grid: Path) -> None:
    proc = ept("analyze", str(grid), "--rounds", "0", "--arms", "no_such_arm*")
    assert proc.returncode == 2 and "--arms" in proc.stderr and "no arm matches" in proc.stderr
    proc = ept("analyze", str(grid), "--rounds", "0", "--top", "0")
    assert proc.returncode == 2 and "--top" in proc.stderr


def _outcomes(seed: int = 0):
    """3 arms x 2 families x 6 tasks, 1-3 replicates, scores on a 3-point scale (many ties)."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    rows = []
    for fam in ("math", "code"):
        for t in range(6):
            for arm, skill in (("a", 0.0), ("b", 0.6), ("c", 1.2)):
                for rep in range(int(rng.integers(1, 4))):
                    rows.append(
                        {
                            "task_id": f"{fam}-{t}",
                            "family": fam,
                            "arm": arm,
                            "replicate": rep,
                            "score": float(np.clip(np.round(rng.normal(skill, 1.0)), 0, 2) / 2),
                        }
                    )
    return pl.DataFrame(rows)


@pytest.mark.parametrize("drop_ties", [False, True])
def test_outcome_groups_equal_explicit_pairs(drop_ties: bool) -> None:
    """Grouped outcomes give the same counts, fits and bootstrap as one row per comparison."""
    import numpy as np
    import polars as pl

    from elo_per_token.analysis.bootstrap import (
        OutcomeGroups,
        PairData,
        bootstrap,
        family_counts,
        point_estimate,
    )
    from elo_per_token.analysis.pairs import implied_pair_rows, outcome_groups, outcome_pairs

    o = _outcomes()
    arms, fams = ["a", "b", "c"], ["code", "math"]
    tasks = o.select("task_id", "family").unique().sort("family", "task_id").with_row_index("t")
    t_of = dict(zip(tasks["task_id"], tasks["t"], strict=True))
    fam_of = (
        tasks["family"].replace_strict({f: i for i, f in enumerate(fams)}, return_dtype=pl.Int64).to_numpy()
    )
    tokens = np.random.default_rng(1).gamma(3.0, 100.0, (tasks.height, 3))
    pairs = outcome_pairs(o, drop_ties=drop_ties)
    groups = outcome_groups(o)
    assert implied_pair_rows(groups, drop_ties=drop_ties) == pairs.height
    idx = {a: i for i, a in enumerate(arms)}
    explicit = PairData(
        fam_of,
        np.array([t_of[t] for t in pairs["task_id"]]),
        np.array([idx[a] for a in pairs["winner"]]),
        np.array([idx[a] for a in pairs["loser"]]),
        pairs["weight"].to_numpy(),
        3,
        fams,
        tokens,
    )
    empty = np.zeros(0, dtype=np.int64)
    grouped = PairData(
        fam_of,
        empty,
        empty,
        empty,
        np.zeros(0),
        3,
        fams,
        tokens,
        OutcomeGroups(
            np.array([t_of[t] for t in groups["task_id"]]),
            np.array([idx[a] for a in groups["arm"]]),
            groups["level"].to_numpy(),
            groups["mass"].to_numpy(),
            0.0 if drop_ties else 0.5,
        ),
    )
    for f in range(2):
        np.testing.assert_allclose(family_counts(grouped, f), family_counts(explicit, f), rtol=0, atol=1e-12)
    w = np.array([0.5, 0.5])
    np.testing.assert_allclose(
        point_estimate(grouped, w, anchor=0)[0], point_estimate(explicit, w, anchor=0)[0], atol=1e-9
    )
    a, b = (
        bootstrap(grouped, w, anchor=0, rounds=40, seed=3),
        bootstrap(explicit, w, anchor=0, rounds=40, seed=3),
    )
    np.testing.assert_allclose(a.elo, b.elo, atol=1e-8)
    np.testing.assert_array_equal(a.tokens_per_task, b.tokens_per_task)


def test_pipeline_grouped_path_equals_pair_rows(monkeypatch) -> None:
    """The example logs analysed with outcomes grouped (forced) and as pair rows: the same report."""
    import numpy as np

    from elo_per_token.analysis import pipeline

    opts = pipeline.AnalysisOptions(rounds=30, seed=2)
    rows = pipeline.analyze([str(ROOT / "examples" / "logs")], opts)
    monkeypatch.setattr(pipeline, "_PAIR_ROWS_MAX", 0)
    grouped = pipeline.analyze([str(ROOT / "examples" / "logs")], opts)
    assert grouped.pairs.height == 0 < rows.pairs.height  # outcomes really took the grouped path
    assert grouped.counts["comparisons"] == rows.counts["comparisons"]
    assert grouped.arms == rows.arms
    np.testing.assert_allclose(grouped.elo, rows.elo, atol=1e-9)
    np.testing.assert_allclose(grouped.elo_samples, rows.elo_samples, atol=1e-8)
    assert [f.comparisons for f in grouped.fits] == pytest.approx([f.comparisons for f in rows.fits])
