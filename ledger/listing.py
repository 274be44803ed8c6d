"""A run's job keys by listing: the one step both the segment reader and the key-space reader need (kept here
so that neither imports the other)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import polars as pl

from elo_per_token.ledger.store import Ledger

__all__ = ["list_keys", "tail_keys"]


def list_keys(
    ledger: Ledger,
    run_id: str,
    on_count: Callable[[int], None] | None = None,
    index: pl.DataFrame | None = None,
) -> pl.Series:
    """Every job key of the run as one String Series (built in batches: a Python list of a million keys is
    ~100 MB, a polars String column a fraction of that). On S3 with an index, the listing is split into
    key ranges at every 20,000th indexed key and the ranges listed in parallel.

    Args:
        ledger: The run's ledger.
        run_id: The run's id.
        on_count: Called with the running count of keys listed (progress).
        index: The committed segments' index: its keys are bounds that split the listing (None: one listing).
    """
    parts: list[pl.Series] = []
    batch: list[str] = []
    n = 0
    if index is not None and index.height >= 40_000:
        bounds = index["job_key"].sort().gather_every(20_000, offset=20_000).to_list()
        keys: Iterator[str] = ledger.iter_job_keys_split(run_id, bounds)
    else:
        keys = ledger.iter_job_keys(run_id)
    for k in keys:
        batch.append(k)
        if len(batch) >= 100_000:
            parts.append(pl.Series("job_key", batch, dtype=pl.String))
            n += len(batch)
            batch = []
            if on_count:
                on_count(n)
    parts.append(pl.Series("job_key", batch, dtype=pl.String))
    return pl.concat(parts) if len(parts) > 1 else parts[0]


def tail_keys(all_keys: pl.Series, index: pl.DataFrame) -> list[str]:
    """The job keys no committed segment holds, sorted.

    Args:
        all_keys: Every job key of the run (list_keys).
        index: The committed segments' index (read_index).
    """
    left = all_keys.to_frame("job_key").join(index.select("job_key"), on="job_key", how="anti")
    return left["job_key"].sort().to_list()
