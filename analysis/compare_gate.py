"""The `--fail-on` gate of `ept compare`: its rule, its parser, the smallest drop the data can detect, and which arms it flags."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.contracts.errors import InputError


@dataclass(frozen=True)
class FailRule:
    """Thresholds of `--fail-on`. An arm is flagged only when the whole interval is past the threshold."""

    elo_drop: float | None = None  # Elo points; flag when the interval's upper bound < -elo_drop
    tokens_rise: float | None = None  # fraction (0.1 = 10%); flag when the interval's lower bound > it
    tokens_rise_abs: float | None = None  # tokens/task; same rule on the absolute change

    def describe(self) -> str:
        parts = []
        if self.elo_drop is not None:
            parts.append(
                f"elo-drop={self.elo_drop:g} (flag when the upper bound of ΔElo < -{self.elo_drop:g})"
            )
        if self.tokens_rise is not None:
            parts.append(
                f"tokens-rise={self.tokens_rise * 100:g}% (flag when the lower bound of the relative "
                f"change in tokens/task > {self.tokens_rise * 100:g}%)"
            )
        if self.tokens_rise_abs is not None:
            parts.append(
                f"tokens-rise={self.tokens_rise_abs:g} (flag when the lower bound of the change in "
                f"tokens/task > {self.tokens_rise_abs:g})"
            )
        return "; ".join(parts) if parts else "none (report only)"


_NUM = r"[0-9]+(?:\.[0-9]*)?"


def parse_fail_on(spec: str | None) -> FailRule:
    """Parse `elo-drop=20,tokens-rise=10%`; `none` or '' gives a report-only rule.

    Args:
        spec: The --fail-on value (None, '' or 'none': report only).
    """
    if spec is None or spec.strip().lower() in ("", "none"):
        return FailRule()
    values: dict[str, Any] = {}
    seen: set[str] = set()
    for item in spec.split(","):
        item = item.strip()
        m = re.fullmatch(rf"(elo-drop|tokens-rise)\s*=\s*({_NUM})\s*(%?)", item)
        if not m:
            raise InputError(
                f"cannot read {item!r}: expected items like elo-drop=20 or tokens-rise=10% (or tokens-rise=500 "
                "for tokens/task), comma-separated",
                field="--fail-on",
            )
        name, num, pct = m.group(1), float(m.group(2)), m.group(3)
        if name in seen:
            raise InputError(f"{name} given twice", field="--fail-on")
        seen.add(name)
        if name == "elo-drop":
            if pct:
                raise InputError("elo-drop is in Elo points, not a percentage", field="--fail-on")
            values["elo_drop"] = num
        elif pct:
            values["tokens_rise"] = num / 100.0
        else:
            values["tokens_rise_abs"] = num
    return FailRule(**values)


POWER = 0.8


def detectable_drop(
    d_samples: NDArray[np.float64], gate_level: float, margin: float | None
) -> NDArray[np.float64]:
    """Per arm, the smallest true drop (Elo) the gate flags with 80% probability at these data's precision.

    With ΔElo estimated with standard error se (the bootstrap sd), the gate flags when the upper bound
    ΔElo + z_g * se is below -margin, z_g the two-sided gate quantile. For a true drop δ that happens with
    probability Φ((δ - margin - z_g * se) / se), which is 80% at δ = margin + (z_g + z_0.8) * se. The runs
    being compared are the best guess of the precision of a run of this size (docs/compare.md). Without an
    elo-drop rule nothing is ever flagged, so the figure is NaN (shown as missing).

    Args:
        d_samples: Bootstrap ΔElo samples [R, K] (current minus baseline).
        gate_level: The two-sided level the gate's intervals are at.
        margin: The elo-drop threshold (None: no elo-drop rule).
    """
    from scipy.stats import norm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        se = np.nanstd(d_samples, axis=0, ddof=1)
    if margin is None:
        return np.full(se.shape, np.nan)
    z_g = float(norm.ppf(1.0 - (1.0 - gate_level) / 2.0))
    drop: NDArray[np.float64] = margin + (z_g + float(norm.ppf(POWER))) * se
    return drop


def apply_rule(table: pl.DataFrame, rule: FailRule) -> tuple[list[str], dict[str, list[str]]]:
    """(arms the rule flags, arm -> the reasons): an arm is flagged when its whole interval is past a threshold.

    Args:
        table: The comparison table, one row per arm.
        rule: The thresholds parsed from --fail-on.
    """
    flagged: list[str] = []
    reasons: dict[str, list[str]] = {}
    for row in table.iter_rows(named=True):  # one row per arm: a handful at most
        why = []
        if (
            rule.elo_drop is not None
            and row["gate_d_elo_hi"] is not None
            and row["gate_d_elo_hi"] < -rule.elo_drop
        ):
            why.append(
                f"Elo dropped {row['d_elo']:+.1f} (gate interval {row['gate_d_elo_lo']:+.1f} .. "
                f"{row['gate_d_elo_hi']:+.1f}, entirely below -{rule.elo_drop:g})"
            )
        if (
            rule.tokens_rise is not None
            and row["gate_d_tokens_rel_lo"] is not None
            and row["gate_d_tokens_rel_lo"] > rule.tokens_rise
        ):
            why.append(
                f"tokens/task rose {row['d_tokens_rel'] * 100:+.1f}% (gate lower bound "
                f"{row['gate_d_tokens_rel_lo'] * 100:+.1f}% > +{rule.tokens_rise * 100:g}%)"
            )
        if (
            rule.tokens_rise_abs is not None
            and row["gate_d_tokens_lo"] is not None
            and row["gate_d_tokens_lo"] > rule.tokens_rise_abs
        ):
            why.append(
                f"tokens/task rose {row['d_tokens']:+.0f} (gate lower bound {row['gate_d_tokens_lo']:+.0f} > "
                f"+{rule.tokens_rise_abs:g})"
            )
        if why:
            flagged.append(row["arm"])
            reasons[row["arm"]] = why
    return flagged, reasons
