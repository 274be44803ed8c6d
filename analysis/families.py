"""The small-family rule, shared by `ept analyze` and `ept compare`.

A family enters the merge when its own task-to-task variance can be estimated from its tasks: the task
bootstrap then gives it an interval (widened for the small sample, analysis.bootstrap.small_sample_factor)
instead of changing the weights the user asked for. The minimum is MIN_TASKS = 5 tasks: a bootstrap of n
tasks has C(2n-1, n) distinct resamples (1, 3, 10, 35, 126 for n = 1..5), and a 95% percentile interval
reads the 2.5% tails, which needs a few dozen distinct values; with 4 tasks or fewer the tails are set by
a handful of atoms (with 1-2 tasks there is no variance to speak of). Below it the family is left out, and
the warning and the table's title say that the weights were renormalised, and to what.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["MIN_TASKS", "WARN_TASKS", "FamilyRule", "small_families"]

MIN_TASKS = 5
WARN_TASKS = 30


@dataclass(frozen=True)
class FamilyRule:
    """The weights after the rule, the families left out and the warnings; `note` is the table-title text
    ('' when nothing was renormalised)."""

    weights: dict[str, float]
    excluded: list[str]
    warnings: list[str]
    asked: dict[str, float]

    @property
    def note(self) -> str:
        if not self.excluded:
            return ""
        kept = ", ".join(f"{f}={w:.2g}" for f, w in self.weights.items() if w > 0)
        asked = ", ".join(f"{f}={w:.2g}" for f, w in self.asked.items() if w > 0)
        return f"weights renormalised to {kept} (asked {asked}; {', '.join(self.excluded)} too small)"


def small_families(
    families: Sequence[str], fw: Mapping[str, float], n_tasks: Mapping[str, int], min_tasks: int = MIN_TASKS
) -> FamilyRule:
    """Apply the rule: weighted families with fewer than min_tasks tasks are left out (weight 0, the rest
    renormalised) when some other weighted family has enough; smaller than WARN_TASKS ones are kept with a
    warning that their intervals are widened.

    Args:
        families: The family names, in index order.
        fw: Family -> weight.
        n_tasks: Family -> its number of tasks.
        min_tasks: Families with fewer tasks are left out of the merge (when another has enough).
    """
    big = [f for f in families if fw[f] > 0 and n_tasks.get(f, 0) >= min_tasks]
    excluded = [f for f in families if fw[f] > 0 and n_tasks.get(f, 0) < min_tasks] if big else []
    weights = dict(fw)
    if excluded:
        kept = sum(fw[f] for f in families if f not in excluded)
        weights = {f: (0.0 if f in excluded else w / kept) for f, w in fw.items()}
    to = ", ".join(f"{f}={w:.2g}" for f, w in weights.items() if w > 0)
    warnings = []
    for f in families:
        n = n_tasks.get(f, 0)
        if f in excluded:
            warnings.append(
                f"family {f}: only {n} task(s), below the minimum of {min_tasks} (--min-tasks; fewer tasks "
                "cannot show their own task-to-task variance): left out of the merge, Elo and tokens per task, "
                f"and the weights renormalised to {to} (its per-family Elo is shown but not trustworthy)"
            )
        elif fw[f] > 0 and n < WARN_TASKS:
            warnings.append(
                f"family {f}: only {n} task(s) (fewer than {WARN_TASKS}): kept at its weight, its intervals are "
                "widened for the small sample but remain approximate"
                + ("; no interval is possible with a single task" if n < 2 else "")
            )
    return FamilyRule(weights=weights, excluded=excluded, warnings=warnings, asked=dict(fw))
