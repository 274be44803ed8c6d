"""One run, one set of analysis options on every surface: `ept analyze RUN`, `ept report`, `ept compare`
and the viewer start from the options the run's own table used (its manifest: bootstrap rounds, seed,
level, weights, anchor); a surface that uses other options says so in one line (`options_note`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elo_per_token.analysis.pipeline import AnalysisOptions

COMPARE_MIN_ROUNDS = 50  # analysis.compare refuses fewer: its interval needs them
COMPARE_FALLBACK_ROUNDS = 1000  # `ept compare` without a run manifest (plain logs)


def options_note(used: AnalysisOptions, run: AnalysisOptions, source: str, from_run: bool) -> str | None:
    """'these numbers use rounds 1000 (the run's table: 200), …' when `used` differs from the run's own
    options in a setting that changes the numbers; None when they agree or there is no run to agree with.

    Args:
        used: The options the numbers were computed with.
        run: The options the run's own table used.
        source: Where `run` came from (for the note).
        from_run: Whether `run` came from the run's manifest.
    """
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
    table used), else 1000 rounds, seed 0, level 0.95; a note when they differ from either run's table.

    Args:
        baseline: The baseline run.
        current: The current run.
        rounds: --rounds (None: unset).
        seed: --seed (None: unset).
        level: --level (None: unset).
    """
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


def run_options(inputs: list[str]) -> tuple[Any, str]:
    """run_options_info without the flag: (options, where they came from).

    Args:
        inputs: The command's inputs (run folders, URLs or files).
    """
    opts, source, _ = run_options_info(inputs)
    return opts, source


def run_options_info(inputs: list[str]) -> tuple[Any, str, bool]:
    """(options, where they came from, whether from the run's manifest). The settings the run's own table used (from its manifest), and where they came from.

    One run, one set of numbers: `ept demo`/`ept sweep` print the table with the plan's bootstrap rounds and
    seed (200 and 7 for the demo), so the report starts from them too. Plain logs, or several runs, get the
    `ept analyze` defaults. The coordinator records the settings in the manifest as plain data
    (contracts/manifest.py); a manifest written before that is read from its stored plan.

    Args:
        inputs: The command's inputs (run folders, URLs or files).
    """
    from elo_per_token.analysis.io import read_manifest, run_source
    from elo_per_token.analysis.pipeline import AnalysisOptions
    from elo_per_token.contracts.manifest import profile_prices

    src = run_source(inputs[0]) if len(inputs) == 1 else None  # the run itself, not a listing of its files
    # A reader: reporting never creates a bucket, and a wrong endpoint fails at once.
    manifest = read_manifest(src) if src else None
    if src is None or not manifest or not isinstance(manifest.get("plan"), dict):
        return AnalysisOptions(), "the defaults of `ept analyze`", False
    # The run's profile prices, as `ept sweep` used them for its cost table (even when its plan is unreadable).
    profile = manifest.get("profile")
    prices = profile_prices(profile if isinstance(profile, dict) else {})
    stored = manifest.get("analysis")
    if not isinstance(stored, dict) and not isinstance(manifest["plan"].get("name"), str):
        # Not a plan the coordinator wrote (another tool's manifest, a hand-made one): nothing says which
        # settings its table used, so the `ept analyze` defaults, as for plain logs.
        why = f"the defaults of `ept analyze` (run {src.run_id}'s stored plan has no name)"
        return AnalysisOptions(prices=prices), why, False
    settings, problem = _settings(
        stored if isinstance(stored, dict) else manifest["plan"], plan=not isinstance(stored, dict)
    )
    if problem:
        why = f"the defaults of `ept analyze` (run {src.run_id}'s plan: {problem})"
        return AnalysisOptions(prices=prices), why, False
    return AnalysisOptions(**settings, prices=prices), f"run {src.run_id}'s plan, as in its table", True


def _settings(data: dict[str, Any], *, plan: bool) -> tuple[dict[str, Any], str | None]:
    """weights/anchor/rounds/seed for AnalysisOptions from a manifest's `analysis` entry, or (plan=True, an
    older manifest) from its stored plan's fields with the plan's defaults; (…, problem) when a value is bad."""
    import math

    from elo_per_token.contracts.manifest import MAX_BOOTSTRAP_ROUNDS, MAX_SEED, weights_option

    keys = (
        ("weights", "anchor", "bootstrap_rounds", "seed") if plan else ("weights", "anchor", "rounds", "seed")
    )
    weights, anchor, rounds, seed = (data.get(k) for k in keys)
    weights = {} if weights is None else weights
    rounds = 200 if rounds is None and plan else rounds
    seed = 0 if seed is None and plan else seed
    if not isinstance(weights, dict) or not all(
        isinstance(w, int | float) and not isinstance(w, bool) and math.isfinite(w) and w >= 0
        for w in weights.values()
    ):
        return {}, "weights must be a table family = finite weight >= 0"
    if anchor is not None and not isinstance(anchor, str):
        return {}, "anchor must be a string"
    for name, v, hi in (("bootstrap_rounds", rounds, MAX_BOOTSTRAP_ROUNDS), ("seed", seed, MAX_SEED)):
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= hi:
            return {}, f"{name} must be an integer in 0..{hi}"
    level = data.get("level", 0.95)  # the coordinator's tables use 0.95; a manifest may record another
    if not isinstance(level, float) or not 0.5 <= level < 1:
        return {}, "level must be a number in [0.5, 1)"
    out = {"weights": weights_option({str(k): float(w) for k, w in weights.items()}), "anchor": anchor}
    return {**out, "rounds": rounds, "seed": seed, "level": level}, None
