"""BFCL (Berkeley Function Calling Leaderboard) as suite `bfcl`, read from the installed `bfcl-eval` package.

Categories (single-turn, Python, non-live): simple_python, multiple, parallel, parallel_multiple and
irrelevance — questions, function docs and possible answers from `bfcl_eval/data/`. Each entry becomes a
task of family `tool_use` with grader `bfcl`:

* messages: the entry's first turn; tools: the function docs as OpenAI tools, converted the way BFCL
  converts them for OpenAI function calling (types via BFCL's GORILLA_TO_OPENAPI table: dict -> object,
  float -> number, tuple -> array, any -> string; '.' in names -> '_');
* reference: the possible answers (`ground_truth`), `[]` for irrelevance (the right answer is no call);
* tool_impl: `record` — BFCL grades the calls, it does not run them; the worker answers each call with
  a fixed acknowledgement so the agent loop can finish;
* meta.category: the BFCL category (`ept suites list` counts them).

Only reading: importing the whole `bfcl_eval` needs its full dependency set (torch via
sentence-transformers, pinned numpy, several vendor SDKs), so the data is read as files from the
package folder and the AST checker is loaded by worker/graders/bfcl.py with one stub.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.tasks import Task

SUITE = "bfcl"
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
VERSION_PREFIX = "BFCL_v4_"

# BFCL's own type table (bfcl_eval/constants/type_mappings.py), copied so the conversion needs no import.
GORILLA_TO_OPENAPI = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "dict": "object",
    "object": "object",
    "tuple": "array",
    "any": "string",
    "byte": "integer",
    "short": "integer",
    "long": "integer",
    "double": "number",
    "char": "string",
    "ArrayList": "array",
    "Array": "array",
    "HashMap": "object",
    "Hashtable": "object",
    "Queue": "array",
    "Stack": "array",
    "Any": "string",
    "String": "string",
    "Bigint": "integer",
}


def data_path() -> Path:
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(
            "suite 'bfcl' needs the 'bfcl-eval' package (pip install --no-deps bfcl-eval)", field="suite"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _read(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def openai_name(name: str) -> str:
    # OpenAI function names must match ^[a-zA-Z0-9_-]{1,64}$; BFCL replaces '.' with '_' for OpenAI models.
    return re.sub(r"\.", "_", name)


def _schema(node: Any) -> Any:
    """BFCL parameter schema -> JSON schema (types mapped recursively; BFCL-only keys dropped)."""
    if isinstance(node, list):
        return [_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == "type" and isinstance(v, str):
            out[k] = GORILLA_TO_OPENAPI.get(v, "string")
        elif k == "optional":
            continue
        elif k == "properties" and isinstance(v, dict):
            out[k] = {pk: _schema(pv) for pk, pv in v.items()}
        else:
            out[k] = _schema(v)
    return out


def to_tool(fn: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": openai_name(fn["name"]),
            "description": fn.get("description", ""),
            "parameters": _schema(fn.get("parameters", {"type": "dict", "properties": {}})),
        },
    }


def to_task(entry: dict[str, Any], answer: list[dict[str, Any]] | None, category: str) -> dict[str, Any]:
    messages = entry["question"][0]
    tools = [to_tool(f) for f in entry["function"]]
    return {
        "task_id": f"bfcl-{entry['id'].replace('_', '-')}",
        "family": "tool_use",
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "reference": answer if answer is not None else [],
        "difficulty": 0.5,
        "grader": {"type": "bfcl", "category": category},
        "tools": tools,
        "tool_impl": {t["function"]["name"]: {"type": "record"} for t in tools},
        "meta": {
            "source": "bfcl-eval",
            "category": category,
            "bfcl_id": entry["id"],
            "functions": entry["function"],
        },
    }


def load() -> list[Task]:
    from elo_per_token.contracts.tasks import validate_task

    root = data_path()
    out = []
    for cat in CATEGORIES:
        path = root / f"{VERSION_PREFIX}{cat}.json"
        answers = {}
        if cat != "irrelevance":
            answers = {a["id"]: a["ground_truth"] for a in _read(root / "possible_answer" / path.name)}
        for i, entry in enumerate(_read(path), start=1):
            if cat != "irrelevance" and entry["id"] not in answers:
                raise InputError("no possible answer for this entry", file=str(path), line=i, field="id")
            out.append(validate_task(to_task(entry, answers.get(entry["id"]), cat), str(path), i))
    return out


# ------------------------------------------------------------------ what a right / wrong answer looks like

_OMIT = object()


def _pick(options: Any, known: bool = True) -> Any:
    """One acceptable value from BFCL's possible-answer options ('' = the parameter may be left out).
    A parameter the function doc does not know is left out (a few entries list one as optional)."""
    if not isinstance(options, list):
        return _value(options)
    given = [o for o in options if o != ""]
    if not given or not known:
        return _OMIT
    return _value(given[0])


def _value(v: Any) -> Any:
    # Dict values (and dicts inside lists) hold options per key again.
    if isinstance(v, dict):
        return {k: x for k, x in ((k, _pick(o)) for k, o in v.items()) if x is not _OMIT}
    if isinstance(v, list):
        return [_value(x) if isinstance(x, dict) else x for x in v]
    return v


def right_calls(task: Task) -> list[dict[str, Any]]:
    """Calls (OpenAI names, argument dicts) that BFCL's checker accepts: the first given option of each
    parameter of each possible answer."""
    docs = {f["name"]: f for f in task["meta"]["functions"]}
    calls = []
    for gt in task["reference"]:
        for name, params in gt.items():
            props = docs.get(name, {}).get("parameters", {}).get("properties", {})
            args = {
                k: v
                for k, v in ((k, _pick(opts, k in props)) for k, opts in params.items())
                if v is not _OMIT
            }
            calls.append({"name": openai_name(name), "arguments": args})
    return calls


def _off(v: Any) -> Any:
    if isinstance(v, bool):
        return not v
    if isinstance(v, int | float):
        return v + 7
    if isinstance(v, list):
        return [*v, v[0]] if v else ["extra"]
    if isinstance(v, dict):
        return {**v, "unexpected_key": 1}
    return f"{v}_wrong"


def wrong_calls(task: Task, salt: int = 0) -> list[dict[str, Any]]:
    """A plausible miss: irrelevance -> calls a function anyway; else one call dropped (odd salt, parallel
    tasks) or one argument changed to a value outside its possible answers."""
    if not task["reference"]:
        fn = (task.get("tools") or [])[0]["function"]  # a bfcl task has tools (contracts.graders.check_bfcl)
        req = fn.get("parameters", {}).get("required", [])
        return [{"name": fn["name"], "arguments": dict.fromkeys(req, 1)}]
    calls = right_calls(task)
    if len(calls) > 1 and salt % 2:
        return calls[:-1]
    i = salt % len(calls)
    options = next(iter(task["reference"][i].values()))
    args = dict(calls[i]["arguments"])
    keys = sorted(args)
    for k in (
        keys[salt % max(1, len(keys)) :] + keys[: salt % max(1, len(keys))]
    ):  # deterministic, salt-rotated
        bad = _off(args[k])
        if bad not in options.get(k, []):
            args[k] = bad
            return [{**c, "arguments": args} if j == i else c for j, c in enumerate(calls)]
    return [{**c, "name": c["name"] + "_x"} if j == i else c for j, c in enumerate(calls)]
