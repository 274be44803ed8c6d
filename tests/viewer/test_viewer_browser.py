"""`ept view` in a real browser: Playwright driving Debian's chromium (never a downloaded browser) against the
real server over HTTP. Open a run, read its table and check it equals report.json, hover and toggle the
plot, click an arm, open a task, open a transcript, filter the grid, compare two runs. Screenshots are kept
as CI artifacts in ept-out/ci-artifacts/screenshots/ (EPT_SCREENSHOTS overrides the folder)."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_runner import run_ept
from test_compare import write_ledger_run  # tests/ is on sys.path (rootdir conftest)
from view_server import view

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = Path(os.environ.get("EPT_SCREENSHOTS", ROOT / "ept-out" / "ci-artifacts" / "screenshots"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium not installed (CI installs it)"),
]


_ept = run_ept  # the CLI in this process (testkit/cli_runner.py)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("view")
    ledger = tmp / "ledger"
    base = write_ledger_run(ledger, "nightly", 5, n_tasks=24, fail_jobs=1)
    write_ledger_run(ledger, "candidate", 6, n_tasks=24, degrade={"majority@4": 0.3})
    a = _ept("analyze", base, "--out", str(tmp / "out"), "--no-plots", cwd=tmp)
    assert a.returncode == 0, a.stderr
    c = _ept(
        "compare",
        "nightly",
        "candidate",
        "--ledger",
        str(ledger),
        "--rounds",
        "300",
        "--seed",
        "0",
        "--fail-on",
        "none",
        "--json",
        str(tmp / "compare.json"),
        cwd=tmp,
    )
    assert c.returncode == 0, c.stderr
    # testkit/view_server.py: the access log in a file (never an unread pipe), the disk cache in a temp folder,
    # a page budget a loaded machine's first analysis fits in.
    with view(ledger, cwd=tmp) as v:
        yield {
            "url": f"http://127.0.0.1:{v.port}",
            "report": json.loads((tmp / "out" / "report.json").read_text()),
            "compare": json.loads((tmp / "compare.json").read_text()),
            "run": base,
        }


@pytest.fixture(scope="module")
def page(site: dict) -> Iterator:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        outside: list[str] = []
        pg.on(
            "request",
            lambda r: (
                outside.append(r.url)
                if not r.url.startswith(("http://127.0.0.1:", "file://", "data:"))
                else None
            ),
        )  # the viewers only
        pg.set_default_timeout(120_000)  # the first visit of a run analyses it (1000 bootstrap rounds)
        yield pg
        assert outside == [], f"requests outside the viewer (no CDN allowed): {outside}"
        browser.close()


def _cells(page, table: str, col: str) -> dict[str, float]:
    return page.eval_on_selector_all(
        f"#{table} tbody tr",
        "(rows, col) => Object.fromEntries(rows.map(r => [r.dataset.arm, "
        "(r.querySelector(`td[data-col='${col}']`) || {}).dataset?.value]))",
        col,
    )


def test_run_page_table_equals_report_json(page, site: dict) -> None:
    page.goto(site["url"] + "/")
    assert page.locator("#runs-table tbody tr").count() == 2
    page.screenshot(path=str(SHOTS / "01-runs.png"), full_page=True)
    page.click("#runs-table a:text-is('nightly')")
    page.wait_for_selector("#returns-table")
    report = site["report"]
    for col in ("elo", "elo_lo", "elo_hi", "tokens_per_task", "d_elo", "frontier_prob"):
        shown = _cells(page, "returns-table", col)
        want = {r["arm"]: r[col] for r in report["table"]}
        assert set(shown) == set(want)
        for arm, v in want.items():
            if v is None:
                assert shown[arm] is None, (col, arm)
            else:
                assert float(shown[arm]) == pytest.approx(v, rel=1e-12, abs=1e-9), (col, arm)
    assert page.inner_text("#recommendation p") == report["recommendation"]["lines"][0]
    acc = _cells(page, "accuracy-table", "accuracy")
    assert {a: float(v) for a, v in acc.items()} == pytest.approx(
        {r["arm"]: r["accuracy"] for r in report["accuracy"]}
    )
    page.screenshot(path=str(SHOTS / "02-run.png"), full_page=True)


def test_plot_hover_and_toggles(page, site: dict) -> None:
    page.goto(site["url"] + "/run/nightly")
    pts = page.locator("#elo-plot g.pt")
    assert pts.count() == len(site["report"]["arms"])
    first = pts.nth(0)
    first.locator("circle").hover()
    tip = page.locator("#tip")
    assert tip.is_visible() and first.get_attribute("data-arm") in tip.inner_text()
    page.screenshot(path=str(SHOTS / "03-plot-hover.png"))
    strategy = first.get_attribute("data-strategy")
    page.locator(f"#toggles input[data-strategy='{strategy}']").uncheck()
    hidden = page.eval_on_selector_all(
        "#elo-plot g.pt", "(gs, s) => gs.filter(g => g.dataset.strategy === s).map(g => getComputedStyle(g).display)",
        strategy)  # fmt: skip
    assert hidden and set(hidden) == {"none"}
    page.locator("#show-frontier").uncheck()
    assert not page.locator("#frontier-line").is_visible()
    page.screenshot(path=str(SHOTS / "04-plot-toggled.png"))


def test_arm_task_transcript(page, site: dict) -> None:
    page.goto(site["url"] + "/run/nightly")
    arm = site["report"]["arms"][-1]
    page.click(f"#arm-links a:text-is('{arm}')")
    page.wait_for_selector("#arm-tasks")
    assert page.locator("#arm-tasks tbody tr").count() == site["report"]["counts"]["tasks_with_outcomes"]
    page.screenshot(path=str(SHOTS / "05-arm.png"), full_page=True)
    page.locator("#arm-tasks tbody a").first.click()
    page.wait_for_selector("#task-jobs")
    assert page.locator("#task-jobs tbody tr").count() >= len(site["report"]["arms"])
    page.screenshot(path=str(SHOTS / "06-task.png"), full_page=True)
    page.locator(f"#task-jobs tr[data-arm='{arm}'] a.job-link").first.click()
    page.wait_for_selector("#calls-table")
    assert page.locator("#calls-table tbody tr").count() >= 1
    assert page.locator("#verdict").get_attribute("data-score") is not None
    page.screenshot(path=str(SHOTS / "07-job.png"), full_page=True)


def test_grid_filters(page, site: dict) -> None:
    page.goto(site["url"] + "/run/nightly/grid")
    total = page.locator("#grid-table tbody tr").count()
    assert total == site["report"]["counts"]["tasks_with_outcomes"]
    page.check("#grid-filter input[name=disagree]")
    page.click("#grid-filter button")
    page.wait_for_url(re.compile(r"disagree=1"))
    rows = page.eval_on_selector_all(
        "#grid-table tbody tr",
        "rows => rows.map(r => [...r.querySelectorAll('td[data-value]')].map(c => c.dataset.value))",
    )
    assert 0 < len(rows) <= total and all(len(set(r)) > 1 for r in rows)
    page.screenshot(path=str(SHOTS / "08-grid-disagree.png"), full_page=True)


def test_compare_two_runs(page, site: dict) -> None:
    page.goto(site["url"] + "/")
    page.select_option("#compare-form select[name=a]", "nightly")
    page.select_option("#compare-form select[name=b]", "candidate")
    page.click("#compare-form button")
    page.wait_for_selector("#compare-table")
    shown = _cells(page, "compare-table", "d_elo")
    want = {r["arm"]: r["d_elo"] for r in site["compare"]["arms"]}
    assert {a: float(v) for a, v in shown.items()} == pytest.approx(want)
    page.screenshot(path=str(SHOTS / "09-compare.png"), full_page=True)


def test_viewer_is_read_only_and_local(site: dict) -> None:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(site["url"] + "/run/nightly", method="POST", data=b"x")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 405
    with urllib.request.urlopen(site["url"] + "/run/nightly", timeout=120) as r:
        csp = r.headers["Content-Security-Policy"]
        body = r.read().decode()
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert not re.search(r"(src|href)=\"https?://", body)
    for bad in ("/run/..%2F..%2Fetc", "/run/nightly/job?key=../../x", "/run/nightly/task?task=nope", "/nope"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(site["url"] + bad, timeout=60)
        assert e.value.code in (400, 404), bad


def test_tables_fit_a_1400px_window(page, site: dict, tmp_path: Path) -> None:
    """The run page's and the HTML report's tables fit a 1400-px window (no table wider than its box)."""
    r = _ept("report", site["run"], "--rounds", "50", "--out", str(tmp_path / "r.html"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for url in (site["url"] + "/run/nightly", (tmp_path / "r.html").as_uri()):
        page.goto(url)
        wide = page.eval_on_selector_all(
            "table", "ts => ts.filter(t => t.scrollWidth > t.parentElement.clientWidth + 1).map(t => t.id)"
        )
        assert wide == [], (url, wide)
        assert page.eval_on_selector("body", "b => b.scrollWidth <= window.innerWidth")


def test_demo_then_view_shows_the_demo_run(page, tmp_path: Path) -> None:
    """The README's path: `ept demo`, then `ept view` shows the demo run with the table the demo printed
    (its report.json) and a code job's transcript."""
    d = _ept("demo", "--out", str(tmp_path / "out"), "--tasks-per-family", "3", cwd=tmp_path)
    assert d.returncode == 0, d.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "report" / "report.json").read_text())
    with view(tmp_path / "out" / "ledger", cwd=tmp_path) as v:
        url = f"http://127.0.0.1:{v.port}"
        page.goto(url + "/")
        page.click("#runs-table a:text-is('demo-t3')")
        page.wait_for_selector("#returns-table")
        shown = _cells(page, "returns-table", "elo")
        assert {a: float(v) for a, v in shown.items()} == pytest.approx(
            {r["arm"]: r["elo"] for r in report["table"]}
        )
        assert page.inner_text("#recommendation p") == report["recommendation"]["lines"][0]
        page.screenshot(path=str(SHOTS / "10-demo-run.png"), full_page=True)
        page.goto(url + "/run/demo-t3/grid?family=code")
        page.locator("#grid-table tbody a").first.click()
        page.locator("#task-jobs tr[data-arm='greedy@1'] a.job-link").click()
        page.wait_for_selector("#transcript section.call")
        assert "def " in page.inner_text("#transcript .completion")  # the candidate code
        page.screenshot(path=str(SHOTS / "11-demo-transcript.png"), full_page=True)
