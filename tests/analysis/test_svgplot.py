"""The Elo-vs-tokens SVG (analysis.svgplot), drawn by both `ept view` and the HTML report: names beside their
points only where they collide with nothing, a legend whose frontier line is the plot's, the frontier in a
colour no strategy has; hostile rows (markup in names, NaN, inf, zero or negative tokens, thousands of arms)
give well-formed SVG in bounded time and memory. And the accuracy table's standard error (accuracy_se, the
'± s.e.' the viewer shows) by hand."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import polars as pl
import pytest
from bounds import bounded
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.analysis.accuracy import accuracy_tables
from elo_per_token.analysis.svgplot import (
    FRONTIER_COLOUR,
    LABEL_FONT,
    MAX_LABELS,
    TAB10,
    Box,
    _box,
    elo_tokens_svg,
    place_labels,
    text_width,
)

NS = "{http://www.w3.org/2000/svg}"


def _row(arm: str, tokens: float, elo: float, strategy: str = "s", frontier: bool = False) -> dict:
    return {"arm": arm, "strategy": strategy, "tokens_per_task": tokens, "elo": elo, "elo_lo": elo - 20,
            "elo_hi": elo + 20, "frontier": frontier}  # fmt: skip


def _label_boxes(svg: ET.Element) -> list[Box]:
    out = []
    for t in svg.iter(f"{NS}text"):
        if t.get("class") == "pt-label":
            out.append(
                _box(float(t.get("x")), float(t.get("y")), text_width(t.text or ""), t.get("text-anchor"))
            )
    return out


def test_spread_points_are_all_labelled_and_the_legend_draws_the_frontier_line() -> None:
    rows = [_row("greedy@1", 600, 1000, "greedy", True), _row("majority@4", 2400, 1050, "majority", True),
            _row("best_of_n@8", 9000, 1040, "best_of_n"), _row("best_of_n@16", 19000, 1080, "best_of_n", True)]  # fmt: skip
    svg = ET.fromstring(elo_tokens_svg(rows, "90%", anchor="greedy@1"))
    names = {t.text for t in svg.iter(f"{NS}text") if t.get("class") == "pt-label"}
    assert names == {r["arm"] for r in rows}
    line = svg.find(f"{NS}polyline[@id='frontier-line']")
    key = svg.find(f".//{NS}line[@class='legend-frontier']")
    assert line.get("stroke") == key.get("stroke") == FRONTIER_COLOUR and FRONTIER_COLOUR not in TAB10
    assert line.get("stroke-dasharray") == key.get("stroke-dasharray")
    legend = [t.text for t in svg.find(f"{NS}g[@id='plot-legend']").iter(f"{NS}text")]
    assert legend == ["best_of_n", "greedy", "majority", "frontier (point estimate)", "90% interval"]
    assert svg.find(f".//{NS}text[@id='labels-omitted']") is None


def test_colliding_names_are_left_out_and_counted() -> None:
    # three arms on top of each other: one name fits beside them, the other two would overlap it
    rows = [
        _row("aaaa@1", 1000, 1000, frontier=True),
        _row("bbbb@2", 1001, 1000.2),
        _row("cccc@3", 1002, 999.9),
    ]
    rows += [_row("zzzz@9", 50000, 1100, frontier=True)]
    svg = ET.fromstring(elo_tokens_svg(rows, anchor="cccc@3"))
    boxes = _label_boxes(svg)
    names = [t.text for t in svg.iter(f"{NS}text") if t.get("class") == "pt-label"]
    assert "cccc@3" in names  # the anchor is placed first
    assert len(names) < len(rows) and svg.find(f".//{NS}text[@id='labels-omitted']") is not None
    assert not any(a.hits(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


NAME = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40)
NUM = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**12), 10**12), st.none())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries({"arm": NAME, "strategy": st.one_of(NAME, st.none()), "tokens_per_task": NUM,
                                       "elo": NUM, "elo_lo": NUM, "elo_hi": NUM, "frontier": st.booleans(),
                                       "frontier_prob": NUM}), max_size=30),
       st.one_of(NAME, st.none()))  # fmt: skip
def test_hostile_rows_give_wellformed_svg_quickly(rows: list[dict], anchor: str | None) -> None:
    out = bounded(lambda: elo_tokens_svg(rows, "95%", anchor), 2.0, 30)
    plotted = [r for r in rows if all(isinstance(r[k], int | float) and math.isfinite(r[k]) and abs(r[k]) <= 1e15
                                      for k in ("elo", "tokens_per_task"))]  # fmt: skip
    if not plotted:
        assert out == ""
        return
    svg = ET.fromstring(out)  # well-formed: every name escaped
    groups = svg.findall(f"{NS}g[@class='pt']")
    assert [g.get("data-arm") for g in groups] == [r["arm"] for r in plotted]
    boxes = _label_boxes(svg)
    assert not any(a.hits(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


def test_thousands_of_arms_stay_bounded() -> None:
    # 4,990 arms in one dense cloud (no name fits there) and 10 frontier arms spread out (theirs do)
    rows = [
        _row(f"arm{i}@{i}", 1000 + i * 0.01, 1000 + (i * 37) % 50 * 0.01, frontier=True) for i in range(4990)
    ]
    rows += [_row(f"far{i}@{i}", 10 ** (4 + i / 3), 1100 + 40 * i, frontier=True) for i in range(10)]
    out = bounded(lambda: elo_tokens_svg(rows), 5.0, 200)
    svg = ET.fromstring(out)
    assert len(svg.findall(f"{NS}g[@class='pt']")) == 5000
    assert 0 < len(_label_boxes(svg)) <= MAX_LABELS


def test_place_labels_keeps_names_inside_the_plot() -> None:
    pts = [_row("a-very-long-arm-name@1[effort=high]", 0, 0)]
    area = Box(0, 0, 100, 100)
    assert place_labels(pts, [(95.0, 50.0)], area) == {}  # no spot fits inside: left out, not clipped
    got = place_labels(pts, [(5.0, 50.0)], Box(0, 0, 400, 100))
    x, y, how = got[0]
    b = _box(x, y, text_width(pts[0]["arm"]), how)
    assert b.x0 >= 0 and b.x1 <= 400 and LABEL_FONT < y <= 100


def test_accuracy_se_by_hand() -> None:
    # one family, 4 tasks scored 1, 1, 0, 0 and a second arm all 1: mean 0.5, sample variance 1/3, s.e.
    # sqrt(1/3 / 4); an arm with no spread has s.e. 0; no intervals asked for (rounds 0): no s.e. either
    rows = [
        {"task_id": f"t{i}", "family": "f", "arm": "a", "score": s}
        for i, s in enumerate([1.0, 1.0, 0.0, 0.0])
    ]
    rows += [{"task_id": f"t{i}", "family": "f", "arm": "b", "score": 1.0} for i in range(4)]
    acc, _, _ = accuracy_tables(pl.DataFrame(rows), ["a", "b"], {"f": 1.0}, rounds=100)
    se = dict(zip(acc["arm"], acc["accuracy_se"], strict=True))
    assert se["a"] == pytest.approx(math.sqrt(1 / 3 / 4)) and se["b"] == 0.0
    # two families weighted 3:1 -> s.e. = sqrt(sum w^2 var_f)
    rows2 = rows[:4] + [
        {"task_id": f"u{i}", "family": "g", "arm": "a", "score": s} for i, s in enumerate([1.0, 0.0])
    ]
    acc2, _, _ = accuracy_tables(pl.DataFrame(rows2), ["a"], {"f": 3.0, "g": 1.0}, rounds=100)
    want = math.sqrt((0.75**2) * (1 / 3 / 4) + (0.25**2) * (0.5 / 2))
    assert acc2["accuracy_se"][0] == pytest.approx(want)
    none, _, _ = accuracy_tables(pl.DataFrame(rows), ["a", "b"], {"f": 1.0}, rounds=0)
    assert none["accuracy_se"].to_list() == [None, None]
