"""Plots for any number of arms: no crash on odd intervals, few labels, sorted top/bottom views."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elo_per_token.analysis.plots import (
    LABEL_ALL,
    MANY_ARMS,
    TOP_N,
    bars_figure,
    elo_vs_tokens_figure,
    per_family_figure,
    top_bottom,
)


def _rows(k: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    tok = np.sort(rng.gamma(4.0, 500.0, k)) + 1
    elo = 1000 + 40 * np.log(tok / tok[0]) + rng.normal(0, 20, k)
    rows = []
    for i in range(k):
        # Percentile intervals need not contain the point: some rows have both bounds above (or below) it.
        lo, hi = sorted(elo[i] + rng.normal(0, 30, 2))
        best_before = max(elo[:i], default=-math.inf)
        rows.append(
            {
                "arm": f"s{i % 4}@{2 ** (i % 5)}[v={i}]",
                "strategy": f"s{i % 4}",
                "tokens_per_task": float(tok[i]),
                "elo": float(elo[i]),
                "elo_lo": float(lo),
                "elo_hi": float(hi),
                "frontier": bool(elo[i] > best_before),
                "d_elo_per_1k": float(rng.normal(0, 5)),
                "d_elo_per_1k_lo": float(rng.normal(3, 5)),
                "d_elo_per_1k_hi": float(rng.normal(-3, 5)),
            }
        )
    rows[0]["elo_lo"] = None  # a missing bound
    if k > 2:
        rows[2]["d_elo_per_1k"] = float("nan")
    return rows


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].texts]


@pytest.mark.parametrize("k", [1, 2, 5, 25, 300])
def test_figures_never_fail_and_label_only_frontier_and_anchor_for_many_arms(k, tmp_path) -> None:
    import matplotlib.pyplot as plt

    rows = _rows(k)
    anchor = rows[-1]["arm"]
    fig = elo_vs_tokens_figure(rows, "95%", anchor)
    fig.savefig(tmp_path / "e.png")
    labels = _texts(fig)
    if k <= LABEL_ALL:
        assert len(labels) == k
    else:
        front = {r["arm"] for r in rows if r["frontier"]}
        assert labels and all(t.removesuffix(" (anchor)") in front | {anchor} for t in labels)
        assert f"{anchor} (anchor)" in labels
        assert len(labels) <= len(front) + 1 < k
    bars = bars_figure(rows, "d_elo_per_1k", "t", "y")
    bars.savefig(tmp_path / "b.png")
    shown = [t.get_text() for t in bars.axes[0].get_yticklabels() + bars.axes[0].get_xticklabels()]
    assert len([s for s in shown if "@" in s]) == (
        min(k - (k > 2), 2 * TOP_N) if k > MANY_ARMS else k - (k > 2)
    )
    fams = ["a", "b"]
    val = {(f, r["arm"]): r["elo"] + (5 if f == "a" else -5) for f in fams for r in rows}
    per = per_family_figure([r["arm"] for r in rows], fams, val, {r["arm"]: r["elo"] for r in rows})
    per.savefig(tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    plt.close("all")


def test_top_bottom_sorted_and_counts_hidden() -> None:
    rows = [{"arm": str(i), "v": float(i)} for i in range(50)] + [{"arm": "none", "v": None}]
    shown, hidden = top_bottom(rows, "v", 5)
    assert [r["arm"] for r in shown] == ["49", "48", "47", "46", "45", "4", "3", "2", "1", "0"]
    assert hidden == 40
    few, none_hidden = top_bottom(rows[:8], "v", 5)
    assert [r["arm"] for r in few] == [str(i) for i in range(7, -1, -1)] and none_hidden == 0


def test_empty_inputs_draw_a_note() -> None:
    fig = elo_vs_tokens_figure([{"arm": "x", "tokens_per_task": None, "elo": 1000.0}], "95%")
    assert "no arm" in _texts(fig)[0]
    assert "no values" in _texts(bars_figure([], "v", "t", "y"))[0]
