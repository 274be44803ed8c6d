"""The built-in code suite's templates: each reference is run against its tests, and every buggy distractor is run to make sure at least one test catches it."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from elo_per_token.suites.generate_common import clip

PER_TEMPLATE_CODE = 11


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


def code_tasks(rng: random.Random) -> list[dict[str, Any]]:
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
                    "difficulty": clip(t["diff"] + rng.uniform(-0.12, 0.12)),
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
