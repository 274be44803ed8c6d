"""The built-in tool_use suite's tools, tables and templates."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from elo_per_token.suites.generate_common import clip, wrong_answers

PER_TEMPLATE_TOOL = 27


_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up a value by key in one of the suite's tables.",
            "parameters": {
                "type": "object",
                "properties": {
                    "table": {"type": "string", "description": "table name"},
                    "key": {"type": "string", "description": "row key"},
                },
                "required": ["table", "key"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression exactly (+ - * / // % ** and parentheses).",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    },
]


def _tables(rng: random.Random) -> dict[str, dict[str, Any]]:
    letters = "BCDFGHJKLMNPQRSTVWXZ"
    parts = {
        f"{rng.choice(letters)}{rng.choice(letters)}-{rng.randint(100, 999)}": rng.randint(40, 5000)
        for _ in range(40)
    }
    towns = ["Arlo", "Benn", "Corve", "Dunmere", "Eskby", "Fallow", "Grint", "Hollin", "Ivers", "Jessop"]
    routes = {f"{a}-{b}": rng.randint(12, 480) for a in towns for b in towns if a < b}
    routes = dict(sorted(routes.items())[:40])
    currencies = {
        c: round(rng.uniform(0.05, 9.5), 4)
        for c in ["ZOL", "KRAV", "MIRN", "TESK", "ULV", "BARRO", "QUIN", "FENT", "OSKA", "PELL"]
    }
    return {"parts": parts, "routes": routes, "rates": currencies}


def tool_tasks(rng: random.Random) -> list[dict[str, Any]]:
    tables = _tables(rng)
    tasks: list[dict[str, Any]] = []

    def add(
        kind: str,
        prompt: str,
        ref: Any,
        table: str | None,
        key: str | None,
        wrong: list[float],
        diff: float,
        tol: float = 1e-6,
        digits: int | None = None,
    ) -> None:
        calls = (
            [{"name": "lookup", "arguments": {"table": table, "key": key}}]
            if table
            else [{"name": "calculator"}]
        )
        impl: dict[str, Any] = {
            "calculator": {"type": "calculator"},
            "lookup": {"type": "lookup", "table": {table: tables[table]} if table else {}},
        }
        tasks.append(
            {
                "task_id": f"tool-{kind}-{sum(t['task_id'].startswith(f'tool-{kind}-') for t in tasks) + 1:03d}",
                "family": "tool_use",
                "prompt": prompt,
                "reference": ref,
                "grader": {
                    "type": "tool",
                    "expect_calls": calls,
                    "answer": {"type": "numeric", "abs_tol": tol, "rel_tol": 0.0},
                },
                "tools": _TOOLS,
                "tool_impl": impl,
                "difficulty": clip(diff + rng.uniform(-0.1, 0.1)),
                "distractors": wrong_answers(ref, wrong, rng, digits),
            }
        )

    _tool_templates(rng, tables, add)
    return tasks


def _tool_templates(rng: random.Random, tables: dict[str, dict[str, Any]], add: Callable[..., None]) -> None:
    """Boxes, convert, courier and calc tasks, PER_TEMPLATE_TOOL each, against the drawn lookup tables."""
    parts, routes, rates = (sorted(tables[k]) for k in ("parts", "routes", "rates"))
    for _ in range(PER_TEMPLATE_TOOL):
        code, k = rng.choice(parts), rng.randint(6, 48)
        stock = tables["parts"][code]
        add(
            "boxes",
            f"Look up the stock of part {code} in the 'parts' table. How many full boxes of {k} units can be "
            "packed from that stock?",
            stock // k,
            "parts",
            code,
            [stock // k + 1, round(stock / k), stock % k],
            0.3,
        )
    for _ in range(PER_TEMPLATE_TOOL):
        cur, amt = rng.choice(rates), rng.randint(20, 900)
        ref = round(amt * tables["rates"][cur], 2)
        add(
            "convert",
            f"Using the 'rates' table (credits per unit of each currency), convert {amt} {cur} into credits. "
            "Give the result to 2 decimal places.",
            ref,
            "rates",
            cur,
            [amt / tables["rates"][cur], ref * 10, amt + tables["rates"][cur]],
            0.45,
            tol=0.011,
            digits=2,
        )
    for _ in range(PER_TEMPLATE_TOOL):
        route, trips = rng.choice(routes), rng.randint(2, 12)
        km = tables["routes"][route]
        add(
            "courier",
            f"A courier drives route {route} (distance in the 'routes' table) there and back {trips} times. "
            "How many kilometres is that in total?",
            2 * km * trips,
            "routes",
            route,
            [km * trips, 2 * km * (trips - 1), 2 * km * trips + km],
            0.4,
        )
    for _ in range(PER_TEMPLATE_TOOL):
        a, b, c, d = (
            rng.randint(1000, 99999),
            rng.randint(100, 9999),
            rng.randint(10, 999),
            rng.randint(2, 97),
        )
        ref = a * b - c * d
        add(
            "calc",
            f"Use the calculator to compute exactly: {a} * {b} - {c} * {d}.",
            ref,
            None,
            None,
            [ref + 10 ** rng.randint(1, 3), a * b, ref - c],
            0.35,
        )
