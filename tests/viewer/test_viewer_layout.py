"""`ept view` in Debian's chromium through Playwright (issue 40): no horizontal page scroll at 800, 1024 and
1400 px (a wide table scrolls inside its own box, its first column sticky; arm names on one line); the sample
explorer sorts, filters and searches a generated 2,000-job run through its UI (deep links in the URL); and the
three questions a reader brings, each answered from the run page in at most 2 clicks. Screenshots go to
EPT_SCREENSHOTS (default ept-out/ci-artifacts/screenshots/), as in test_viewer_browser.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import fixtures_samples
import pytest
from cli_runner import run_ept
from test_compare import write_ledger_run  # tests/ is on sys.path (rootdir conftest)
from test_viewer_browser import CHROMIUM, SHOTS
from view_server import View, request, view

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium not installed (CI installs it)"),
]
WIDTHS = (800, 1024, 1400)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("layout")
    ledger = tmp / "ledger"
    run = write_ledger_run(ledger, "nightly", 5, n_tasks=24, fail_jobs=1)
    write_ledger_run(ledger, "candidate", 6, n_tasks=24, degrade={"majority@4": 0.3})
    fixtures_samples.write_run(ledger, "big", 2000)
    a = run_ept("analyze", run, "--budget", "2k", "--out", str(tmp / "out"), "--no-plots", cwd=tmp)
    assert a.returncode == 0, a.stderr
    with view(ledger) as v:
        for path in ("/run/nightly", "/run/big/samples"):  # analyses made once, before the browser's clock
            assert request(v.port, path).status == 200
        yield {
            "v": v,
            "url": f"http://127.0.0.1:{v.port}",
            "report": json.loads((tmp / "out" / "report.json").read_text()),
            "run": run,
        }


@pytest.fixture(scope="module")
def page(site: dict) -> Iterator:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        pg = browser.new_page(viewport={"width": 1400, "height": 900})
        missing: list[str] = []
        pg.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
        pg.set_default_timeout(120_000)
        yield pg
        assert missing == [], f"responses >= 400 (a missing favicon, an asset): {missing}"
        browser.close()


def _pages(site: dict) -> list[str]:
    v: View = site["v"]
    arm = site["report"]["arms"][-1]
    body = request(v.port, "/run/nightly/samples?sort=score").body.decode()
    job = re.search(r'class="job-link" href="([^"]+)"', body).group(1).replace("&amp;", "&")
    task = re.search(r'<a href="(/run/nightly/task\?[^"]+)"', body).group(1).replace("&amp;", "&")
    return ["/", "/run/nightly", "/run/nightly/samples", "/run/big/samples?q=needle-5+", "/run/nightly/grid",
            f"/run/nightly/arm?arm={arm}", task, job, "/compare?a=nightly&b=candidate"]  # fmt: skip


def test_no_horizontal_page_scroll_at_800_1024_1400(page, site: dict) -> None:
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for i, path in enumerate(_pages(site)):
            page.goto(site["url"] + path)
            over = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            assert over <= 0, (width, path, over)
            # every table wider than the page sits in a box that scrolls it; the box fits the page
            loose = page.eval_on_selector_all(
                "table", "ts => ts.filter(t => t.scrollWidth > t.parentElement.clientWidth + 1 && "
                "getComputedStyle(t.parentElement).overflowX !== 'auto').map(t => t.id)")  # fmt: skip
            assert loose == [], (width, path, loose)
            page.screenshot(path=str(SHOTS / f"40-{width}-{i:02d}.png"), full_page=True)
        page.goto(site["url"] + "/run/nightly")
        # arm names on one line: each arm cell is one line high (no letter-by-letter wrapping)
        tall = page.eval_on_selector_all(
            "#returns-table tbody tr td:first-child, #accuracy-table tbody tr td:first-child",
            "cs => cs.filter(c => c.getBoundingClientRect().height > 2 * parseFloat(getComputedStyle(c).fontSize) + 8)"
            ".map(c => c.textContent)")  # fmt: skip
        assert tall == [], (width, tall)
    page.set_viewport_size({"width": 800, "height": 900})
    page.goto(site["url"] + "/run/big/samples")
    page.eval_on_selector("#samples-table", "t => t.parentElement.scrollLeft = 400")
    sticky = page.eval_on_selector(
        "#samples-table tbody tr td:first-child",
        "c => c.getBoundingClientRect().left - c.closest('.scroll').getBoundingClientRect().left")  # fmt: skip
    assert abs(sticky) < 2, sticky  # the first column stays in view when the table scrolls
    page.screenshot(path=str(SHOTS / "40-800-sticky.png"))


def _keys_and(page, col: str) -> list[float]:
    return page.eval_on_selector_all(
        "#samples-table tbody tr", "(rs, c) => rs.map(r => parseFloat(r.children[c].dataset.value))",
        {"tokens": 5, "score": 4}[col])  # fmt: skip


def test_explorer_sorts_filters_searches_2000_jobs(page, site: dict) -> None:
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(site["url"] + "/run/big/samples")
    assert page.locator("#samples-count").get_attribute("data-total") == "2000"
    page.click("#samples-table th[data-col=tokens] a")
    page.wait_for_url(re.compile(r"sort=tokens"))
    toks = _keys_and(page, "tokens")
    assert toks == sorted(toks) and len(toks) == 500
    page.click("#samples-table th[data-col=tokens] a")  # again: descending
    page.wait_for_url(re.compile(r"desc=1"))
    toks = _keys_and(page, "tokens")
    assert toks == sorted(toks, reverse=True)
    page.select_option("#samples-filter select[name=family]", "code")
    page.select_option("#samples-filter select[name=arm]", "majority@8")
    page.fill("#samples-filter input[name=smax]", "0.5")
    page.click("#samples-filter button")
    page.wait_for_url(re.compile(r"family=code"))
    q = parse_qs(urlsplit(page.url).query)
    assert (
        q["family"] == ["code"]
        and q["arm"] == ["majority@8"]
        and q["sort"] == ["tokens"]
        and q["desc"] == ["1"]
    )
    rows = page.eval_on_selector_all(
        "#samples-table tbody tr", "rs => rs.map(r => [r.children[1].textContent, r.dataset.arm])"
    )
    assert rows and all(r == ["code", "majority@8"] for r in rows)
    assert all(s <= 0.5 for s in _keys_and(page, "score"))
    page.goto(site["url"] + "/run/big/samples")
    page.fill("#samples-filter input[name=q]", "needle-5 ")
    page.click("#samples-filter button")
    page.wait_for_selector("#search-cover")
    n = int(page.locator("#samples-count").get_attribute("data-total"))
    assert 0 < n < 2000 and "transcripts of 2,000" in page.inner_text("#search-cover")
    page.screenshot(path=str(SHOTS / "40-explorer-search.png"), full_page=True)
    deep = page.url  # the same view from its link alone
    page.goto(deep)
    assert int(page.locator("#samples-count").get_attribute("data-total")) == n


def test_which_arm_at_2k_tokens_per_task_in_one_click(page, site: dict) -> None:
    page.goto(site["url"] + "/run/nightly")
    page.fill("#budget-form input[name=budget]", "2k")
    page.click("#budget-form button")  # click 1
    page.wait_for_selector("#budget-pick")
    want = site["report"]["recommendation"]["budget"]
    assert (page.locator("#budget-pick").get_attribute("data-arm") or None) == want["arm"]
    assert page.inner_text("#budget-pick") == want["text"]
    if want["arm"]:
        assert page.locator(f"#returns-table tr[data-budget-pick][data-arm='{want['arm']}']").count() == 1
    page.screenshot(path=str(SHOTS / "40-budget.png"))


def test_why_did_an_arm_lose_a_task_in_two_clicks(page, site: dict) -> None:
    page.goto(site["url"] + "/run/nightly")
    arm = site["report"]["arms"][0]
    page.click(f"#arm-links a.arm-samples[data-arm='{arm}']")  # click 1: its samples, losses first
    page.wait_for_selector("#samples-table")
    first = page.locator("#samples-table tbody tr").first
    task = first.get_attribute("data-task")
    assert float(first.locator("td").nth(4).get_attribute("data-value")) < 1
    first.locator("a.job-link").click()  # click 2: the job: its verdict, answer and transcript
    page.wait_for_selector("#verdict")
    assert float(page.locator("#verdict").get_attribute("data-score")) < 1
    assert arm in page.inner_text("#title") and task in page.inner_text("#title")
    page.screenshot(path=str(SHOTS / "40-why-lost.png"), full_page=True)


def test_an_arms_pass_at_1_with_its_interval_on_the_run_page(page, site: dict) -> None:
    page.goto(site["url"] + "/run/nightly")  # zero clicks: the accuracy table is on the run page
    want = {r["arm"]: r for r in site["report"]["accuracy"]}
    arm = site["report"]["arms"][1]
    row = page.locator(f"#accuracy-table tr[data-arm='{arm}']")
    for col in ("accuracy", "accuracy_lo", "accuracy_hi"):
        assert float(row.locator(f"td[data-col='{col}']").get_attribute("data-value")) == pytest.approx(
            want[arm][col]
        )
    assert "%" in row.locator("td[data-col='accuracy_lo']").inner_text()


def test_budget_control_picks_what_ept_analyze_budget_picks_for_three_budgets(
    page, site: dict, tmp_path
) -> None:
    """Typed into the run page's form and submitted (a click), three budgets that pick different arms (between
    the cheapest two arms, between the middle ones, over all): the page's pick, its sentence and the marked
    row and point are `ept analyze RUN --budget B`'s."""
    toks = sorted(r["tokens_per_task"] for r in site["report"]["table"])
    budgets = [
        f"{(toks[0] + toks[1]) / 2:.0f}",
        f"{(toks[1] + toks[2]) / 2 / 1000:.3f}k",
        f"{toks[-1] * 2:.0f}",
    ]
    picks = []
    for i, b in enumerate(budgets):
        out = tmp_path / f"o{i}"
        r = run_ept("analyze", site["run"], "--budget", b, "--out", str(out), "--no-plots", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        want = json.loads((out / "report.json").read_text())["recommendation"]["budget"]
        page.goto(site["url"] + "/run/nightly")
        page.fill("#budget-form input[name=budget]", b)
        page.click("#budget-form button")
        page.wait_for_url(re.compile(r"budget="))
        assert (page.locator("#budget-pick").get_attribute("data-arm") or None) == want["arm"], b
        assert page.inner_text("#budget-pick") == want["text"]
        if want["arm"]:
            assert page.locator(f"#returns-table tr[data-budget-pick][data-arm='{want['arm']}']").count() == 1
            assert page.locator(f"#elo-plot g.pt.budget-pick[data-arm='{want['arm']}']").count() == 1
        picks.append(want["arm"])
        page.screenshot(path=str(SHOTS / f"40-budget-{i}.png"))
    assert len({p for p in picks if p}) >= 2, picks  # the three budgets are not all one answer


def test_plot_names_do_not_collide_and_the_legend_is_the_line(page, site: dict) -> None:
    """In the browser's own layout: every placed name overlaps no other name and no point; the legend's
    frontier sample is drawn as the frontier line is, in no strategy's colour."""
    page.set_viewport_size({"width": 1024, "height": 900})
    page.goto(site["url"] + "/run/nightly")
    boxes = page.eval_on_selector_all(
        "#elo-plot .pt-label, #elo-plot g.pt circle",
        "es => es.map(e => { const b = e.getBBox(); return [e.tagName, b.x, b.y, b.x + b.width, b.y + b.height,"
        " e.parentNode.dataset.arm]; })")  # fmt: skip
    labels = [b for b in boxes if b[0] == "text"]
    assert len(labels) >= 3, boxes

    def hit(a, b):
        return a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]

    for i, a in enumerate(labels):
        assert not any(hit(a, b) for b in labels[i + 1 :]), a
        assert not any(hit(a, b) for b in boxes if b[0] == "circle"), a
    style = "(e) => { const s = getComputedStyle(e); return [s.stroke, s.strokeDasharray]; }"
    line = page.eval_on_selector("#frontier-line", style)
    key = page.eval_on_selector("#elo-plot .legend-frontier", style)
    assert line == key
    fills = set(
        page.eval_on_selector_all("#elo-plot g.pt circle", "cs => cs.map(c => getComputedStyle(c).fill)")
    )
    assert line[0] not in fills
    page.locator("#plot").screenshot(path=str(SHOTS / "40-plot-labels.png"))


def test_an_arms_pass_at_1_with_its_interval_one_click_away(page, site: dict) -> None:
    """The same question through the arm's page: one click on its name, its summary gives pass@1 with its
    interval (and ± s.e.), Elo, tokens, failures and frontier, all report.json's."""
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(site["url"] + "/run/nightly")
    arm = site["report"]["arms"][1]
    page.click(f"#arm-links a:text-is('{arm}')")  # click 1
    page.wait_for_selector("#arm-summary")
    acc = next(r for r in site["report"]["accuracy"] if r["arm"] == arm)
    row = page.locator("#arm-summary tr[data-key=accuracy] td")
    assert float(row.get_attribute("data-value")) == pytest.approx(acc["accuracy"])
    text = row.inner_text()
    assert f"[{acc['accuracy_lo']:.1%}, {acc['accuracy_hi']:.1%}]" in text and "± " in text
    assert page.inner_text("#arm-summary tr[data-key=accuracy] th") == "pass@1"
    page.click("#arm-tasks th[data-col=score] a")  # the task list sorts: lowest score first
    page.wait_for_url(re.compile(r"sort=score"))
    scores = page.eval_on_selector_all(
        "#arm-tasks tbody td:nth-child(3)[data-value]", "cs => cs.map(c => +c.dataset.value)"
    )
    assert scores == sorted(scores) and len(scores) > 10
    page.screenshot(path=str(SHOTS / "40-arm-page.png"), full_page=True)
