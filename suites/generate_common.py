"""Helpers shared by the suite generators: clipping and wrong-answer distractors."""

from __future__ import annotations

import random
from typing import Any


def clip(x: float) -> float:
    return round(min(0.97, max(0.03, x)), 3)


def wrong_answers(ref: float, cands: list[float], rng: random.Random, digits: int | None = None) -> list[Any]:
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
