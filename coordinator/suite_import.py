"""`ept suites import`: turn common benchmark tables into suite tasks (docs/suites.md, "Import").

Shapes:
* `qa` — a question/answer table (GSM8K, MATH, AIME, trivia …). Question column: question | problem |
  prompt | input | query; answer column: answer | final_answer | expected_answer | target | solution.
  GSM8K's `… #### 72` keeps the part after `####`; a MATH solution keeps its last `\\boxed{}`. Grader
  `auto`: plain numbers -> numeric, answers with math in them (digits, LaTeX, ^ { } = /) -> math
  (math-verify), other text -> normalised.
* `code` — a HumanEval-style table: prompt, entry_point, canonical_solution, and test (a `check(candidate)`
  function) or tests (a list of asserts). Docstring examples become visible tests when the canonical
  solution passes them (run in the sandbox).
Optional columns in both: an id (task_id | id | unique_id | problem_id), family, difficulty (0..1).
Every converted task is validated; an error names the source file, its line (row) and the column.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from elo_per_token.common.atomic import write_atomic
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.tasks import Task

Q_COLS = ("question", "problem", "prompt", "input", "query")
A_COLS = ("answer", "final_answer", "expected_answer", "target", "solution")
ID_COLS = ("task_id", "id", "unique_id", "problem_id")
SHAPES = ("auto", "qa", "code")
GRADERS = ("auto", "numeric", "math", "normalised", "exact")
_MATHY = re.compile(r"[\d\\^{}=/]")


def _pick(columns: set[str], options: tuple[str, ...]) -> str | None:
    return next((c for c in options if c in columns), None)


def detect_shape(rows: list[dict[str, Any]], file: str) -> str:
    cols = set(rows[0]) if rows else set()
    if {"prompt", "entry_point"} <= cols and ({"test", "tests"} & cols):
        return "code"
    if _pick(cols, Q_COLS) and _pick(cols, A_COLS):
        return "qa"
    raise InputError(
        f"cannot tell the table's shape from its columns ({', '.join(sorted(cols)) or 'none'}): a qa table needs "
        f"one of {'/'.join(Q_COLS)} and one of {'/'.join(A_COLS)}; a code table needs prompt, entry_point and "
        "test or tests",
        file=file,
        line=_line(rows[0], 1) if rows else None,
    )


def _line(row: dict[str, Any], index: int) -> int:
    return int(row.get("__line__", index))


def clean_answer(value: Any) -> Any:
    """GSM8K '…#### 1,234' -> 1234; a MATH solution -> its last \\boxed{}; plain numbers become numbers."""
    from elo_per_token.worker.graders.extract import boxed, parse_number
    from elo_per_token.worker.graders.mathverify import is_plain_number

    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        text = value.rsplit("####", 1)[1] if "####" in value else value
        inner = boxed(text)
        text = (inner if inner is not None else text).strip()
        if is_plain_number(text):
            n = parse_number(text)
            return int(n) if n is not None and n.is_integer() and "." not in text else n
        return text
    return value


def auto_grader(answer: Any) -> dict[str, Any]:
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        return {"type": "numeric", "abs_tol": 1e-6}
    return {"type": "math"} if _MATHY.search(str(answer)) else {"type": "normalised"}


def _common(row: dict[str, Any], index: int, family: str, prefix: str) -> dict[str, Any]:
    cols = set(row)
    id_col = _pick(cols, ID_COLS)
    raw_id = row.get(id_col) if id_col else None
    task_id = (
        re.sub(r"[^A-Za-z0-9_.-]+", "-", str(raw_id)).strip("-")
        if raw_id not in (None, "")
        else f"{index:05d}"
    )
    out: dict[str, Any] = {"task_id": f"{prefix}{task_id}", "family": str(row.get("family") or family)}
    if row.get("difficulty") not in (None, ""):
        try:
            out["difficulty"] = float(row["difficulty"])
        except (TypeError, ValueError):
            out["difficulty"] = row["difficulty"]  # validation names the field
    if id_col:
        out["meta"] = {"source_id": raw_id}
    return out


def convert_qa(
    rows: list[dict[str, Any]], file: str, family: str, grader: str = "auto", prefix: str = ""
) -> list[Task]:
    from elo_per_token.contracts.tasks import validate_task

    if not rows:
        raise InputError("table has no rows", file=file)
    cols = set().union(*(set(r) for r in rows))
    q_col, a_col = _pick(cols, Q_COLS), _pick(cols, A_COLS)
    if q_col is None:
        raise InputError(
            f"no question column (one of {', '.join(Q_COLS)})",
            file=file,
            line=_line(rows[0], 1),
            field="question",
        )
    if a_col is None:
        raise InputError(
            f"no answer column (one of {', '.join(A_COLS)})",
            file=file,
            line=_line(rows[0], 1),
            field="answer",
        )
    tasks = []
    for i, row in enumerate(rows, start=1):
        line = _line(row, i)
        q, a = row.get(q_col), clean_answer(row.get(a_col))
        if not isinstance(q, str) or not q.strip():
            raise InputError("empty or not text", file=file, line=line, field=q_col)
        if a is None or (isinstance(a, str) and not a.strip()):
            raise InputError("empty answer", file=file, line=line, field=a_col)
        g = auto_grader(a) if grader == "auto" else {"type": grader}
        if g["type"] == "numeric" and not isinstance(a, int | float):
            raise InputError(
                f"grader numeric needs a number, got {str(a)[:40]!r}", file=file, line=line, field=a_col
            )
        task = {**_common(row, i, family, prefix), "prompt": q.strip(), "reference": a, "grader": g}
        tasks.append(validate_task(task, file, line))
    return _unique(tasks, rows, file)


def convert_code(
    rows: list[dict[str, Any]], file: str, family: str, prefix: str = "", check_visible: bool = True
) -> list[Task]:
    from elo_per_token.contracts.tasks import validate_task
    from elo_per_token.suites.public.humaneval import INSTRUCTION, candidate_examples
    from elo_per_token.worker.graders.code import run_tests

    if not rows:
        raise InputError("table has no rows", file=file)
    tasks = []
    for i, row in enumerate(rows, start=1):
        line = _line(row, i)
        for f in ("prompt", "entry_point"):
            if not isinstance(row.get(f), str) or not row[f].strip():
                raise InputError("required, non-empty text", file=file, line=line, field=f)
        ep, prompt = row["entry_point"].strip(), row["prompt"]
        if isinstance(row.get("test"), str) and row["test"].strip():
            test = row["test"]
            tests = [test + f"\n\ncheck({ep})\n"] if re.search(r"^def check\(", test, re.M) else [test]
        elif isinstance(row.get("tests"), list) and row["tests"]:
            tests = [str(t) for t in row["tests"]]
        else:
            raise InputError(
                "needs 'test' (a check(candidate) function or asserts) or 'tests' (a list)",
                file=file,
                line=line,
                field="test",
            )
        solution = row.get("canonical_solution") or row.get("solution") or row.get("reference")
        if not isinstance(solution, str) or not solution.strip():
            raise InputError(
                "required: the canonical solution (canonical_solution | solution | reference)",
                file=file,
                line=line,
                field="canonical_solution",
            )
        reference = solution if re.search(rf"^def {re.escape(ep)}\(", solution, re.M) else prompt + solution
        visible = candidate_examples(prompt, ep)
        if check_visible:
            visible = [t for t in visible if run_tests(reference, [t], ep)["passed"] == 1]
        task = {
            **_common(row, i, family, prefix),
            "prompt": INSTRUCTION + "```python\n" + prompt.rstrip() + "\n```",
            "reference": reference,
            "grader": {"type": "code", "timeout_s": 5},
            "entry_point": ep,
            "tests": tests,
            "visible_tests": visible,
        }
        tasks.append(validate_task(task, file, line))
    return _unique(tasks, rows, file)


def _unique(tasks: list[Task], rows: list[dict[str, Any]], file: str) -> list[Task]:
    seen: dict[str, int] = {}
    for i, (t, row) in enumerate(zip(tasks, rows, strict=True), start=1):
        line = _line(row, i)
        if t["task_id"] in seen:
            raise InputError(
                f"duplicate task id (first on line {seen[t['task_id']]})",
                file=file,
                line=line,
                field="task_id",
            )
        seen[t["task_id"]] = line
    return tasks


def convert(
    path: Path,
    shape: str = "auto",
    family: str | None = None,
    grader: str = "auto",
    prefix: str = "",
    limit: int | None = None,
    check_visible: bool = True,
) -> tuple[str, list[Task]]:
    """(shape used, converted tasks) for a table file; limit converts only the first rows (dry runs)."""
    from elo_per_token.suites.userfile import read_table

    if shape not in SHAPES:
        raise InputError(f"unknown shape (use {', '.join(SHAPES)})", field="shape")
    if grader not in GRADERS:
        raise InputError(f"unknown grader (use {', '.join(GRADERS)})", field="grader")
    file = str(path)
    rows = read_table(path)
    if not rows:
        raise InputError("table has no rows", file=file)
    rows = rows[:limit] if limit else rows
    shape = detect_shape(rows, file) if shape == "auto" else shape
    fam = family or path.name.split(".")[0]
    if shape == "code":
        return shape, convert_code(rows, file, fam, prefix, check_visible)
    return shape, convert_qa(rows, file, fam, grader, prefix)


def write_jsonl(tasks: list[Task], out: Path) -> None:
    """All or nothing: a temp file in the target folder, renamed over `out` once complete."""
    write_atomic(out, "".join(json.dumps(t, ensure_ascii=False, default=str) + "\n" for t in tasks))
