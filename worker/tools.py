"""The suites' tool implementations, executed by the worker during a tool-use agent loop.

A task's `tool_impl` maps each offered tool name to {"type": "calculator"},
{"type": "lookup", "table": {table name: {key: value}}} or {"type": "record"} (not run: BFCL tasks are
graded on the calls alone). Results go back to the model as text;
a bad call returns an error text (the model may recover), never an exception.
"""

from __future__ import annotations

import ast
import json
import operator
from typing import Any

_BIN = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPONENT = 1000  # 10**10**10 would hang the worker


def calculate(expression: str) -> int | float:
    """Exact arithmetic on numbers only (no names, calls or attributes): a safe subset of Python syntax."""

    def ev(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
                raise ValueError("exponent too large")
            return _BIN[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        raise ValueError(f"unsupported syntax: {type(node).__name__}")

    return ev(ast.parse(expression.replace("^", "**").replace("×", "*"), mode="eval"))


def _lookup(spec: dict[str, Any], args: dict[str, Any]) -> str:
    tables = spec.get("table", {})
    table_name = args.get("table")
    if table_name is None and len(tables) == 1:
        table_name = next(iter(tables))
    if table_name not in tables:
        return f"error: unknown table {table_name!r}; tables: {', '.join(sorted(tables))}"
    table = tables[table_name]
    key = str(args.get("key", ""))
    by_norm = {k.strip().lower(): v for k, v in table.items()}
    if key.strip().lower() not in by_norm:
        return f"error: no row {key!r} in table {table_name!r}"
    return json.dumps({"table": table_name, "key": key, "value": by_norm[key.strip().lower()]})


def execute_tool(task: dict[str, Any], name: str, arguments: str | dict[str, Any]) -> str:
    """Run one tool call of a task; returns the text sent back to the model."""
    impl = task.get("tool_impl", {}).get(name)
    if impl is None:
        return f"error: unknown tool {name!r}"
    try:
        args = arguments if isinstance(arguments, dict) else json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return "error: arguments are not valid JSON"
    if not isinstance(args, dict):
        return "error: arguments must be a JSON object"
    if impl["type"] == "record":
        # Graded by the calls themselves (BFCL): nothing runs, the model is told the call was taken.
        return json.dumps({"status": "recorded", "function": name})
    if impl["type"] == "calculator":
        try:
            value = calculate(str(args.get("expression", "")))
        except (ValueError, SyntaxError, ZeroDivisionError, OverflowError, TypeError) as e:
            return f"error: {type(e).__name__}: {e}"
        return json.dumps({"expression": args.get("expression"), "value": value})
    if impl["type"] == "lookup":
        return _lookup(impl, args)
    return f"error: tool type {impl['type']!r} is not implemented"
