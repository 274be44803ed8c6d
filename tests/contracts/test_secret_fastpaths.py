"""The worker's fast paths in contracts.secrets mask exactly what the full search masks: strings too short to
hold a secret skip it, `_mask_runs` returns early when no block of the secret occurs, and the environment's
secrets are recomputed whenever the environment changes (never served stale)."""

from __future__ import annotations

from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.contracts import secrets as S

_TOKEN = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEF0123456789-_"), min_size=12, max_size=64)


def _runs_reference(text: str, s: str) -> str:
    """The run masking without its early exits (every block searched, the bitmap always scanned)."""
    covered = bytearray(len(text))
    for o in sorted({*range(0, len(s) - S._BLOCK + 1, S._BLOCK), len(s) - S._BLOCK}):
        block, at = s[o : o + S._BLOCK], 0
        while (p := text.find(block, at)) != -1:
            a = p - S._agree(text, p, s, o, forward=False)
            b = p + S._BLOCK + S._agree(text, p + S._BLOCK, s, o + S._BLOCK, forward=True)
            if b - a >= S.RUN_CHARS:
                covered[a:b] = b"\1" * (b - a)
            at = p + 1
    out, i = [], 0
    while (a := covered.find(1, i)) != -1:
        b = covered.find(0, a)
        b = len(text) if b == -1 else b
        out += [text[i:a], S._RUN_MASK]
        i = b
    return "".join([*out, text[i:]])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(secret=_TOKEN, data=st.data())
def test_run_masking_matches_the_full_search(secret: str, data) -> None:
    pieces = data.draw(st.lists(st.one_of(st.text(max_size=30), st.builds(lambda a, b: secret[a:b],
                                          st.integers(0, 64), st.integers(0, 64))), max_size=8))  # fmt: skip
    text = "".join(pieces)
    got = bounded(lambda: S._mask_runs(text, secret), 0.5, 5)
    assert got == _runs_reference(text, secret)


@given(text=st.text(max_size=S.MIN_SECRET_CHARS - 1))
def test_short_strings_cannot_hold_a_secret(text: str) -> None:
    """Every secret, encoded form and run is at least MIN_SECRET_CHARS long: nothing shorter changes."""
    known = S._compile(("sk-" + "a1b2c3d4e5f6g7h8",))
    assert all(len(f) >= S.MIN_SECRET_CHARS for f, _ in known.forms)
    assert known.mask_values(text) == text


def test_environment_secrets_follow_the_environment(monkeypatch) -> None:
    """A secret set after a first scrub is masked at once; one removed is no longer a secret."""
    first, second = "tok-" + "q9w8e7r6t5y4u3", "tok-" + "z1x2c3v4b5n6m7"
    monkeypatch.setenv("EPT_TEST_FAST_TOKEN", first)
    assert first not in S.scrub(f"a {first} b")
    monkeypatch.setenv("EPT_TEST_FAST_TOKEN", second)
    out = S.scrub(f"a {first} b {second}")
    assert second not in out and first in out
    monkeypatch.delenv("EPT_TEST_FAST_TOKEN")
    assert S.scrub(f"a {second} b") == f"a {second} b"
