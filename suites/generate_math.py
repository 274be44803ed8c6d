"""The built-in math suite's templates (suites.generate runs them with one seeded generator)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from elo_per_token.suites.generate_common import clip, wrong_answers

PER_TEMPLATE_MATH = 12


def math_tasks(rng: random.Random) -> list[dict[str, Any]]:
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
                "difficulty": clip(diff),
                "distractors": wrong_answers(ref_v, wrong, rng, digits),
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
