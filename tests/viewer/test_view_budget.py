"""The run page's budget control (issue 40 item 2): `/run/ID?budget=B` names the arm `ept analyze RUN --budget B`
names (the same function, analysis.recommend.recommend_result), for budgets that pick different arms and one
that no arm fits; the arm is marked in the table and the plot; a budget that does not parse is a 400."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest
from cli_runner import run_ept
from test_compare import write_ledger_run  # tests/ is on sys.path (rootdir conftest)
from view_server import request, view

pytestmark = pytest.mark.slow  # five `ept analyze` runs: ~25 s


def _analyze_pick(run: str, budget: str, out: Path) -> dict:
    r = run_ept("analyze", run, "--budget", budget, "--out", str(out), "--no-plots", cwd=out.parent)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "report.json").read_text())["recommendation"]["budget"]


def test_the_page_picks_what_ept_analyze_budget_picks(tmp_path: Path) -> None:
    run = write_ledger_run(tmp_path / "ledger", "nightly", 5, n_tasks=24)
    base = json.loads((_analyze_report(run, tmp_path / "o0")).read_text())
    toks = sorted(r["tokens_per_task"] for r in base["table"])
    # between the cheapest two arms, between the middle ones, over all; and below the cheapest (no arm fits)
    budgets = [f"{(toks[0] + toks[1]) / 2:.0f}", f"{(toks[2] + toks[3]) / 2 / 1000:.3f}k", f"{toks[-1] * 2:.0f}",
               f"{toks[0] / 2:.0f}"]  # fmt: skip
    picks = []
    with view(tmp_path / "ledger") as v:
        for i, b in enumerate(budgets):
            want = _analyze_pick(run, b, tmp_path / f"o{i + 1}")
            r = request(v.port, f"/run/nightly?budget={quote(b)}")
            assert r.status == 200
            body = r.body.decode()
            m = re.search(r'<p id="budget-pick" data-arm="([^"]*)"[^>]*>([^<]*)</p>', body)
            assert m, body[:2000]
            assert (html.unescape(m.group(1)) or None) == want["arm"], b
            assert html.unescape(m.group(2)) == want["text"]
            picks.append(want["arm"])
            if want["arm"]:
                marked = re.findall(r'<tr data-arm="([^"]*)" data-budget-pick="1"', body)
                assert html.unescape(marked[0]) == want["arm"]
                assert f'<g class="pt budget-pick" data-arm="{html.escape(want["arm"], quote=True)}"' in body
        assert len({p for p in picks if p}) >= 2 and picks[-1] is None  # different picks, and none fits
        bad = request(v.port, "/run/nightly?budget=lots")
        assert bad.status == 400 and b"budget" in bad.body


def _analyze_report(run: str, out: Path) -> Path:
    r = run_ept("analyze", run, "--out", str(out), "--no-plots", cwd=out.parent)
    assert r.returncode == 0, r.stderr
    return out / "report.json"


@pytest.mark.parametrize("text", ["2k", "$0.002", "0.5usd"])
def test_budget_pick_is_recommend_results(text: str, tmp_path: Path) -> None:
    """viewer.pages.budget_pick returns recommend_result's budget dict unchanged (one computation)."""
    from elo_per_token.analysis.recommend import parse_budget, recommend_result
    from elo_per_token.viewer.pages import budget_pick
    from elo_per_token.viewer.store import Store

    write_ledger_run(tmp_path, "r", 3, n_tasks=12)
    v = Store(str(tmp_path)).view("r")
    assert budget_pick(v, text) == recommend_result(v.result, parse_budget(text))["budget"]
