"""The HTML report, rendered by a real headless Chromium: the page's tables read back from the rendered DOM
must equal report.json (written by `ept analyze` on the same run with the same seed)."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from cli_runner import run_ept
from test_compare import ARMS, write_ledger_run  # tests/ is on sys.path (rootdir conftest)

from elo_per_token.analysis.html import render_html
from elo_per_token.analysis.html_document import HtmlDocument

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium not installed (CI installs it)")

PRICES = {"price_in_per_1m": 0.5, "price_out_per_1m": 2.0}
CANARY = "sk-canary-0123456789abcdefWXYZ"


def _chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    ud = tmp / f"chromium-profile-{len(list(tmp.glob('chromium-profile-*')))}"
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={ud}", *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


class Cells(HTMLParser):
    """Collects, per table id, rows of {data-col: (data-value or None, text)} keyed by the row's data-arm."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[tuple[str, dict[str, tuple[str | None, str]]]]] = {}
        self.ids: set[str] = set()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self._table: str | None = None
        self._row: dict | None = None
        self._cell: tuple[str, str | None] | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "table":
            self._table = a.get("id")
            self.tables[self._table] = []
        elif tag == "tr":
            self._row = None
            if self._table and "data-arm" in a:  # body rows of the per-arm tables
                self._row = {}
                self.tables[self._table].append((a["data-arm"], self._row))
        elif tag == "td" and self._row is not None and "data-col" in a:
            self._cell = (a["data-col"], None if a.get("data-null") else a.get("data-value"))
            self._text = ""

    def handle_data(self, data: str) -> None:
        if self._cell:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell and self._row is not None:
            self._row[self._cell[0]] = (self._cell[1], self._text.strip())
            self._cell = None
        elif tag == "table":
            self._table = None


_ept = run_ept  # the CLI in this process (testkit/cli_runner.py)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ledger")
    manifest = {
        "run_id": "nightly",
        "plan": {"suites": ["math", "code"]},
        "profile": {"name": "simulator", "model": "sim-1", **PRICES, "note": f"key {CANARY}"},
    }
    run = Path(write_ledger_run(root, "nightly", 5, n_tasks=25, manifest=manifest, fail_jobs=2))
    # A job that failed for good has no result object, only a failure object (as worker.lifecycle writes it).
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.ledger import FileLedger

    job = Job(
        run_id="nightly", task={"task_id": "math-9999", "family": "math"}, strategy="majority", budget_n=4
    )
    FileLedger(root).put_failure("nightly", job.key, {"job": job.to_dict(), "class": "rate_limit", "message": "429",
                                                        "calls": 2, "tokens": 1234})  # fmt: skip
    return run


@pytest.fixture(scope="module")
def rendered(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("report")
    env_key = "EPT_TEST_CANARY_API_KEY"
    import os

    os.environ[env_key] = CANARY  # scrub() masks the values of secret-looking env vars
    try:
        a = _ept(
            "analyze",
            str(run_dir),
            "--out",
            str(tmp / "out"),
            "--rounds",
            "200",
            "--seed",
            "3",
            "--no-plots",
            cwd=tmp,
        )
        assert a.returncode == 0, a.stderr
        r = _ept(
            "report",
            str(run_dir),
            "--out",
            str(tmp / "report.html"),
            "--rounds",
            "200",
            "--seed",
            "3",
            cwd=tmp,
        )
        assert r.returncode == 0, r.stderr
    finally:
        del os.environ[env_key]
    page = tmp / "report.html"
    out: dict = {
        "tmp": tmp,
        "page": page,
        "json": json.loads((tmp / "out" / "report.json").read_text()),
        "source": page.read_text(),
    }
    if CHROMIUM:
        dom = _chromium(["--dump-dom", page.as_uri()], tmp).stdout
        parser = Cells()
        parser.feed(dom)
        out["dom"] = dom
        out["cells"] = parser
    return out


@needs_chromium
def test_rendered_returns_table_equals_report_json(rendered: dict) -> None:
    cells: Cells = rendered["cells"]
    rows = cells.tables["returns-table"]
    table = rendered["json"]["table"]
    assert [arm for arm, _ in rows] == [r["arm"] for r in table]
    assert {r["arm"] for r in table} == set(ARMS)
    numeric = [
        "tokens_per_task",
        "elo",
        "elo_lo",
        "elo_hi",
        "d_elo",
        "d_elo_lo",
        "d_elo_hi",
        "d_elo_per_1k",
        "d_elo_per_1k_lo",
        "d_elo_per_1k_hi",
    ]
    for (arm, got), want in zip(rows, table, strict=True):
        for col in numeric:
            value, text = got[col]
            if want[col] is None:
                assert value is None and text == "—", (arm, col)
            else:
                assert float(value) == want[col], (arm, col)  # exact: same numbers as report.json
                assert text.replace(",", "").lstrip("+") != ""
                assert float(text.replace(",", "")) == pytest.approx(want[col], abs=0.51), (arm, col)
        # the frontier in words: the point estimate, and 'uncertain' beside it when the band is (issue 40)
        word = "yes" if want["frontier"] else "no"
        band = want.get("frontier_band")
        assert got["frontier_text"][0] == (f"{word}, uncertain" if band == "uncertain" else word), (arm, band)
        assert got["budget_n"][0] is not None and float(got["budget_n"][0]) == want["budget_n"]


@needs_chromium
def test_rendered_family_table_equals_report_json(rendered: dict) -> None:
    rows = rendered["cells"].tables["family-table"]
    want = {(r["family"], r["arm"]): r for r in rendered["json"]["per_family"]}
    assert len(rows) == len(want)
    for _, got in rows:
        w = want[(got["family"][0], got["arm"][0])]
        assert float(got["elo"][0]) == w["elo"]
        assert float(got["theta"][0]) == w["theta"]


@needs_chromium
def test_token_split_cost_and_failures_match_the_ledger(rendered: dict, run_dir: Path) -> None:
    # Independent sums straight from the ledger's JSONL lines.
    calls: dict[tuple[str, str], list[int]] = {}
    failed: dict[tuple[str, str], int] = {}
    for f in run_dir.rglob("*.jsonl"):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec["kind"] == "call":
                c = calls.setdefault((rec["arm"], rec["role"]), [0, 0, 0])
                c[0] += 1
                c[1] += rec["usage"]["prompt_tokens"]
                c[2] += rec["usage"]["completion_tokens"]
            elif rec["kind"] == "outcome" and rec["error"]:
                key = (rec["arm"], rec["error"]["class"])
                failed[key] = failed.get(key, 0) + 1
    cells: Cells = rendered["cells"]
    got = {(r["arm"][0], r["role"][0]): r for _, r in cells.tables["token-table"]}
    assert set(got) == set(calls)
    assert ("best_of_n@8", "verifier") in got
    for key, (n, p, c) in calls.items():
        row = got[key]
        assert float(row["calls"][0]) == n
        assert float(row["prompt_tokens"][0]) == p
        assert float(row["completion_tokens"][0]) == c
        assert float(row["cost"][0]) == pytest.approx(
            (p * PRICES["price_in_per_1m"] + c * PRICES["price_out_per_1m"]) / 1e6
        )
    cost = {r["arm"][0]: float(r["cost"][0]) for _, r in cells.tables["cost-table"]}
    for arm in ARMS:
        p = sum(v[1] for (a, _), v in calls.items() if a == arm)
        c = sum(v[2] for (a, _), v in calls.items() if a == arm)
        assert cost[arm] == pytest.approx((p * 0.5 + c * 2.0) / 1e6)
    fails = {
        (r["arm"][0], r["error_class"][0]): float(r["count"][0]) for _, r in cells.tables["failure-table"]
    }
    failed[("majority@4", "rate_limit")] = 1  # the failure object
    assert fails == failed and sum(failed.values()) == 3
    # Tokens of the job that wrote no result are shown (they are in no other table); the others' are not repeated.
    unrecorded = {
        (r["arm"][0], r["error_class"][0]): float(r["tokens_unrecorded"][0])
        for _, r in cells.tables["failure-table"]
    }
    assert unrecorded.pop(("majority@4", "rate_limit")) == 1234
    assert set(unrecorded.values()) == {0}


@needs_chromium
def test_page_is_self_contained_and_scrubbed(rendered: dict) -> None:
    cells: Cells = rendered["cells"]
    for tag, attrs in cells.tags:
        assert tag not in ("script", "link", "iframe", "img", "object", "embed"), tag
        for name in ("src", "href", "xlink:href"):
            v = attrs.get(name)
            assert v is None or v.startswith(("#", "data:")), (tag, name, v)
    assert {"plot-elo-tokens", "plot-delo-per-1k", "plot-families", "manifest", "failures"} <= cells.ids
    assert rendered["source"].count("<svg") == 3
    assert CANARY not in rendered["source"] and CANARY not in rendered["dom"]
    assert "sk-…WXYZ" in rendered["dom"]  # the manifest is shown, with the key masked
    assert "sim-1" in rendered["dom"]


@needs_chromium
def test_screenshot_renders_a_page(rendered: dict) -> None:
    import matplotlib.image as mpimg

    tmp: Path = rendered["tmp"]
    shot = tmp / "shot.png"
    _chromium(["--window-size=1200,2000", f"--screenshot={shot}", rendered["page"].as_uri()], tmp)
    img = mpimg.imread(shot)
    assert img.shape[:2] == (2000, 1200)
    # Not blank: plenty of non-white pixels (text, tables, plots) and some colour (the plots).
    rgb = img[..., :3]
    non_white = (rgb < 0.9).any(axis=-1).mean()
    coloured = (rgb.max(axis=-1) - rgb.min(axis=-1) > 0.2).mean()
    assert non_white > 0.02 and coloured > 0.002


def test_render_without_prices_or_failures_says_so() -> None:
    doc = HtmlDocument(
        returns=[{"arm": "greedy@1", "tokens_per_task": 100.0, "elo": 1000.0, "frontier": True}]
    )
    page = render_html(doc)
    assert 'id="no-prices"' in page and 'id="no-failures"' in page
    assert 'data-col="elo" data-value="1000.0"' in page


@needs_chromium
def test_rendered_summary_counts_equal_report_json(rendered: dict) -> None:
    import re

    counts = rendered["json"]["counts"]
    found = dict(re.findall(r'<td data-col="([a-z_]+)" data-value="(\d+)">', rendered["dom"]))
    for key in ("tasks", "calls", "outcomes", "ungraded_outcomes", "comparisons"):
        assert int(found[key]) == counts[key], key
    assert counts["ungraded_outcomes"] == 2


@needs_chromium
def test_analyze_html_option_matches_its_own_report_json(run_dir: Path, tmp_path: Path) -> None:
    """`ept analyze --out DIR --html FILE`: one analysis, two outputs; the rendered page equals report.json."""
    r = _ept(
        "analyze",
        str(run_dir),
        "--out",
        str(tmp_path / "out"),
        "--html",
        str(tmp_path / "a.html"),
        "--rounds",
        "100",
        "--seed",
        "9",
        "--no-plots",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    table = json.loads((tmp_path / "out" / "report.json").read_text())["table"]
    parser = Cells()
    parser.feed(_chromium(["--dump-dom", (tmp_path / "a.html").as_uri()], tmp_path).stdout)
    rows = parser.tables["returns-table"]
    assert [a for a, _ in rows] == [t["arm"] for t in table]
    for (_, got), want in zip(rows, table, strict=True):
        for col in ("tokens_per_task", "elo", "elo_lo", "elo_hi", "d_elo_per_1k"):
            value = got[col][0]
            assert (value is None and want[col] is None) or float(value) == want[col], col
