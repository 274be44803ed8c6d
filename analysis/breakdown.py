"""Per-arm breakdown beside the Elo table: what each arm attempted and how it failed, where its tokens went
(visible output vs reasoning, fresh vs cached input), how often max_tokens cut a reply, and — when prices
are given — what a task costs.

Tokens per task stays the sum of prompt + completion as the server returned them (analysis.tokens); the
split only divides that sum, from the usage details as returned (never recomputed):
  reasoning  completion_tokens_details.reasoning_tokens (inside completion_tokens)
  cached     prompt_tokens_details.cached_tokens (inside prompt_tokens), or Anthropic's
             cache_read_input_tokens (reported beside input_tokens, which excludes it)
Cost per task (USD) = fresh input x price_in + cached input x price_cached_in + completion x price_out,
per 1M tokens; cache writes are priced as fresh input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from numpy.typing import NDArray

from elo_per_token.analysis.tokens import FrameT, strategy_calls
from elo_per_token.contracts.errors import InputError


@dataclass(frozen=True)
class Prices:
    """USD per 1M tokens."""

    input: float
    output: float
    cached_input: float | None = None  # None: cached input priced as fresh input

    @property
    def cached(self) -> float:
        return self.input if self.cached_input is None else self.cached_input


def parse_prices(text: str | None) -> Prices | None:
    """'in=0.15,cached=0.075,out=0.6' (USD per 1M tokens) -> Prices; None when text is empty.

    Args:
        text: The --prices value (None or '': unpriced).
    """
    if not text:
        return None
    vals: dict[str, float] = {}
    for part in text.split(","):
        k, sep, v = part.partition("=")
        k = k.strip()
        if not sep or k not in ("in", "cached", "out"):
            raise InputError(
                f"expected in=X,out=Y[,cached=Z] (USD per 1M tokens), got {part!r}", field="--prices"
            )
        try:
            vals[k] = float(v)
        except ValueError:
            raise InputError(f"{k}: not a number: {v!r}", field="--prices") from None
        if not vals[k] >= 0:
            raise InputError(f"{k}: must be >= 0", field="--prices")
    if "in" not in vals or "out" not in vals:
        raise InputError("both in= and out= are required", field="--prices")
    return Prices(vals["in"], vals["out"], vals.get("cached"))


def _fresh_in() -> pl.Expr:
    # OpenAI counts cached tokens inside prompt_tokens; Anthropic's input_tokens already excludes cache reads.
    openai_cached = (
        pl.when(pl.col("cache_creation_tokens").is_null()).then(pl.col("cached_tokens")).otherwise(0)
    )
    return (
        pl.col("prompt_tokens").fill_null(0)
        - openai_cached.fill_null(0)
        + pl.col("cache_creation_tokens").fill_null(0)
    )


def _input_total() -> pl.Expr:
    """Every input token, cached or not (Anthropic reports cache reads and writes beside input_tokens)."""
    anthropic = pl.col("cache_creation_tokens").is_not_null()
    extra = (
        pl.when(anthropic)
        .then(pl.col("cached_tokens").fill_null(0) + pl.col("cache_creation_tokens"))
        .otherwise(0)
    )
    return pl.col("prompt_tokens").fill_null(0) + extra


def task_costs(calls: FrameT, prices: Prices) -> FrameT:
    """USD per (task, arm), per replicate (the same rule as analysis.tokens.task_tokens).

    Args:
        calls: Call records (eager or lazy).
        prices: USD per 1M tokens.
    """
    c = strategy_calls(calls)
    # Integer token sums per (task, arm), priced once: exact whatever order the rows are summed in (a float
    # sum of per-call USD changed in its last digits with the group_by's partitioning).
    return (
        c.group_by("task_id", "arm")
        .agg(
            _fresh_in().sum().alias("fresh"),
            pl.col("cached_tokens").fill_null(0).sum().alias("cached"),
            pl.col("completion_tokens").fill_null(0).sum().alias("out"),
            pl.col("replicate").n_unique().alias("reps"),
        )
        .select(
            "task_id",
            "arm",
            (
                (
                    pl.col("fresh") * prices.input
                    + pl.col("cached") * prices.cached
                    + pl.col("out") * prices.output
                )
                / 1e6
                / pl.col("reps")
            ).alias("cost"),
        )
        .sort("arm", "task_id")
    )  # one order for every caller, whatever the group_by's partitioning


def _mean_cost(costs: pl.DataFrame) -> pl.DataFrame:
    """Mean cost per task per arm, summed in task order by numpy: polars' float mean over groups changes in
    its last digits with the hash order and the chunking of its input, so report.json would differ run to run."""
    c = costs.sort("arm", "task_id")
    runs = c.with_row_index("i").group_by("arm", maintain_order=True).agg(pl.col("i").first(), pl.len())
    cost = c["cost"].to_numpy()
    sums = np.add.reduceat(cost, runs["i"].to_numpy().astype(np.intp)) if cost.size else np.zeros(0)
    return runs.select("arm", pl.Series("cost_per_task", sums / runs["len"].to_numpy(), dtype=pl.Float64))


def arm_breakdown(frame: pl.DataFrame | pl.LazyFrame, prices: Prices | None = None) -> pl.DataFrame:
    """One row per arm: tasks attempted / answered / lost (scored failures) / unscored failures, the lost
    classes, calls cut by max_tokens, and the token split; `cost_per_task` when prices are given.

    Lazy queries over `frame`: each reads only its columns of the rows it needs (a records frame of a large
    run is never copied whole).

    Args:
        frame: Every record of the analysis (calls and outcomes), eager or lazy.
        prices: USD per 1M tokens (analysis.breakdown.Prices; None: unpriced).
    """
    frame = frame.lazy()
    calls = strategy_calls(frame.filter(pl.col("kind") == "call"))
    outcomes = frame.filter(pl.col("kind") == "outcome")
    tasks = outcomes.group_by("arm").agg(
        pl.col("task_id").n_unique().alias("tasks_attempted"),
        pl.col("task_id")
        .filter(pl.col("score").is_not_null() & ~pl.col("scored_failure"))
        .n_unique()
        .alias("tasks_answered"),
        pl.col("task_id").filter(pl.col("scored_failure")).n_unique().alias("tasks_lost"),
        pl.col("task_id")
        .filter(pl.col("score").is_null() & pl.col("error_class").is_not_null())
        .n_unique()
        .alias("tasks_unscored"),
    )
    lost = (
        outcomes.filter(pl.col("error_class").is_not_null())
        .group_by("arm", "error_class")
        .agg(pl.len().alias("n"))
        .sort("error_class")
        .group_by("arm")
        .agg(pl.format("{}:{}", "error_class", "n").str.join(" ").alias("failed_by_class"))
    )
    tok = calls.group_by("arm").agg(
        pl.len().alias("calls"),
        (pl.col("finish_reason") == "length").sum().cast(pl.Int64).alias("calls_cut_by_max_tokens"),
        pl.col("prompt_tokens").sum().alias("prompt_tokens"),
        pl.col("completion_tokens").sum().alias("completion_tokens"),
        pl.col("reasoning_tokens").sum().alias("reasoning_tokens"),
        pl.col("cached_tokens").sum().alias("cached_tokens"),
        _input_total().sum().alias("input_total"),
    )
    out = (
        tok.join(tasks, on="arm", how="full", coalesce=True)
        .join(lost, on="arm", how="left")
        .with_columns(
            (pl.col("reasoning_tokens") / pl.col("completion_tokens")).alias("reasoning_share"),
            (pl.col("cached_tokens") / pl.col("input_total")).alias("cached_share"),
            pl.col("failed_by_class").fill_null(""),
        )
    )
    if prices is not None:
        per_arm = _mean_cost(task_costs(frame.filter(pl.col("kind") == "call"), prices).collect())
        out = out.join(per_arm.lazy(), on="arm", how="left")
    return out.drop("input_total").sort("arm").collect()


def cost_arrays(
    arms: list[str],
    tokens_per_task: NDArray[np.float64],
    tokens_samples: NDArray[np.float64] | None,
    breakdown: pl.DataFrame,
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """Cost per task per arm in the analysis' arm order, and bootstrap samples of it. The samples scale each
    round's tokens per task by the arm's measured USD per token (its price mix is held fixed across rounds:
    resampling tasks moves how many tokens an arm spends, much more than what its tokens cost).

    Args:
        arms: The analysed arms, in order.
        tokens_per_task: [K] tokens per task.
        tokens_samples: [R, K] bootstrap tokens per task (None: no rounds).
        breakdown: arm_breakdown's frame (cost_per_task).
    """
    cost = dict(zip(breakdown["arm"].to_list(), breakdown["cost_per_task"].to_list(), strict=True))
    c = np.array([np.nan if cost.get(a) is None else float(cost[a]) for a in arms])
    with np.errstate(invalid="ignore", divide="ignore"):
        per_token = c / np.asarray(tokens_per_task, dtype=float)
    samples = None if tokens_samples is None else np.asarray(tokens_samples, dtype=float) * per_token[None, :]
    return c, samples
