"""Numbers for people: the one set of formatters of report.md, the headline table and `ept compare`.

A missing value (None or NaN) prints as "—"; a value that rounds to zero never carries a sign ("-0", "+0").
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "—"


def present(x: Any) -> bool:
    """True unless `x` is None or a float NaN.

    Args:
        x: The value (None or NaN: missing).
    """
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def fmt_num(x: Any, nd: int = 0, sign: bool = False) -> str:
    """`x` with `nd` decimals (a leading + when `sign`); "—" when missing.

    Args:
        x: The value (None or NaN: missing).
        nd: Decimals.
        sign: Show a leading + on positive values.
    """
    if not present(x):
        return MISSING
    r = round(float(x), nd)
    if r == 0:  # never "-0" (or "+0"): a zero has no sign
        return f"{0:.{nd}f}"
    return f"{r:+.{nd}f}" if sign else f"{r:.{nd}f}"


def fmt_ci(x: Any, lo: Any, hi: Any, nd: int = 0, sign: bool = False) -> str:
    """`x [lo, hi]` (the interval left out when either end is missing); "—" when `x` is missing.

    Args:
        x: The value (None or NaN: missing).
        lo: The interval's lower end.
        hi: The interval's upper end.
        nd: Decimals.
        sign: Show a leading + on positive values.
    """
    if not present(x):
        return MISSING
    s = fmt_num(x, nd, sign)
    if present(lo) and present(hi):
        s += f" [{fmt_num(lo, nd, sign)}, {fmt_num(hi, nd, sign)}]"
    return s


def fmt_tokens(x: Any, nd: int = 1) -> str:
    """A token count: `12.3k` (nd decimals) from 1000 up, a whole number below; "—" when missing.

    Args:
        x: The value (None or NaN: missing).
        nd: Decimals.
    """
    if not present(x):
        return MISSING
    return f"{x / 1000:.{nd}f}k" if abs(x) >= 1000 else f"{x:.0f}"


def fmt(x: float | None, spec: str) -> str:
    """`format(x, spec)`; "—" for a missing value.

    Args:
        x: The value (None or NaN: missing).
        spec: A format spec (",.0f").
    """
    return MISSING if not present(x) else format(x, spec)
