"""What `ept view` reads: the runs of a ledger, each run's analysis (cached until the run changes), a job's
records and transcript, two runs compared. Read-only: nothing here writes to the ledger.

A run that is still being swept changes between page loads; its analysis is recomputed when the number of
job objects or failures changes, so the page follows the sweep (jobs done, the partial table).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger.local import LocalStore
from elo_per_token.viewer.reading import BatchReader, Forbidden, inside, read_capped, read_manifest
from elo_per_token.viewer.samples import (
    SIDE_MAX_JOBS,
    TextCache,
    job_frame,
    samples,
    side_frame,
    transcript_text,
)

# Per-request bounds: bytes of one job object read for its page, and rows per page of the runs/arm/task lists.
MAX_JOB_BYTES = 8 * 2**20
PAGE_ROWS = 500

if TYPE_CHECKING:  # the analysis is imported where a run is analysed
    from elo_per_token.analysis.html_document import HtmlDocument
    from elo_per_token.analysis.pipeline import AnalysisResult


@dataclass
class RunView:
    """One run's analysis as the pages need it: the report's document (analysis.html_gather.build_document), the result
    and the progress it was computed at; `error` when the (partial) run cannot be analysed yet."""

    run_id: str
    done: int
    planned: int | None
    failed: int
    doc: HtmlDocument | None = None
    result: AnalysisResult | None = None
    error: str | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    options_from: str | None = None  # where the analysis options came from (analysis.cli_report.run_options)
    samples: Any = None  # the sample explorer's frame (viewer.samples), built on its first request
    samples_note: str | None = None  # why answers and latency are not shown, when they are not

    @property
    def running(self) -> bool:
        return self.planned is not None and self.done + self.failed < self.planned


class Store:
    """A ledger opened for reading, with one cached analysis per run. Each run has its own lock, so a long
    analysis (a plan asking for 100,000 bootstrap rounds) holds up only its own run's pages."""

    def __init__(
        self, ledger_url: str, *, budget: str | None = None, margin: float = 10.0, page_rows: int = PAGE_ROWS
    ) -> None:
        from elo_per_token.ledger import open_ledger_for_reading

        self.url = ledger_url
        self.ledger = open_ledger_for_reading(ledger_url)
        self.budget = budget
        self.margin = margin
        self.page_rows = page_rows  # rows per page of the runs, arm and task lists
        self._cache: dict[str, RunView] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()  # held only to find a run's lock, never during an analysis
        self._compare: dict[tuple[str, str, int, int], dict[str, Any]] = {}
        self._texts = TextCache()

    def run_ids(self) -> list[str]:
        """The names of the ledger's runs/ folder, sorted (foreign names included: runs() lists them unreadable)."""
        return self.ledger.list_runs()

    def runs(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """Rows of the runs index for `names` (default: every run): start time, profile, planned jobs and jobs done,
        or `problem` (file and field) for a run that cannot be read; one bad run never hides the others."""
        return [self._run_row(name) for name in (self.run_ids() if names is None else names)]

    def _run_row(self, run_id: str) -> dict[str, Any]:
        row: dict[str, Any] = {"run_id": run_id, "started_at": None, "planned": None, "done": 0, "failed": 0,
                               "profile": None, "problem": None, "link": True}  # fmt: skip
        try:
            m = read_manifest(self.ledger, run_id)
            row["done"], row["failed"] = self._progress(run_id)
        except (InputError, Forbidden, ValueError, OSError) as e:
            row["problem"] = (
                f"runs/{run_id}: {e}" if isinstance(e, InputError) and e.field == "run_id" else str(e)
            )
            row["link"] = not (isinstance(e, InputError) and e.field == "run_id")
            return row
        profile = m.get("profile") or {}
        row.update(started_at=m.get("started_at"), planned=m.get("n_jobs"), profile=profile.get("name"))
        return row

    def _progress(self, run_id: str) -> tuple[int, int]:
        self._contained(run_id)
        return len(self.ledger.list_jobs(run_id)), len(list(self.ledger.iter_failure_keys(run_id)))

    def _contained(self, run_id: str) -> None:
        """Forbidden when the run's folder, or the folders the analysis lists, lead out of the ledger."""
        if isinstance(self.ledger.store, LocalStore):
            for sub in ("", "/jobs", "/compact", "/failures", "/spent", "/transcripts"):
                inside(self.ledger.store, f"runs/{run_id}{sub}")

    def check_run(self, run_id: str) -> None:
        if run_id not in self.run_ids():
            raise InputError(f"no run {run_id!r} in {self.url}", field="run")
        self.ledger.run_url(run_id)  # a foreign folder name: InputError (field run_id)
        self._contained(run_id)

    def _lock(self, run_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(run_id, threading.Lock())

    def view(self, run_id: str) -> RunView:
        """The run's analysis, recomputed only when its job or failure count changed since the last one."""
        self.check_run(run_id)
        done, failed = self._progress(run_id)
        with self._lock(run_id):  # one analysis of a run at a time; other runs go on
            cached = self._cache.get(run_id)
            if cached is not None and (cached.done, cached.failed) == (done, failed):
                return cached
            v = RunView(run_id=run_id, done=done, planned=None, failed=failed)
            try:
                v.manifest = read_manifest(self.ledger, run_id)
                v.planned = v.manifest.get("n_jobs")
                v.result, v.doc, v.options_from = self._analyse(run_id)
            except InputError as e:  # a sweep that has not finished one job per arm yet, or a bad manifest
                v.error = str(e)
            self._cache[run_id] = v
            return v

    def _analyse(self, run_id: str) -> tuple[AnalysisResult, HtmlDocument, str]:
        import dataclasses

        from elo_per_token.analysis.cli_report import run_options
        from elo_per_token.analysis.html_gather import build_document
        from elo_per_token.analysis.pipeline import analyze

        url = self.ledger.run_url(run_id)
        # The plan's options re-validated (analysis.cli_report: bootstrap rounds within the plan's limit);
        # a manifest asking for more gets the defaults, and the page says so.
        opts, where = run_options([url])
        result = analyze([url], dataclasses.replace(opts, budget=self.budget, margin=self.margin))
        return result, build_document(result), where

    def samples(self, run_id: str) -> RunView:
        """The run's view with its sample explorer frame (viewer.samples.samples) built, once per run state:
        the records' rows per job, the answers and latencies read from the job objects (runs of up to
        SIDE_MAX_JOBS jobs)."""
        from elo_per_token.analysis.breakdown import parse_prices

        v = self.view(run_id)
        if v.result is None or v.result.records is None or v.samples is not None:
            return v
        with self._lock(run_id):
            if v.samples is None:
                jobs = job_frame(v.result.records, parse_prices(v.result.options.prices))
                side = None
                if jobs.height <= SIDE_MAX_JOBS:
                    reader = BatchReader(self.ledger)  # each folder resolved once, not each object's path
                    side = side_frame(
                        jobs["job_key"].drop_nulls().to_list(),
                        lambda k, cap: self._head(reader, run_id, k, cap),
                    )
                else:
                    v.samples_note = (f"final answers and latencies are read for runs of up to {SIDE_MAX_JOBS:,} "
                                      f"jobs; this run has {jobs.height:,}")  # fmt: skip
                v.samples = samples(jobs, side)
        return v

    def _head(self, reader: BatchReader, run_id: str, key: str, cap: int) -> bytes | None:
        try:
            got = reader.read(f"runs/{run_id}/jobs/{key}.jsonl", cap)
        except (Forbidden, OSError):
            return None  # a link out of the ledger, or unreadable: no answer shown (its job page says why)
        return None if got is None else got[0]

    def text(self, run_id: str, key: str, reader: BatchReader | None = None) -> str:
        """The searchable text of a job's transcript ('' without one), kept in a bounded cache; `reader`: a
        BatchReader shared by one request's reads."""

        def load() -> str:
            try:
                return transcript_text(self.transcript(run_id, key, reader))
            except (Forbidden, OSError):
                return ""

        return self._texts.get((run_id, key), load)

    def task_info(self, run_id: str, task_id: str, keys: list[str]) -> dict[str, Any]:
        """The task page's extras: the prompt (messages of a stored transcript of one of `keys`, the task's
        jobs), the reference (viewer.task_info.reference_of) and each job's error class and final answer."""
        import polars as pl

        from elo_per_token.contracts.taskdigest import decode_tasks
        from elo_per_token.viewer.task_info import prompt_of, reference_of

        v = self.samples(run_id)
        out: dict[str, Any] = {"outcomes": {}}
        if v.samples is not None:
            rows = v.samples.filter(pl.col("task_id") == task_id).select("job_key", "error_class", "answer")
            out["outcomes"] = {r["job_key"]: r for r in rows.iter_rows(named=True)}  # one task: a few rows
        out["prompt"], out["prompt_from"] = prompt_of(keys, lambda k: self.transcript(run_id, k))
        blob = (v.manifest.get("identity") or {}).get("tasks_blob")
        got = read_capped(self.ledger, f"runs/{run_id}/{blob}", 16 * 2**20) if isinstance(blob, str) else None
        out["reference"], out["reference_from"] = reference_of(
            v.manifest, task_id, decode_tasks(got[0] if got else None, missing_ok=True)
        )
        return out

    def job(self, run_id: str, key: str) -> tuple[list[dict[str, Any]], list[str]]:
        """The job object's records (calls, then the outcome), parsed, and notes on what was not shown: at most
        MAX_JOB_BYTES are read, and a line that is not a JSON object is skipped and named. InputError for an
        unknown job; Forbidden for a job object that links out of the ledger."""
        from elo_per_token.contracts.keys import check_key

        self.check_run(run_id)
        check_key(key)
        got = read_capped(self.ledger, f"runs/{run_id}/jobs/{key}.jsonl", MAX_JOB_BYTES)
        if got is None:
            raise InputError(f"no job {key!r} in run {run_id!r}", field="job")
        data, size = got
        return _records(data, size)

    def transcript(self, run_id: str, key: str, reader: BatchReader | None = None) -> dict[str, Any] | None:
        """The job's stored transcript (worker.transcript), None when the run kept none; a blob over the
        transcript bound is reported inside the document, never read whole."""
        from elo_per_token.contracts.transcripts import MAX_BLOB_BYTES, blob_name, decode

        name = f"runs/{run_id}/{blob_name(key)}"
        got = (reader or BatchReader(self.ledger)).read(name, MAX_BLOB_BYTES + 1)
        if got is None:
            return None
        if got[1] > MAX_BLOB_BYTES:
            return {"job_key": key, "calls": [], "grader": {},
                    "error": f"not read: {got[1]:,} bytes, over the {MAX_BLOB_BYTES:,}-byte transcript bound"}  # fmt: skip
        try:
            return decode(got[0])
        except (ValueError, OSError, EOFError, RecursionError) as e:
            return {"job_key": key, "calls": [], "grader": {}, "error": f"unreadable: {e}"}

    def compare(self, base: str, cur: str) -> dict[str, Any]:
        """`ept compare BASE CUR --fail-on none` as JSON (analysis.compare_output.to_json_dict), cached per progress."""
        from elo_per_token.analysis.compare import compare_runs
        from elo_per_token.analysis.compare_gate import parse_fail_on
        from elo_per_token.analysis.compare_load import load_run
        from elo_per_token.analysis.compare_output import to_json_dict
        from elo_per_token.analysis.surface_options import compare_options

        self.check_run(base)
        self.check_run(cur)
        key = (base, cur, *self._progress(base)[:1], *self._progress(cur)[:1])
        if key not in self._compare:
            bu, cu = self.ledger.run_url(base), self.ledger.run_url(cur)
            co = compare_options(bu, cu)  # the options `ept compare BASE CUR` uses: the same intervals
            res = compare_runs(load_run(bu), load_run(cu), rule=parse_fail_on("none"), rounds=co.rounds,
                               seed=co.seed, level=co.level)  # fmt: skip
            if co.note:
                res.notes.append(co.note)
            self._compare[key] = to_json_dict(res)
        return self._compare[key]


def _records(data: bytes, size: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The complete JSON-object lines of a job object's first bytes, and notes on what was left out."""
    notes: list[str] = []
    if size > len(data):
        data = data[: data.rfind(b"\n") + 1]  # the cut line is not parsed
        notes.append(f"The job object is {size:,} bytes; the viewer reads at most {MAX_JOB_BYTES:,}: only the "
                     "records in them are shown (the analysis reads the whole object).")  # fmt: skip
    out: list[dict[str, Any]] = []
    bad = 0
    for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            x = json.loads(line)
        except (ValueError, RecursionError):
            x = None
        if isinstance(x, dict):
            out.append(x)
        else:
            bad += 1
            if bad == 1:
                notes.append(f"line {i} is not a JSON object; skipped")
    if bad > 1:
        notes.append(f"{bad} lines in all are not JSON objects; skipped")
    return out, notes
