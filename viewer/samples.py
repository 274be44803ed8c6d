"""The sample explorer's data: one row per job (task, arm, replicate) of a run, and the query over it.

The rows come from the analysis' records frame (the table the store already loaded for the run page): the
outcome line gives the score and error class, the job's strategy calls give its tokens (the rule of
analysis.tokens.task_tokens: judge calls excluded, unknown when a call has no usage) and, when the run is
priced, its cost (analysis.breakdown's pricing of fresh, cached and output tokens). The final answer's text
and the calls' latency are not in that frame: they are read once per run state from the job objects, at most
ANSWER_READ_BYTES of each, and only for runs of up to SIDE_MAX_JOBS jobs (a larger run shows "—").

A query (filter, sort, page, search) is validated field by field (InputError naming the parameter) and run
as polars expressions over that frame. The search looks in the final answers of every row matched, and in
the stored transcripts (prompts, completions, reasoning, tool traffic) of the matched rows in the page's
order until SEARCH_MAX_BYTES of transcript text have been scanned; the page says when it stopped there.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from elo_per_token.contracts.errors import InputError

SIDE_MAX_JOBS = 200_000  # answers and latency are read for runs of up to this many jobs
ANSWER_READ_BYTES = 64 * 1024  # bytes of one job object read for its answer and latencies
ANSWER_KEEP_CHARS = 2_000  # characters of a final answer kept (searched; the snippet is their start)
SNIPPET_CHARS = 120
SEARCH_MAX_BYTES = 8 * 2**20  # transcript text scanned per request
MAX_QUERY_CHARS = 200  # a search term
TEXT_CACHE_BYTES = 64 * 2**20  # transcript texts kept between requests (speed only: never changes results)

COLUMNS: dict[str, str] = {  # column -> header, in display order; every one sortable
    "task_id": "task", "family": "family", "arm": "arm", "replicate": "rep", "score": "score",
    "tokens": "tokens", "cost": "$", "latency_s": "latency s", "error_class": "error", "answer": "final answer",
}  # fmt: skip
ANY_ERROR, NO_ERROR = "(any)", "(none)"  # error filter values beside the classes themselves


@dataclass(frozen=True)
class Query:
    """One explorer request: filters, search, sort and page (all optional but the page)."""

    family: str | None = None
    arm: str | None = None
    score_min: float | None = None
    score_max: float | None = None
    error: str | None = None
    disagree: bool = False
    q: str | None = None
    sort: str = "task_id"
    desc: bool = False
    page: int = 1

    def params(self, **change: Any) -> dict[str, Any]:
        """The query as URL parameters (defaults left out), with `change` applied: the deep link of a view."""
        d = replace(self, **change)
        out = {
            "family": d.family,
            "arm": d.arm,
            "smin": _num_text(d.score_min),
            "smax": _num_text(d.score_max),
            "error": d.error,
            "disagree": "1" if d.disagree else None,
            "q": d.q,
            "sort": None if d.sort == "task_id" else d.sort,
            "desc": "1" if d.desc else None,
            "page": None if d.page == 1 else d.page,
        }
        return {k: v for k, v in out.items() if v is not None}


def _num_text(x: float | None) -> str | None:
    return None if x is None else f"{x:g}"


def _score(raw: str | None, name: str) -> float | None:
    if raw is None:
        return None
    try:
        x = float(raw)
    except ValueError:
        raise InputError(f"must be a number, got {raw[:40]!r}", field=name) from None
    if not math.isfinite(x):
        raise InputError(f"must be a finite number, got {raw[:40]!r}", field=name)
    return x


def parse_query(one: Callable[[str], str | None], page: int) -> Query:
    """The query from the request's parameters (`one(name)`: its value or None); InputError naming the
    parameter for a bad one: an unknown sort column, a score bound that is not a finite number, a search
    term over MAX_QUERY_CHARS, a flag other than 1."""
    sort = one("sort") or "task_id"
    if sort not in COLUMNS:
        raise InputError(f"must be one of {', '.join(COLUMNS)}, got {sort[:40]!r}", field="sort")
    flags = {}
    for name in ("disagree", "desc"):
        raw = one(name)
        if raw not in (None, "1", "0"):
            raise InputError(f"must be 1 or 0, got {raw[:40]!r}", field=name)
        flags[name] = raw == "1"
    q = one("q")
    if q is not None and len(q) > MAX_QUERY_CHARS:
        raise InputError(f"at most {MAX_QUERY_CHARS} characters, got {len(q)}", field="q")
    return Query(
        family=one("family"),
        arm=one("arm"),
        score_min=_score(one("smin"), "smin"),
        score_max=_score(one("smax"), "smax"),
        error=one("error"),
        disagree=flags["disagree"],
        q=q if q and q.strip() else None,
        sort=sort,
        desc=flags["desc"],
        page=page,
    )


def job_frame(records: pl.DataFrame, prices: Any = None) -> pl.DataFrame:
    """One row per job (its outcome line): task_id, family, arm, replicate, score, error_class, tokens, cost,
    job_key, and `disagree` (the arms' mean scores on the task are not all equal, the grid's rule)."""
    from elo_per_token.analysis.breakdown import _fresh_in
    from elo_per_token.analysis.tokens import _TOTAL, strategy_calls

    key = pl.col("file").cast(pl.String).str.extract(r"([^/]+/[^/]+/[^/]+/[^/]+)\.jsonl$").alias("job_key")
    calls = strategy_calls(records.lazy().filter(pl.col("kind") == "call"))
    cost = (
        (pl.col("fresh") * prices.input + pl.col("cached") * prices.cached + pl.col("out") * prices.output)
        / 1e6
        if prices is not None
        else pl.lit(None, pl.Float64)
    )
    per_job = calls.group_by("file").agg(
        _TOTAL.sum().cast(pl.Float64).alias("tokens"),
        _fresh_in().sum().alias("fresh"),
        pl.col("cached_tokens").fill_null(0).sum().alias("cached"),
        pl.col("completion_tokens").fill_null(0).sum().alias("out"),
        pl.col("usage_missing").fill_null(False).any().alias("missing"),
    )
    per_job = per_job.select(
        "file",
        pl.when(~pl.col("missing")).then(pl.col("tokens")).alias("tokens"),
        pl.when(~pl.col("missing")).then(cost).alias("cost"),
    )
    outcomes = (
        records.lazy()
        .filter(pl.col("kind") == "outcome")
        .select(
            "file",
            key,
            *(pl.col(c).cast(pl.String) for c in ("task_id", "family", "arm")),
            pl.col("replicate").fill_null(0),
            "score",
            pl.col("error_class").cast(pl.String),
        )
    )
    mean = pl.col("score").mean().over("task_id", "arm")
    return (
        outcomes.join(per_job, on="file", how="left")
        .drop("file")
        .with_columns(((mean.max() - mean.min()).over("task_id").fill_null(0) > 0).alias("disagree"))
        .sort("task_id", "arm", "replicate")
        .collect()
    )


def side_frame(keys: list[str], read: Callable[[str, int], bytes | None]) -> pl.DataFrame:
    """job_key, answer (its first ANSWER_KEEP_CHARS) and latency_s (the calls' sum, null when none is
    recorded) from the first ANSWER_READ_BYTES of each job object (`read(key, cap)`); a line cut there, or
    not JSON, is left out (its answer then shows as unknown)."""
    chunks = []
    for k in keys:
        data = read(k, ANSWER_READ_BYTES)
        if data:
            chunks.append(data[: data.rfind(b"\n") + 1] if len(data) >= ANSWER_READ_BYTES else data + b"\n")
    schema = {"job_key": pl.String, "kind": pl.String, "answer": pl.String, "latency_s": pl.Float64}
    empty = pl.DataFrame(schema={"job_key": pl.String, "answer": pl.String, "latency_s": pl.Float64})
    if not chunks:
        return empty
    import io

    lines = pl.Series(b"".join(chunks).decode("utf-8", "replace").splitlines(), dtype=pl.String)
    lines = lines.filter(lines.str.starts_with("{"))
    try:  # each line on its own: one bad line spoils only itself (polars' ndjson reader stops at the first)
        parsed = lines.str.json_decode(pl.Struct(schema)).struct.unnest()
    except pl.exceptions.ComputeError:
        parsed = pl.read_ndjson(
            io.BytesIO("\n".join(lines.to_list()).encode()), schema=schema, ignore_errors=True
        )
    return parsed.group_by("job_key").agg(
        pl.col("answer").filter(pl.col("kind") == "outcome").first().str.slice(0, ANSWER_KEEP_CHARS),
        pl.when(pl.col("latency_s").filter(pl.col("kind") == "call").count() > 0)
        .then(pl.col("latency_s").filter(pl.col("kind") == "call").sum())
        .alias("latency_s"),
    )


def samples(jobs: pl.DataFrame, side: pl.DataFrame | None) -> pl.DataFrame:
    """The explorer's frame: job_frame's rows with the answer and latency joined (null without `side`)."""
    if side is None:
        return jobs.with_columns(
            pl.lit(None, pl.String).alias("answer"), pl.lit(None, pl.Float64).alias("latency_s")
        )
    return jobs.join(side, on="job_key", how="left")


def _filters(q: Query) -> list[pl.Expr]:
    out = []
    for col, val in (("family", q.family), ("arm", q.arm)):
        if val is not None:
            out.append(pl.col(col) == val)
    if q.score_min is not None:
        out.append(pl.col("score") >= q.score_min)
    if q.score_max is not None:
        out.append(pl.col("score") <= q.score_max)
    if q.error == ANY_ERROR:
        out.append(pl.col("error_class").is_not_null())
    elif q.error == NO_ERROR:
        out.append(pl.col("error_class").is_null())
    elif q.error is not None:
        out.append(pl.col("error_class") == q.error)
    if q.disagree:
        out.append(pl.col("disagree"))
    return out


def filtered(frame: pl.DataFrame, q: Query) -> pl.DataFrame:
    """The rows the query's filters keep, in its sort order (nulls last; ties by task, arm, replicate)."""
    f = frame.filter(*_filters(q)) if _filters(q) else frame
    keys = [q.sort, *(c for c in ("task_id", "arm", "replicate") if c != q.sort)]
    return f.sort(keys, descending=[q.desc] + [False] * (len(keys) - 1), nulls_last=True)


@dataclass
class Found:
    """The rows of one page and what the search covered."""

    rows: list[dict[str, Any]]
    total: int  # rows matched in all
    scanned: int  # rows whose transcript text was searched
    candidates: int  # rows the filters kept (the search looked at these)
    capped: bool  # the search stopped at SEARCH_MAX_BYTES before the last candidate


def search(
    rows: pl.DataFrame, term: str, text_of: Callable[[str], str | None], max_bytes: int = SEARCH_MAX_BYTES
) -> tuple[pl.DataFrame, int, bool]:
    """The rows whose final answer or transcript text contains `term` (case-insensitive, literal: no pattern
    syntax), in order; how many rows' transcripts were scanned; whether the byte bound stopped the scan."""
    needle = term.lower()
    in_answer = rows["answer"].fill_null("").str.to_lowercase().str.contains(needle, literal=True)
    hit = []
    used = 0
    scanned = 0
    capped = False
    for key in rows["job_key"].to_list():  # file reads: one transcript per row, stopped at the byte bound
        if used >= max_bytes:
            capped = True
            break
        text = text_of(key) or ""
        used += len(text.encode("utf-8", "replace"))
        scanned += 1
        hit.append(needle in text.lower())
    found = pl.Series(hit + [False] * (rows.height - len(hit)), dtype=pl.Boolean)
    return rows.filter(in_answer | found), scanned, capped


def transcript_text(doc: Mapping[str, Any] | None) -> str:
    """The searchable text of a transcript (transcript.decode's document): every message, completion,
    reasoning and tool call/result, one string."""
    if not doc:
        return ""
    import json

    parts: list[str] = []
    for c in doc.get("calls") or []:
        if not isinstance(c, Mapping):
            continue
        for m in c.get("messages") or []:
            if isinstance(m, Mapping):
                parts.append(_text(m.get("content")))
        parts += [_text(c.get(k)) for k in ("completion", "reasoning")]
        parts += [
            json.dumps(c.get(k), default=str, ensure_ascii=False)
            for k in ("tool_calls", "tool_results")
            if c.get(k)
        ]
    return "\n".join(p for p in parts if p)


def _text(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    import json

    return json.dumps(x, default=str, ensure_ascii=False)


class TextCache:
    """Transcript texts by (run, job key), least recently used dropped past `max_bytes` (thread-safe)."""

    def __init__(self, max_bytes: int = TEXT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._d: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str], load: Callable[[], str]) -> str:
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        text = load()
        with self._lock:
            if key not in self._d and len(text) <= self.max_bytes:
                self._d[key] = text
                self._size += len(text)
                while self._size > self.max_bytes:
                    _, old = self._d.popitem(last=False)
                    self._size -= len(old)
        return text
