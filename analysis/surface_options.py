"""One run, one set of analysis options on every surface: `ept analyze RUN`, `ept report`, `ept compare`
and the viewer start from the options the run's own table used (its manifest: bootstrap rounds, seed,
level, weights, anchor); a surface that uses other options says so in one line (`options_note`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from elo_per_token.analysis.pipeline import AnalysisOptions

COMPARE_MIN_ROUNDS = 50  # analysis.compare refuses fewer: its interval needs them
COMPARE_FALLBACK_ROUNDS = 1000  # `ept compare` without a run manifest (plain logs)


def options_note(used: AnalysisOptions, run: AnalysisOptions, source: str, from_run: bool) -> str | None:
    """'these numbers use rounds 1000 (the run's table: 200), …' when `used` differs from the run's own
    options in a setting that changes the numbers; None when they agree or there is no run to agree with."""
    if not from_run:
        return None
    diffs = [
        f"{name} {u!r} (the run's table: {r!r})"
        for name, u, r in (
            ("bootstrap rounds", used.rounds, run.rounds),
            ("seed", used.seed, run.seed),
            ("level", used.level, run.level),
            ("weights", used.weights, run.weights),
            ("anchor", used.anchor, run.anchor),
        )
        if u != r and not (name == "anchor" and u is None)
    ]
    if not diffs:
        return None
    return f"these numbers use {', '.join(diffs)}: they differ from the table of {source}"


@dataclass(frozen=True)
class CompareOptions:
    """The bootstrap settings of a comparison of two runs, and what the page or terminal says about them."""

    rounds: int
    seed: int
    level: float
    note: str | None


def compare_options(
    baseline: str,
    current: str,
    *,
    rounds: int | None = None,
    seed: int | None = None,
    level: float | None = None,
) -> CompareOptions:
    """`ept compare` and the viewer's compare: unset options from the baseline run's manifest (the options its
    table used), else 1000 rounds, seed 0, level 0.95; a note when they differ from either run's table."""
    from elo_per_token.analysis.cli_report import run_options_info

    base, base_src, base_run = run_options_info([baseline])
    cur, cur_src, cur_run = run_options_info([current])
    r = rounds if rounds is not None else (base.rounds if base_run else COMPARE_FALLBACK_ROUNDS)
    notes = []
    if r < COMPARE_MIN_ROUNDS and rounds is None:
        notes.append(f"the run's table used {r} bootstrap rounds; a comparison needs {COMPARE_MIN_ROUNDS}")
        r = COMPARE_MIN_ROUNDS
    s = seed if seed is not None else base.seed
    lv = level if level is not None else base.level
    for opts, src, is_run in ((base, base_src, base_run), (cur, cur_src, cur_run)):
        if is_run and (opts.rounds, opts.seed, opts.level) != (r, s, lv):
            notes.append(
                f"bootstrap {r} rounds, seed {s}, level {lv:g}; the table of {src} used {opts.rounds} rounds, "
                f"seed {opts.seed}, level {opts.level:g}"
            )
    return CompareOptions(rounds=r, seed=s, level=lv, note="; ".join(notes) or None)
