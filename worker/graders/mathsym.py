"""math-verify itself, in this process: parse an answer, compare two. Only mathproc's child process calls
these (math-verify's own timeouts need a main thread; the worker's jobs run in threads); the math grader
(mathverify.py) reaches them through mathproc, so neither imports the other's caller.
"""

from __future__ import annotations

import threading
from typing import Any


def _timeout() -> int | None:
    return 5 if threading.current_thread() is threading.main_thread() else None


def _as_latex(text: str) -> str:
    # math-verify's LaTeX extractor looks for math delimiters or \boxed; a bare answer gets both chances.
    t = text.strip()
    if "$" in t or "\\(" in t or "\\[" in t or "\\boxed" in t:
        return t
    return f"${t}$"


def parse_here(text: str) -> list[Any]:
    """math-verify's parse of an answer in this process (sympy objects, then the matched string), [] when
    nothing parses. Unbounded outside a main thread: the worker calls it only through mathproc."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    parsed: list[Any] = parse(
        _as_latex(text),
        extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
        parsing_timeout=_timeout(),
    )
    return parsed


def verify_here(answer: str, reference: Any, got: list[Any] | None = None) -> bool:
    """math-verify's equality in this process (see parse_here)."""
    from math_verify import verify

    gold = parse_here(str(reference))
    got = parse_here(answer) if got is None else got
    if not gold or not got:
        return False
    return bool(verify(gold, got, timeout_seconds=_timeout()))
