"""Generate the built-in suites (math, code, tool_use) deterministically.

    python -m elo_per_token.suites.generate [--out suites/data] [--check]

Every task is written for this project from templates with seeded parameters; references are
computed here (code references are run against their tests, and every buggy distractor is run to
make sure at least one test catches it). `--check` regenerates in memory and fails if the files
on disk differ, so the committed data cannot drift from this script.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SEED = 20261129
PER_TEMPLATE_MATH = 12
PER_TEMPLATE_CODE = 11
PER_TEMPLATE_TOOL = 27


def _clip(x: float) -> float:
    return round(min(0.97, max(0.03, x)), 3)


def _wrong(ref: float, cands: list[float], rng: random.Random, digits: int | None = None) -> list[Any]:
    """Distinct plausible wrong answers (the simulator's error modes), never equal to the reference."""
    out: list[Any] = []
    for c in cands:
        c = round(c, digits) if digits is not None else c
        if isinstance(c, float) and digits is None and c.is_integer():
            c = int(c)
        if abs(c - ref) > 1e-9 and c not in out:
            out.append(c)
    while len(out) < 3:
        c = ref + rng.choice([-2, -1, 1, 2, 10])
        c = round(c, digits) if digits is not None else c
        if c not in out and c != ref:
            out.append(c)
    return out[:4]


# ---------------------------------------------------------------- math


def _math_tasks(rng: random.Random) -> list[dict[str, Any]]:
    names = ["Mia", "Noah", "Ava", "Liam", "Zoe", "Omar", "Lena", "Ravi", "Ines", "Kofi", "Yuki", "Tara"]
    tasks: list[dict[str, Any]] = []

    def add(
        kind: str,
        prompt: str,
        ref: float,
        wrong: list[float],
        diff: float,
        tol: float = 1e-6,
        digits: int | None = None,
    ) -> None:
        ref_v: Any = round(ref, digits) if digits is not None else ref
        if isinstance(ref_v, float) and ref_v.is_integer() and digits is None:
            ref_v = int(ref_v)
        tasks.append(
            {
                "task_id": f"math-{kind}-{sum(t['task_id'].startswith(f'math-{kind}-') for t in tasks) + 1:03d}",
                "family": "math",
                "prompt": prompt,
                "reference": ref_v,
                "grader": {"type": "numeric", "abs_tol": tol, "rel_tol": 0.0},
                "difficulty": _clip(diff),
                "distractors": _wrong(ref_v, wrong, rng, digits),
            }
        )

    _math_word_templates(rng, names, add)
    _math_more_templates(rng, names, add)
    return tasks


def _math_word_templates(rng: random.Random, names: list[str], add: Callable[..., None]) -> None:
    """Change, distance, percent, series and path tasks, PER_TEMPLATE_MATH each (rng order: the suite's bytes)."""
    for _ in range(PER_TEMPLATE_MATH):
        buyer = rng.choice(names)
        p, q, a, b = rng.randint(2, 9), rng.randint(3, 15), rng.randint(2, 9), rng.randint(1, 6)
        bill = 100 if a * p + b * q < 100 else 200
        add(
            "change",
            f"Pencils cost ${p} each and notebooks cost ${q} each. {buyer} buys {a} pencils and {b} notebooks "
            f"and pays with a ${bill} bill. How many dollars of change does {buyer} get?",
            bill - (a * p + b * q),
            [a * p + b * q, bill - (a * p + q), bill - (p + b * q)],
            0.15 + 0.02 * b,
        )
    for _ in range(PER_TEMPLATE_MATH):
        v, w, t1, t2 = rng.randint(40, 120), rng.randint(30, 110), rng.randint(2, 6), rng.randint(1, 5)
        add(
            "distance",
            f"A train travels at {v} km/h for {t1} hours and then at {w} km/h for {t2} hours. "
            "How many kilometres does it travel in total?",
            v * t1 + w * t2,
            [v * t1 + w * t1, (v + w) * (t1 + t2) / 2, v * t2 + w * t1],
            0.2 + 0.01 * t2,
        )
    for _ in range(PER_TEMPLATE_MATH):
        price, up, down = rng.randint(40, 400), rng.choice([10, 15, 20, 25, 30]), rng.choice([10, 20, 25, 40])
        ref = price * (1 + up / 100) * (1 - down / 100)
        add(
            "percent",
            f"A jacket costs ${price}. Its price is raised by {up}% and the new price is then "
            f"discounted by {down}%. What is the final price in dollars (to 2 decimal places)?",
            ref,
            [price * (1 + (up - down) / 100), price * (1 - down / 100), price * (1 + up / 100) - down],
            0.5 + (up + down) / 400,
            tol=0.011,
            digits=2,
        )
    for _ in range(PER_TEMPLATE_MATH):
        a = rng.randint(1, 60)
        b = a + rng.randint(10, 150)
        add(
            "series",
            f"What is the sum of all integers from {a} to {b} inclusive?",
            (a + b) * (b - a + 1) // 2,
            [(a + b) * (b - a) // 2, (a + b - 1) * (b - a + 1) // 2, b * (b + 1) // 2],
            0.3 + (b - a) / 600,
        )
    for _ in range(PER_TEMPLATE_MATH):
        L, W, k = rng.randint(6, 30), rng.randint(4, 20), rng.randint(1, 3)
        add(
            "path",
            f"A rectangular garden is {L} m by {W} m. A path {k} m wide runs all around the outside of "
            "the garden. What is the area of the path in square metres?",
            (L + 2 * k) * (W + 2 * k) - L * W,
            [2 * k * (L + W), (L + k) * (W + k) - L * W, (L + 2 * k) * (W + 2 * k)],
            0.5 + 0.05 * k,
        )


def _math_more_templates(rng: random.Random, names: list[str], add: Callable[..., None]) -> None:
    """Marbles, arithmetic, modpow, pipes and ages tasks, drawn after the word templates from the same rng."""
    for _ in range(PER_TEMPLATE_MATH):
        n, m, who = 6 * rng.randint(3, 25), rng.randint(2, 20), rng.sample(names, 3)
        add(
            "marbles",
            f"{who[0]} has {n} marbles. {who[0]} gives a third of them to {who[1]}, then half of the "
            f"remaining marbles to {who[2]}, and then buys {m} more. How many marbles does {who[0]} have now?",
            n // 3 + m,
            [n // 3, n // 2 + m, 2 * n // 3 + m],
            0.45 + n / 600,
        )
    for _ in range(PER_TEMPLATE_MATH):
        a, b, c, d, e = (
            rng.randint(12, 99),
            rng.randint(12, 99),
            rng.randint(100, 999),
            rng.randint(3, 30),
            rng.randint(3, 30),
        )
        add(
            "arith",
            f"Compute {a} * {b} - {c} + {d} * {e}.",
            a * b - c + d * e,
            [a * b - c - d * e, (a * b - c + d) * e, a * b + c + d * e],
            0.25 + (a * b) / 20000,
        )
    for _ in range(PER_TEMPLATE_MATH):
        a, k, m = rng.randint(2, 12), rng.randint(5, 40), rng.randint(5, 23)
        add(
            "modpow",
            f"What is the remainder when {a}^{k} is divided by {m}?",
            pow(a, k, m),
            [pow(a, k - 1, m), pow(a, k + 1, m), (a * k) % m, (pow(a, k, m) + 1) % m],
            0.6 + k / 120,
        )
    for _ in range(PER_TEMPLATE_MATH):
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        add(
            "pipes",
            f"Pipe A alone fills a tank in {a} hours and pipe B alone fills it in {b} hours. How many hours "
            "do they take to fill the tank together (to 2 decimal places)?",
            a * b / (a + b),
            [(a + b) / 2, abs(a - b) + 0.5, a * b / (a + b + 1)],
            0.55,
            tol=0.011,
            digits=2,
        )
    for _ in range(PER_TEMPLATE_MATH):
        bob, gap, y = rng.randint(5, 40), rng.randint(2, 30), rng.randint(2, 15)
        s = 2 * bob + gap + 2 * y
        add(
            "ages",
            f"Alice is {gap} years older than Bob. In {y} years the sum of their ages will be {s}. "
            "How old is Bob now?",
            bob,
            [bob + gap, (s - gap) // 2, bob + y],
            0.5 + y / 60,
        )


# ---------------------------------------------------------------- code

# The code templates: each draws one variant of a small function task (prompt, solution, two plausible
# bugs, test inputs, difficulty) from `r`.


def sum_multiples(r: random.Random) -> dict[str, Any]:
    a, b = r.sample([3, 4, 5, 6, 7, 9, 11], 2)
    body = "return sum(x for x in range(n) if x % {a} == 0 or x % {b} == 0)"
    return {
        "entry": "sum_multiples",
        "sig": "n",
        "prompt": f"Write a Python function `sum_multiples(n)` that returns the sum of all non-negative integers "
        f"below n that are divisible by {a} or by {b}.",
        "solution": body.format(a=a, b=b),
        "bugs": [
            body.format(a=a, b=b).replace("range(n)", "range(n + 1)"),
            body.format(a=a, b=b).replace(" or ", " and "),
        ],
        "inputs": [10, 20, 0, a * b, 101],
        "diff": 0.35,
    }


def nth_term(r: random.Random) -> dict[str, Any]:
    d = r.randint(2, 9)
    a = r.choice([x for x in range(-5, 21) if x != d])  # a == d would make a bug correct
    return {
        "entry": "nth_term",
        "sig": "k",
        "prompt": f"Write `nth_term(k)` returning the k-th term (1-based) of the arithmetic sequence that starts at "
        f"{a} and increases by {d} each step.",
        "solution": f"return {a} + (k - 1) * {d}",
        "bugs": [f"return {a} + k * {d}", f"return {a} * (k - 1) + {d}"],
        "inputs": [1, 2, 10, 57, 1000],
        "diff": 0.15,
    }


def digit_power_sum(r: random.Random) -> dict[str, Any]:
    p, b = r.randint(2, 5), r.choice([3, 5, 8, 10])
    loop = "total = 0\n    while n:\n        total += {term}\n        n //= {b}\n    return total"
    return {
        "entry": "digit_power_sum",
        "sig": "n",
        "prompt": f"Write `digit_power_sum(n)` that returns the sum of the base-{b} digits of the non-negative "
        f"integer n, each digit raised to the power {p}.",
        "solution": loop.format(term=f"(n % {b}) ** {p}", b=b),
        "bugs": [loop.format(term=f"(n % {b}) * {p}", b=b), loop.format(term=f"(n % {b}) ** {p + 1}", b=b)],
        "inputs": [0, 7, 12, 999, 40213],
        "diff": 0.3 + (0.1 if b != 10 else 0.0),
    }


def rotate_left(r: random.Random) -> dict[str, Any]:
    k = r.randint(3, 16)
    return {
        "entry": "rotate_left",
        "sig": "xs",
        "prompt": f"Write `rotate_left(xs)` returning a new list with the elements of list xs rotated left by {k} "
        "positions (wrapping around; an empty list stays empty).",
        "solution": f"if not xs:\n        return []\n    s = {k} % len(xs)\n    return xs[s:] + xs[:s]",
        "bugs": [
            f"if not xs:\n        return []\n    s = {k} % len(xs)\n    return xs[-s:] + xs[:-s]",
            f"return xs[{k}:] + xs[:{k}]",
        ],
        "inputs": [[1, 2, 3, 4, 5, 6, 7, 8], [], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [9], [1, 2, 3], [1, 2]],
        "diff": 0.45,
    }


def caesar(r: random.Random) -> dict[str, Any]:
    k = r.randint(1, 25)
    sol = f"return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' else c for c in s)"
    return {
        "entry": "caesar",
        "sig": "s",
        "prompt": f"Write `caesar(s)` that shifts every lowercase letter a-z in s forward by {k} places in the "
        "alphabet, wrapping from z to a, and leaves every other character unchanged.",
        "solution": sol,
        "bugs": [
            f"return ''.join(chr(ord(c) + {k}) if 'a' <= c <= 'z' else c for c in s)",
            f"return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) for c in s)",
        ],
        "inputs": ["abc", "", "hello, world!", "xyz", "Mixed Case zz"],
        "diff": 0.5,
    }


def count_in_range(r: random.Random) -> dict[str, Any]:
    lo = r.randint(-10, 10)
    hi = lo + r.randint(3, 20)
    return {
        "entry": "count_in_range",
        "sig": "xs",
        "prompt": f"Write `count_in_range(xs)` returning how many numbers x in the list xs satisfy {lo} <= x < {hi}.",
        "solution": f"return sum(1 for x in xs if {lo} <= x < {hi})",
        "bugs": [
            f"return sum(1 for x in xs if {lo} <= x <= {hi})",
            f"return sum(1 for x in xs if {lo} < x < {hi})",
        ],
        "inputs": [[lo - 1, lo, hi], [], list(range(lo - 3, hi + 3)), [lo + 1, lo + 1], [hi, hi - 1]],
        "diff": 0.3,
    }


def fizz_words(r: random.Random) -> dict[str, Any]:
    a, b = r.sample([2, 3, 4, 5, 7], 2)
    wa, wb = r.sample(["Ping", "Pong", "Zip", "Zap", "Bing", "Bong"], 2)
    sol = (
        f"out = []\n    for i in range(1, n + 1):\n        w = ('{wa}' if i % {a} == 0 else '') + ('{wb}' if i % {b} == 0 else '')\n"
        "        out.append(w or str(i))\n    return out"
    )
    bug1 = (
        f"out = []\n    for i in range(1, n + 1):\n        if i % {a} == 0:\n            out.append('{wa}')\n"
        f"        elif i % {b} == 0:\n            out.append('{wb}')\n        else:\n            out.append(str(i))\n    return out"
    )
    bug2 = sol.replace("range(1, n + 1)", "range(1, n)")
    return {
        "entry": "fizz_words",
        "sig": "n",
        "prompt": f"Write `fizz_words(n)` returning a list of strings for i = 1..n: '{wa}' if i is divisible by {a}, "
        f"'{wb}' if divisible by {b}, '{wa}{wb}' if divisible by both, otherwise str(i).",
        "solution": sol,
        "bugs": [bug1, bug2],
        "inputs": [1, 5, a * b, 0, 2 * a * b + 1],
        "diff": 0.55,
    }


def chunk_sums(r: random.Random) -> dict[str, Any]:
    k, agg = r.randint(2, 7), r.choice(["sum", "max"])
    return {
        "entry": "chunk_aggregate",
        "sig": "xs",
        "prompt": f"Write `chunk_aggregate(xs)` that splits the list xs into consecutive chunks of {k} elements (the "
        f"last chunk may be shorter) and returns the list of the chunks' {'sums' if agg == 'sum' else 'maxima'}.",
        "solution": f"return [{agg}(xs[i:i + {k}]) for i in range(0, len(xs), {k})]",
        "bugs": [
            f"return [{agg}(xs[i:i + {k}]) for i in range(0, len(xs) - {k} + 1, {k})]",
            f"return [{agg}(xs[i:i + {k} - 1]) for i in range(0, len(xs), {k})]",
        ],
        "inputs": [list(range(1, 2 * k + 1)), [], list(range(3 * k + 1)), [5], [1, -1] * k],
        "diff": 0.4,
    }


def pad_left(r: random.Random) -> dict[str, Any]:
    w, ch = r.randint(4, 12), r.choice(["0", "*", ".", "#"])
    return {
        "entry": "pad_left",
        "sig": "s",
        "prompt": f"Write `pad_left(s)` that left-pads the string s with '{ch}' characters to a width of {w}; "
        f"strings of length {w} or more are returned unchanged.",
        "solution": f"return s if len(s) >= {w} else '{ch}' * ({w} - len(s)) + s",
        "bugs": [f"return s + '{ch}' * max(0, {w} - len(s))", f"return '{ch}' * ({w} - len(s)) + s[:{w}]"],
        "inputs": ["ab", "", "x" * w, "y" * (w + 3), "hello"[: max(1, w - 1)]],
        "diff": 0.2,
    }


def weighted_sum(r: random.Random) -> dict[str, Any]:
    base, step = r.randint(0, 5), r.choice([1, 2])
    return {
        "entry": "weighted_sum",
        "sig": "xs",
        "prompt": f"Write `weighted_sum(xs)` returning the sum of xs[i] * ({step} * i + {base}) over all positions i "
        "(0-based) of the list xs.",
        "solution": f"return sum(x * ({step} * i + {base}) for i, x in enumerate(xs))",
        "bugs": [
            f"return sum(x * ({step} * (i + 1) + {base}) for i, x in enumerate(xs))",
            f"return sum(xs) * {base + step}",
        ],
        "inputs": [[1, 2, 3], [], [5], [-2, 4, 0, 7], list(range(10))],
        "diff": 0.25,
    }


def _code_templates() -> list[Callable[[random.Random], dict[str, Any]]]:
    """Every code template, in the order the suite draws them."""
    return [
        sum_multiples,
        nth_term,
        digit_power_sum,
        rotate_left,
        caesar,
        count_in_range,
        fizz_words,
        chunk_sums,
        pad_left,
        weighted_sum,
    ]


def _as_function(entry: str, sig: str, body: str) -> str:
    return f"def {entry}({sig}):\n    {body}\n"


def _run(code: str, entry: str, arg: Any) -> Any:
    ns: dict[str, Any] = {}
    exec(code, ns)
    return ns[entry](arg)


def _code_tasks(rng: random.Random) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = []
    for make in _code_templates():
        seen: set[str] = set()
        made, tries = 0, 0
        while made < PER_TEMPLATE_CODE:
            tries += 1
            if tries > 500:
                raise AssertionError(f"template {make.__name__} has too few distinct variants")
            t = make(rng)
            if t["prompt"] in seen:
                continue
            seen.add(t["prompt"])
            entry = t["entry"]
            solution = _as_function(entry, t["sig"], t["solution"])
            tests = [f"assert {entry}({arg!r}) == {_run(solution, entry, arg)!r}" for arg in t["inputs"]]
            bugs = [_as_function(entry, t["sig"], b) for b in t["bugs"]]
            # A distractor that passes every test would be a correct answer: skip such parameter draws.
            if any(
                all(_safe_eq(b, entry, arg, _run(solution, entry, arg)) for arg in t["inputs"]) for b in bugs
            ):
                continue
            made += 1
            tasks.append(
                {
                    "task_id": f"code-{entry}-{made:03d}",
                    "family": "code",
                    "prompt": t["prompt"] + " Return only the function.",
                    "reference": solution,
                    "grader": {"type": "code", "timeout_s": 5},
                    "entry_point": entry,
                    "tests": tests,
                    "visible_tests": tests[:2],
                    "difficulty": _clip(t["diff"] + rng.uniform(-0.12, 0.12)),
                    "distractors": bugs,
                }
            )
    return tasks


def _safe_eq(code: str, entry: str, arg: Any, want: Any) -> bool:
    try:
        same: bool = _run(code, entry, arg) == want
        return same
    except Exception:
        return False


# ---------------------------------------------------------------- tool use

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


def _tool_tasks(rng: random.Random) -> list[dict[str, Any]]:
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
                "difficulty": _clip(diff + rng.uniform(-0.1, 0.1)),
                "distractors": _wrong(ref, wrong, rng, digits),
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


def generate() -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(SEED)
    return {"math": _math_tasks(rng), "code": _code_tasks(rng), "tool_use": _tool_tasks(rng)}


def _dump(tasks: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(t, sort_keys=True, ensure_ascii=False) + "\n" for t in tasks)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).parent / "data"))
    ap.add_argument(
        "--check", action="store_true", help="fail if the files on disk differ from a fresh generation"
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    suites = generate()
    if args.check:
        stale = [
            n
            for n, ts in suites.items()
            if not (out / f"{n}.jsonl").is_file()
            or (out / f"{n}.jsonl").read_text(encoding="utf-8") != _dump(ts)
        ]
        print("up to date" if not stale else f"stale: {', '.join(stale)}")
        return 1 if stale else 0
    out.mkdir(parents=True, exist_ok=True)
    for name, tasks in suites.items():
        (out / f"{name}.jsonl").write_text(_dump(tasks), encoding="utf-8")
        print(f"{name}: {len(tasks)} tasks -> {out / f'{name}.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
