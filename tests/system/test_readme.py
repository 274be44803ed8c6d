"""Every runnable shell block in README.md and docs/*.md runs, as written, on the embedded default.

Marker convention: a fenced block runs when the line just before its opening fence is

    <!-- docs-test: run -->

(an HTML comment: invisible on GitHub). Mark only blocks that make sense offline, on one machine: the built-in
simulator, the local executor, a folder ledger, the files in examples/. Blocks without the marker (docker,
kubectl, real providers, sample output) are documentation only.

Each marked block of a file runs, in order, in one fresh temporary directory holding a copy of examples/ and
profiles.toml, through `bash -e -o pipefail`; any non-zero exit fails the test with the output. `ept` on the
PATH is this checkout's (`python -m elo_per_token`). Three rewrites keep the run small and safe, and only these:

- a leading `pip install -e . &&` / `python3 -m pip install -e '.[dev]' &&` is dropped: the environment running
  the tests already has the package installed (and must not repoint it);
- `ept demo` without options runs as `ept demo --tasks-per-family 4`, and the copied example plans use
  `tasks_per_family = 3`: the same commands on fewer tasks;
- the fixed simulator ports of the docs (8765, 8766) become free ports, and after a line ending in `&` that
  names a port the script waits until the port accepts connections (a person typing the next command does
  that implicitly); background processes are stopped when the block's script exits.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- docs-test: run -->"
DEMO_TASKS = 4
PLAN_TASKS = 3
DOC_PORTS = ("8765", "8766")


def runnable_blocks(text: str) -> list[str]:
    """The bodies of the fenced blocks preceded by the marker line."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        j = i + 1
        if j >= len(lines) or not lines[j].lstrip().startswith("```"):
            raise AssertionError(f"{MARKER} at line {i + 1} is not directly followed by a ``` fence")
        end = next((k for k in range(j + 1, len(lines)) if lines[k].strip().startswith("```")), None)
        if end is None:
            raise AssertionError(f"unclosed fence after {MARKER} at line {i + 1}")
        blocks.append("\n".join(lines[j + 1 : end]))
    return blocks


def documented_files() -> list[Path]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [f for f in files if MARKER in f.read_text(encoding="utf-8")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_INSTALL = re.compile(r"^\s*(python3? -m )?pip install -e (\.|'\.\[dev\]'|\"\.\[dev\]\")\s*&&\s*", re.M)
_BARE_DEMO = re.compile(r"(^|&&\s*|;\s*)ept demo(?=\s*(#|$))", re.M)


def rewrite(script: str, ports: dict[str, int]) -> str:
    """The three rewrites of the module docstring, and nothing else."""
    script = _INSTALL.sub("", script)
    script = _BARE_DEMO.sub(rf"\1ept demo --tasks-per-family {DEMO_TASKS}", script)
    for doc_port, port in ports.items():
        script = script.replace(doc_port, str(port))
    out = []
    for line in script.splitlines():
        out.append(line)
        code = line.split(" #", 1)[0].rstrip()
        if code.endswith("&"):
            for port in ports.values():
                if str(port) in code:
                    out.append(
                        f"for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; "
                        "sleep 0.1; done"
                    )
    return "\n".join(out)


def _workspace(tmp: Path) -> dict[str, str]:
    shutil.copytree(REPO / "examples", tmp / "examples")
    shutil.copy(REPO / "profiles.toml", tmp / "profiles.toml")
    for plan in (tmp / "examples" / "plans").glob("*.toml"):
        text = plan.read_text(encoding="utf-8")
        plan.write_text(re.sub(r"(?m)^tasks_per_family = \d+", f"tasks_per_family = {PLAN_TASKS}", text),
                        encoding="utf-8")  # fmt: skip
    bin_dir = tmp / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "ept"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m elo_per_token "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPT_")}  # a fresh shell: nothing preset
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(REPO), MPLBACKEND="Agg")
    if os.environ.get("EPT_CI"):
        env["EPT_CI"] = os.environ["EPT_CI"]
    return env


def test_marker_parsing_and_rewrites() -> None:
    doc = f"text\n{MARKER}\n```bash\npip install -e . && ept demo\nept simulate --port 8765 &  # bg\n```\n```bash\nnot run\n```\n"
    (block,) = runnable_blocks(doc)
    script = rewrite(block, {"8765": 40001})
    assert script.splitlines()[0] == f"ept demo --tasks-per-family {DEMO_TASKS}"
    assert "--port 40001 &" in script and "/dev/tcp/127.0.0.1/40001" in script
    assert rewrite("ept demo --out x", {}) == "ept demo --out x"  # only the bare command is shrunk


def test_readme_and_docs_have_runnable_blocks() -> None:
    names = {f.name for f in documented_files()}
    assert {"README.md", "sweep.md", "compare.md"} <= names, names


@pytest.mark.slow
@pytest.mark.parametrize("doc", documented_files(), ids=lambda p: p.name)
def test_documented_commands_run(doc: Path, tmp_path: Path) -> None:
    blocks = runnable_blocks(doc.read_text(encoding="utf-8"))
    assert blocks
    env = _workspace(tmp_path)
    ports = {p: _free_port() for p in DOC_PORTS}
    body = "\n".join(rewrite(b, ports) for b in blocks)
    stop = "trap 'rc=$?; kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; exit $rc' EXIT"
    script = f"{stop}\nset -x\n{body}\n"
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=900)  # fmt: skip
    assert r.returncode == 0, (
        f"{doc.name}: exit {r.returncode}\n--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-6000:]}"
    )
