"""Rows of the arm, grid and task pages, from an analysis result's records (data in, data out)."""

from __future__ import annotations

from typing import Any

import polars as pl

from elo_per_token.contracts.jobs import job_key

GRID_MAX_ROWS = 2000  # rows drawn in the browser; the count says when more matched


def _outcomes(result: Any) -> pl.DataFrame:
    f: pl.DataFrame = result.records
    return (
        f.lazy()
        .filter(pl.col("kind") == "outcome")
        .select(
            pl.col("task_id").cast(pl.String),
            pl.col("family").cast(pl.String),
            pl.col("arm").cast(pl.String),
            pl.col("replicate").fill_null(0),
            "score",
        )
        .collect()
    )


def _task_tokens(result: Any) -> pl.DataFrame:
    t: pl.DataFrame = result.task_tokens
    return t.select(pl.col("task_id").cast(pl.String), pl.col("arm").cast(pl.String), "tokens")


def task_means(result: Any) -> pl.DataFrame:
    """Per (family, task, arm): mean score, replicates n, tokens per task."""
    o = (
        _outcomes(result)
        .group_by("family", "task_id", "arm")
        .agg(pl.col("score").mean(), pl.len().alias("n"))
    )
    return o.join(_task_tokens(result), on=["task_id", "arm"], how="left").sort("family", "task_id", "arm")


def arm_rows(result: Any, arm: str) -> list[dict[str, Any]]:
    return task_means(result).filter(pl.col("arm") == arm).to_dicts()


def grid(result: Any, family: str | None = None, disagree: bool = False) -> dict[str, Any]:
    """Tasks x arms of mean scores; `disagree`: only tasks where the arms' scores are not all equal."""
    t = task_means(result)
    families = sorted(set(t["family"].to_list()))
    in_run = t["task_id"].n_unique()
    if family:
        t = t.filter(pl.col("family") == family)
    if disagree:
        spread = t.group_by("task_id").agg((pl.col("score").max() - pl.col("score").min()).alias("spread"))
        t = t.join(spread.filter(pl.col("spread") > 0), on="task_id", how="semi")
    tasks = t["task_id"].unique(maintain_order=True).to_list()
    shown = set(tasks[:GRID_MAX_ROWS])
    rows: dict[str, dict[str, Any]] = {}
    for r in t.filter(pl.col("task_id").is_in(list(shown))).iter_rows(named=True):
        rows.setdefault(r["task_id"], {"task_id": r["task_id"], "family": r["family"], "cells": {}})["cells"][
            r["arm"]
        ] = {"score": r["score"], "tokens": r["tokens"]}
    return {
        "arms": list(result.arms),
        "families": families,
        "rows": list(rows.values()),
        "total": len(tasks),
        "in_run": in_run,
        "clipped": len(tasks) > GRID_MAX_ROWS,
    }


def task_rows(result: Any, task_id: str) -> list[dict[str, Any]]:
    """Every (arm, replicate) outcome on the task with its tokens and job key; [] for an unknown task."""
    o = _outcomes(result).filter(pl.col("task_id") == task_id)
    o = o.join(_task_tokens(result), on=["task_id", "arm"], how="left")
    order = {a: i for i, a in enumerate(result.arms)}
    rows = sorted(o.to_dicts(), key=lambda r: (order.get(r["arm"], len(order)), r["replicate"]))
    for r in rows:
        r["job_key"] = job_key(r["family"], r["task_id"], r["arm"], int(r["replicate"]))
    return rows
