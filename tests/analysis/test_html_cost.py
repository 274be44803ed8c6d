"""The HTML report's Cost table says what the terminal says: `cost / task` equals the terminal's $/task for
every arm (it once divided by the task count of the arm's last call role), and `ept report RUN` / `ept analyze
RUN` price the run with its profile's prices."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cli_runner import run_ept
from test_compare import write_ledger_run  # tests/ is on sys.path (rootdir conftest)

PRICES = {"price_in_per_1m": 0.5, "price_out_per_1m": 2.0}


_ept = run_ept  # the CLI in this process (testkit/cli_runner.py)


def _terminal_cost_per_task(stdout: str) -> dict[str, str]:
    """arm -> the $/task cell of the terminal's per-arm table (its last column when priced)."""
    out = {}
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Per arm: tasks"))
    for line in lines[start + 1 :]:
        if line.startswith("└"):
            break
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) > 2 and re.fullmatch(r"\d+\.\d{5}", cells[-1]):
            out[cells[0]] = cells[-1]
    return out


def test_html_cost_per_task_equals_terminal(tmp_path: Path) -> None:
    manifest = {"run_id": "priced", "plan": {"suites": ["math", "code"]},
                "profile": {"name": "simulator", "model": "sim-1", **PRICES}}  # fmt: skip
    run = write_ledger_run(tmp_path / "ledger", "priced", 11, n_tasks=20, manifest=manifest)
    a = _ept("analyze", run, "--rounds", "50", "--out", str(tmp_path / "out"), "--no-plots", cwd=tmp_path)
    assert a.returncode == 0, a.stderr
    terminal = _terminal_cost_per_task(a.stdout)
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert doc["options"]["prices"] == "in=0.5,out=2.0"  # the run's profile prices, without --prices
    assert len(terminal) == len(doc["arms"]) >= 4
    r = _ept("report", run, "--rounds", "50", "--out", str(tmp_path / "r.html"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r.html").read_text()
    table = re.search(r'<table id="cost-table">.*?</table>', page, re.S)
    assert table is not None
    html_cost = {
        arm: format(float(v), ".5f")
        for arm, v in re.findall(
            r'<tr data-arm="([^"]+)">.*?data-col="cost_per_task" data-value="([^"]+)"', table.group(0)
        )
    }
    assert html_cost == terminal
    assert 'id="recommendation"' in page and page.index('id="recommendation"') < page.index('id="returns"')
    for section in ("accuracy-table", "per-strategy-table", "vs-frontier-table", "cost-elo-table"):
        assert f'id="{section}"' in page, section
    # --prices overrides the profile's
    r2 = _ept(
        "report",
        run,
        "--rounds",
        "0",
        "--prices",
        "in=1,out=4",
        "--out",
        str(tmp_path / "r2.html"),
        cwd=tmp_path,
    )
    assert r2.returncode == 0, r2.stderr
    doubled = re.findall(
        r'data-col="cost_per_task" data-value="([^"]+)"',
        re.search(r'<table id="cost-elo-table">.*?</table>', (tmp_path / "r2.html").read_text(), re.S).group(
            0
        ),
    )  # type: ignore[union-attr]
    assert sorted(round(float(v), 9) for v in doubled) == sorted(
        round(2 * float(v), 9) for v in [x for x in doc_costs(doc)]
    )


def doc_costs(doc: dict) -> list[float]:
    return [r["cost_per_task"] for r in doc["cost_table"]]
