"""`ept view`'s plot, arm, compare and accuracy pages (issue 40 items 2 and 4, and 6), over real HTTP against a
real `ept view` process, each number checked against what `ept analyze` / `ept compare` wrote (the viewer
renders, never recomputes): labelled plot points and a legend whose frontier line is the plot's (not a
strategy's colour); the frontier column in words; the arm page's summary and sortable task list; the compare
page's interval level, token-change intervals and accuracy changes, and its pickers' defaults; the optional
'± s.e.' column. The same plot is the HTML report's (one renderer: analysis.svgplot)."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from cli_runner import run_ept
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_compare import write_ledger_run  # tests/ is on sys.path (rootdir conftest)
from view_server import View, request, view

pytestmark = pytest.mark.slow  # two `ept analyze` runs and an `ept compare`: ~30 s
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("pages40b")
    ledger = tmp / "ledger"
    runs = {}
    for i, (name, started, kw) in enumerate([("nightly", "2026-01-02T00:00:00Z", {"fail_jobs": 1}),
                                             ("candidate", "2026-01-03T00:00:00Z", {"degrade": {"majority@4": 0.3}}),
                                             ("archive", "2025-12-01T00:00:00Z", {})]):  # fmt: skip
        man = {"run_id": name, "started_at": started, "plan": {"suites": ["code", "math"]}}
        runs[name] = write_ledger_run(ledger, name, 5 + i, n_tasks=24, manifest=man, **kw)
    reports = {}
    for name in ("nightly", "candidate"):
        out = tmp / f"out-{name}"
        a = run_ept(
            "analyze",
            runs[name],
            "--out",
            str(out),
            "--no-plots",
            "--html",
            str(out / "report.html"),
            cwd=tmp,
        )
        assert a.returncode == 0, a.stderr
        reports[name] = json.loads((tmp / f"out-{name}" / "report.json").read_text())
    c = run_ept("compare", "nightly", "candidate", "--ledger", str(ledger), "--fail-on", "none",
                "--json", str(tmp / "compare.json"), cwd=tmp)  # fmt: skip
    assert c.returncode == 0, c.stderr
    with view(ledger) as v:
        yield {"v": v, "reports": reports, "compare": json.loads((tmp / "compare.json").read_text()),
               "html": (tmp / "out-nightly" / "report.html").read_text()}  # fmt: skip


def _body(v: View, path: str) -> str:
    r = request(v.port, path)
    assert r.status == 200, (path, r.status, r.body[:300])
    return r.body.decode()


def _svg(page: str) -> ET.Element:
    m = re.search(r'<svg id="elo-plot".*?</svg>', page, re.S)
    assert m, page[:500]
    return ET.fromstring(m.group(0))


def _cells(page: str, table: str) -> dict[str, dict[str, str]]:
    """arm -> data-col -> data-value (or the text of a text cell) of one table."""
    body = re.search(rf'<table id="{table}">(.*?)</table>', page, re.S)
    assert body, table
    out: dict[str, dict[str, str]] = {}
    for arm, row in re.findall(r'<tr data-arm="([^"]*)"[^>]*>(.*?)</tr>', body.group(1), re.S):
        cols = {}
        for col, attrs, text in re.findall(r'<td data-col="([^"]+)"([^>]*)>(.*?)</td>', row, re.S):
            m = re.search(r'data-value="([^"]*)"', attrs)
            cols[col] = html.unescape(m.group(1) if m else text)
        out[html.unescape(arm)] = cols
    return out


def test_plot_labels_points_and_its_legend_matches_the_frontier_line(site: dict) -> None:
    page = _body(site["v"], "/run/nightly")
    svg = _svg(page)
    arms = [r["arm"] for r in site["reports"]["nightly"]["table"]]
    groups = svg.findall(f"{SVG}g[@class='pt']")
    assert sorted(g.get("data-arm") for g in groups) == sorted(arms)
    labelled = {g.get("data-arm"): g.find(f"{SVG}text[@class='pt-label']") for g in groups}
    # 4 arms spread over 1k-20k tokens: every name fits beside its point
    assert all(t is not None and t.text == a for a, t in labelled.items()), labelled
    line = svg.find(f"{SVG}polyline[@id='frontier-line']")
    key = svg.find(f".//{SVG}line[@class='legend-frontier']")
    assert line is not None and key is not None
    for attr in ("stroke", "stroke-dasharray", "stroke-width"):
        assert line.get(attr) == key.get(attr), attr  # the legend shows the line as it is drawn
    dots = {c.get("fill") for g in groups for c in g.findall(f"{SVG}circle")}
    assert line.get("stroke") not in dots and line.get("stroke").lower() != "#ff7f0e"  # not greedy's orange
    legend = {t.text for t in svg.findall(f"{SVG}g[@id='plot-legend']/{SVG}text")}
    assert {"best_of_n", "greedy", "majority", "frontier (point estimate)", "95% interval"} <= legend
    # The HTML report draws the same figure with the same renderer (issue 35: one plot renderer)
    report_svg = _svg(site["html"])
    assert [g.get("data-arm") for g in report_svg.findall(f"{SVG}g[@class='pt']")] == [
        g.get("data-arm") for g in groups
    ]


def test_frontier_column_in_words(site: dict) -> None:
    cells = _cells(_body(site["v"], "/run/nightly"), "returns-table")
    for r in site["reports"]["nightly"]["table"]:
        word = "yes" if r["frontier"] else "no"
        want = f"{word}, uncertain" if r.get("frontier_band") == "uncertain" else word
        assert cells[r["arm"]]["frontier_text"] == want, r
    assert any(r.get("frontier_band") == "uncertain" for r in site["reports"]["nightly"]["table"])
    assert "frontier_band" not in json.dumps(cells)  # no bare band column beside it


def test_arm_page_summary_is_the_reports(site: dict) -> None:
    rep = site["reports"]["nightly"]
    arm = "greedy@1"  # the arm with the failed job
    page = _body(site["v"], f"/run/nightly/arm?arm={arm}")
    summary = re.search(r'<table id="arm-summary".*?</table>', page, re.S).group(0)
    val = dict(re.findall(r'<tr data-key="(\w+)">.*?data-value="([^"]*)"', summary, re.S))
    row = next(r for r in rep["table"] if r["arm"] == arm)
    acc = next(r for r in rep["accuracy"] if r["arm"] == arm)
    assert float(val["elo"]) == row["elo"] and float(val["tokens"]) == row["tokens_per_task"]
    assert float(val["accuracy"]) == acc["accuracy"] and float(val["frontier"]) == row["frontier_prob"]
    # failures: the report document's (the HTML report's failures table), and analyze's breakdown
    doc = json.loads(request(site["v"].port, "/run/nightly/report.json").body)
    failed = sum(f["count"] for f in doc["failures"] if f["arm"] == arm)
    assert failed >= 1 and int(val["failures"]) == failed
    brk = next(r for r in rep["breakdown"] if r["arm"] == arm)
    assert brk["tasks_unscored"] == 1
    text = html.unescape(re.sub(r"<[^>]+>", " ", summary))
    assert (
        f"{acc['accuracy_lo']:.1%}, {acc['accuracy_hi']:.1%}" in text
        and f"± {acc['accuracy_se']:.1%} s.e." in text
    )
    assert "credential: 1" in text and f"{brk['tasks_unscored']} failed unscored" in text


def _column(page: str, col: int) -> list[float]:
    body = re.search(r'<table id="arm-tasks">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    rows = re.findall(r"<tr data-task.*?</tr>", body, re.S)
    vals = [re.search(r'data-value="([^"]*)"', re.findall(r"<td([^>]*)>", r)[col]) for r in rows]
    return [float(m.group(1)) if m and m.group(1) not in ("None", "nan") else float("nan") for m in vals]


@pytest.mark.parametrize(("sort", "col"), [("score", 2), ("tokens", 4)])
def test_arm_task_list_sorts_both_ways(site: dict, sort: str, col: int) -> None:
    v = site["v"]
    up = _column(_body(v, f"/run/nightly/arm?arm=greedy@1&sort={sort}"), col)
    down = _column(_body(v, f"/run/nightly/arm?arm=greedy@1&sort={sort}&desc=1"), col)
    have_up = [x for x in up if x == x]
    have_down = [x for x in down if x == x]
    assert len(up) == 48 and have_up == sorted(have_up) and have_down == sorted(have_down, reverse=True)
    assert have_up[0] < have_up[-1]  # the column is not constant: the order says something
    assert all(x != x for x in up[len(have_up) :])  # missing values last
    bad = request(v.port, "/run/nightly/arm?arm=greedy@1&sort=nonsense")
    assert bad.status == 400 and b"sort" in bad.body


def test_compare_page_states_level_and_shows_token_and_accuracy_changes(site: dict) -> None:
    page = _body(site["v"], "/compare?a=nightly&b=candidate")
    want = site["compare"]
    level = re.search(r'<p id="compare-level" data-level="([^"]+)">([^<]*)</p>', page)
    assert level and float(level.group(1)) == want["level"] and f"{want['level']:.0%}" in level.group(2)
    cells = _cells(page, "compare-table")
    acc = {
        n: {r["arm"]: r["accuracy"] for r in site["reports"][n]["accuracy"]} for n in ("nightly", "candidate")
    }
    for r in want["arms"]:
        got = cells[r["arm"]]
        for col in ("d_elo", "d_tokens_rel", "d_tokens_rel_lo", "d_tokens_rel_hi"):
            assert float(got[col]) == pytest.approx(r[col], rel=1e-9), col
        assert float(got["acc_base"]) == acc["nightly"][r["arm"]]
        assert float(got["acc_cur"]) == acc["candidate"][r["arm"]]
        assert float(got["d_acc_pp"]) == pytest.approx(
            (acc["candidate"][r["arm"]] - acc["nightly"][r["arm"]]) * 100
        )
    # majority@4 was degraded in the candidate: its accuracy fell
    assert float(cells["majority@4"]["d_acc_pp"]) < 0


def test_compare_pickers_default_to_the_two_newest_runs(site: dict) -> None:
    page = _body(site["v"], "/")
    chosen = dict(re.findall(r'<select name="(\w)">.*?<option value="([^"]*)" selected>', page, re.S))
    assert chosen == {"a": "nightly", "b": "candidate"}  # by started_at, not by name (archive sorts first)


def test_se_column_is_optional_and_the_analysis_s(site: dict) -> None:
    v = site["v"]
    plain = _body(v, "/run/nightly")
    assert 'data-col="accuracy_se"' not in plain and 'id="se-switch"' in plain
    cells = _cells(_body(v, "/run/nightly?se=1"), "accuracy-table")
    for r in site["reports"]["nightly"]["accuracy"]:
        assert 0 < r["accuracy_se"] < 0.2
        assert float(cells[r["arm"]]["accuracy_se"]) == r["accuracy_se"]
    kept = _body(v, "/run/nightly?se=1&budget=2k")  # the budget form keeps the choice
    assert '<input type="hidden" name="se" value="1">' in kept


def test_counts_say_what_they_count(site: dict) -> None:
    """No bare '48 of 48': an unfiltered list says 'all', a filtered one what matched out of what."""
    v, n = site["v"], site["reports"]["nightly"]["counts"]["tasks_with_outcomes"]
    grid = _body(v, "/run/nightly/grid")
    assert f"all {n} tasks of the run." in html.unescape(grid)
    code = html.unescape(_body(v, "/run/nightly/grid?family=code"))
    m = re.search(r'id="grid-count" data-total="(\d+)">(\d+) of the run\'s (\d+) tasks match', code)
    assert m and m.group(1) == m.group(2) and 0 < int(m.group(2)) < n == int(m.group(3))
    jobs = site["reports"]["nightly"]["counts"]["outcomes"]
    assert "all 192 samples (one per job)" in _body(v, "/run/nightly/samples") and jobs == 192
    some = html.unescape(_body(v, "/run/nightly/samples?arm=greedy@1"))
    assert re.search(r"\d+ of the run's 19\d samples match", some), some[:3000]


HOSTILE = st.one_of(st.text(max_size=60), st.sampled_from(["score", "tokens", "task", "1", "0", "", "%00", "-1"]),
                    st.text(st.characters(codec="utf-8"), min_size=2001, max_size=2100))  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sort=HOSTILE, desc=HOSTILE, se=HOSTILE, page=HOSTILE, path=st.sampled_from(["arm", ""]))
def test_hostile_sort_desc_se_params_get_4xx_or_a_page(site: dict, sort: str, desc: str, se: str, page: str,
                                                       path: str) -> None:  # fmt: skip
    """The arm page's sort/desc/page and the run page's se: any value is a page or a 4xx (a 400 names the
    parameter), never a 5xx, each answered within a bound."""
    import time

    query = urlencode({"arm": "greedy@1", "sort": sort, "desc": desc, "se": se, "page": page})
    t0 = time.monotonic()
    r = request(site["v"].port, f"/run/nightly/{path}?{query}" if path else f"/run/nightly?{query}")
    assert time.monotonic() - t0 < 20  # the run's analysis is cached: a request only renders
    assert 200 <= r.status < 500 and r.status not in range(201, 400), (
        r.status,
        r.body[:300],
    )  # 414: a URL too long
    if r.status == 400:
        assert any(f in r.body for f in (b"sort", b"page", b"arm", b"too long")), r.body[:300]
