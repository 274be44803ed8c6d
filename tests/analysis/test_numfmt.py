"""The one set of number formatters (analysis/numfmt.py) of report.md, the headline table and `ept compare`."""

from __future__ import annotations

import math
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.analysis.numfmt import fmt, fmt_ci, fmt_num, fmt_tokens


def test_missing_zero_and_signs():
    assert fmt_num(None) == fmt_num(math.nan) == fmt(None, ".1f") == fmt_tokens(math.nan) == "—"
    assert (
        fmt_num(-0.4) == "0" and fmt_num(0.04, 1, sign=True) == "0.0" and fmt_num(2.5, 0, sign=True) == "+2"
    )
    assert fmt_ci(4.6, -0.3, 10.2, sign=True) == "+5 [0, +10]" and fmt_ci(3, None, 4) == "3"
    assert fmt_tokens(12345) == "12.3k" and fmt_tokens(12345, 2) == "12.35k" and fmt_tokens(999) == "999"
    assert fmt(1234.5, ",.0f") == "1,234"


@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=False, width=64) | st.integers(-(10**15), 10**15) | st.none(),
       st.integers(0, 4), st.booleans())  # fmt: skip
def test_any_number_formats_like_the_formatters_it_replaced(x, nd, sign):
    t0 = time.perf_counter()
    s = fmt_num(x, nd, sign)
    assert time.perf_counter() - t0 < 0.5 and len(s) < 330  # 1.8e308 has 309 digits
    if x is None or (isinstance(x, float) and math.isnan(x)):
        assert s == "—"
        return
    # report.py formatted x, report_headline.py formatted round(x, nd): both rules give this string.
    old = f"{0:.{nd}f}" if round(float(x), nd) == 0 else (f"{x:+.{nd}f}" if sign else f"{x:.{nd}f}")
    assert s == old
    assert not s.startswith(("-0", "+0")) or float(s) != 0
