"""The suites' tool implementations, executed by the worker during a tool-use agent loop.

A task's `tool_impl` maps each offered tool name to {"type": "calculator"},
{"type": "lookup", "table": {table name: {key: value}}} or {"type": "record"} (not run: BFCL tasks are
graded on the calls alone). Results go back to the model as text;
a bad call returns an error text (the model may recover), never an exception. The calculator refuses
expressions past fixed limits (length, terms, nesting, integer size, exponent) before computing anything.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from typing import Any

from elo_per_token.contracts.tasks import Task

_BIN: dict[type[ast.operator], Callable[[Any, Any], int | float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], int | float]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
# Limits on what a model may ask the worker to compute: checked BEFORE each operation, so nothing runs long
# (`((9**999)**999)**10` would hold the GIL for many seconds) or builds numbers too big to print.
MAX_EXPRESSION_CHARS = 2000
MAX_NODES = 1000  # terms + operators
MAX_DEPTH = 200  # nesting of operations (a flat sum of n terms nests n deep)
MAX_INT_BITS = 4000  # ~1200 decimal digits: well under Python's 4300-digit str() limit


class CalculatorLimit(ValueError):
    """The expression is outside the calculator's limits (said in the message, sent back to the model)."""


def _check_size(node: ast.AST) -> None:
    n = 0
    stack = [(node, 0)]
    while stack:
        cur, depth = stack.pop()
        n += 1
        if n > MAX_NODES:
            raise CalculatorLimit(f"expression too long (more than {MAX_NODES} terms and operators)")
        if depth > MAX_DEPTH:
            raise CalculatorLimit(f"expression nested too deeply (more than {MAX_DEPTH} levels)")
        stack.extend((c, depth + 1) for c in ast.iter_child_nodes(cur))


def _bits(v: int | float) -> int:
    return abs(int(v)).bit_length() if isinstance(v, int) else 0


def _guard_binop(op: ast.operator, left: int | float, right: int | float) -> None:
    ints = isinstance(left, int) and isinstance(right, int)
    if isinstance(op, ast.Pow) and abs(right) > 10_000:
        raise CalculatorLimit("exponent too large")
    # |left| ** right has about right * (bits(left) - 1) bits; a product has about bits(left) + bits(right).
    too_big_pow = (
        isinstance(op, ast.Pow)
        and ints
        and right > 0
        and abs(left) > 1
        and right * max(1, _bits(left) - 1) > MAX_INT_BITS
    )
    too_big_mul = isinstance(op, ast.Mult) and ints and _bits(left) + _bits(right) > MAX_INT_BITS + 1
    if too_big_pow or too_big_mul:
        raise CalculatorLimit(f"result too large (more than {MAX_INT_BITS} bits)")


def calculate(expression: str) -> int | float:
    """Exact arithmetic on numbers only (no names, calls or attributes): a safe subset of Python syntax.

    Raises ValueError (CalculatorLimit for size limits), SyntaxError, ZeroDivisionError or OverflowError.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorLimit(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.replace("^", "**").replace("×", "*"), mode="eval")
    except (RecursionError, MemoryError) as e:
        raise CalculatorLimit("expression nested too deeply") from e
    _check_size(tree)

    def ev(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, int | float)
            and not isinstance(node.value, bool)
        ):
            if _bits(node.value) > MAX_INT_BITS:
                raise CalculatorLimit(f"number too large (more than {MAX_INT_BITS} bits)")
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            left, right = ev(node.left), ev(node.right)
            _guard_binop(node.op, left, right)
            return _BIN[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        raise ValueError(f"unsupported syntax: {type(node).__name__}")

    value = ev(tree)
    if isinstance(value, int) and _bits(value) > MAX_INT_BITS:
        raise CalculatorLimit(f"result too large (more than {MAX_INT_BITS} bits)")
    if isinstance(value, complex):
        raise ValueError("result is not a real number")
    return value


def _calculator(args: dict[str, Any]) -> str:
    try:
        value = calculate(str(args.get("expression", "")))
        return json.dumps({"expression": args.get("expression"), "value": value})
    except (ValueError, SyntaxError, ZeroDivisionError, OverflowError, TypeError) as e:
        return f"error: {type(e).__name__}: {str(e)[:200]}"


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


def execute_tool(task: Task, name: str, arguments: str | dict[str, Any]) -> str:
    """Run one tool call of a task; returns the text sent back to the model. Never raises: the arguments
    come from the model, and a tool problem is something the model is told about, not a crash of the job."""
    try:
        return _execute(task, name, arguments)
    except Exception as e:  # a malformed tool_impl in the task file, or a bug: still an answer, not a crash
        return f"error: the tool failed ({type(e).__name__}: {str(e)[:200]})"


def _execute(task: Task, name: str, arguments: str | dict[str, Any]) -> str:
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
        return _calculator(args)
    if impl["type"] == "lookup":
        return _lookup(impl, args)
    return f"error: tool type {impl['type']!r} is not implemented"
