"""200 arms end to end: every output written, readable plots, grouped and filtered terminal tables.

Kept fast: 200 arms x 3 families x 3 tasks (every arm runs every task, so ~180k comparison rows), 20 rounds.
The full-size run (100 tasks per family, 200 rounds; K = 1,000) is benchmarks/bench_arms.py."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench_arms():
    spec = importlib.util.spec_from_file_location("bench_arms", ROOT / "benchmarks" / "bench_arms.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ept(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ept.cli", *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    log = tmp_path_factory.mktemp("grid") / "grid.jsonl"
    _bench_arms().write_grid(log, 200, 3, seed=1)
    return log


def test_200_arms_write_every_file_with_filtered_terminal(grid: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = ept("analyze", str(grid), "--rounds", "20", "--out", str(out), "--html", str(out / "report.html"),
               "--top", "8", "--arms", "best_of_n@*")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    for name in ("report.md", "arms.csv", "report.json", "elo_vs_tokens.png", "d_elo_per_1k.png",
                 "per_family_elo.png", "report.html"):
        assert (out / name).stat().st_size > 0, name
    doc = json.loads((out / "report.json").read_text())
    assert len(doc["table"]) == 200 == len(doc["arms"])  # files keep every arm
    # Terminal: the 8 best best_of_n arms by Elo, no other arm.
    bon = sorted((r for r in doc["table"] if r["arm"].startswith("best_of_n@")), key=lambda r: -r["elo"])
    main = proc.stdout.split("Per strategy")[0]
    printed = set(re.findall(r"(\w+@\d+\[[^\]]*\])", main))
    assert printed == {r["arm"] for r in bon[:8]}
    assert "8 of 200 arms shown" in proc.stdout
    # HTML: every plotted arm has a hover title in the Elo-vs-tokens figure.
    html = (out / "report.html").read_text()
    fig = html[html.index('<figure id="plot-elo-tokens">'):]
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
