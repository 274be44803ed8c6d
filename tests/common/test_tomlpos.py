"""The one TOML line finder (common/tomlpos.py) the plan and profiles loaders name lines with."""

from __future__ import annotations

import time
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.common.tomlpos import toml_line

TEXT = """\
name = "x"
[[arms]]
label = "a"
[[arms]]
label = "b"
budget = 3
[profiles."gpt-4.1"]
model = "m"
[profiles.other]
"""


def test_lines_of_keys_tables_and_headers():
    assert toml_line(TEXT, "name") == 1
    assert toml_line(TEXT, "label", "arms", 1) == 5
    assert (
        toml_line(TEXT, "budget", "arms", 0) == 2
    )  # not in the first [[arms]]: its header, not a later table's key
    assert toml_line(TEXT, "budget", "arms", 1) == 6
    assert toml_line(TEXT, "label", "arms", 2) is None
    assert toml_line(TEXT, "model", ("profiles", "gpt-4.1")) == 8
    assert toml_line(TEXT, None, ("profiles", "other")) == 9
    assert toml_line(TEXT, "model", ("profiles", "other")) == 9
    assert toml_line(TEXT, "missing") is None and toml_line(TEXT, None) is None


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='[]"=.\n ab\\', max_size=3000), st.text(max_size=30), st.text(max_size=30) | st.none(),
       st.integers(0, 5))  # fmt: skip
def test_hostile_text_gives_a_line_in_range_quickly(text, key, table, nth):
    tracemalloc.start()
    t0 = time.perf_counter()
    line = toml_line(text, key, table, nth)
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 2.0 and peak < 5_000_000
    assert line is None or 1 <= line <= max(1, len(text.splitlines()))
