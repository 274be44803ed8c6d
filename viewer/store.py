"""What `ept view` reads: the runs of a ledger, each run's analysis (cached until the run changes), a job's
records and transcript, two runs compared. Read-only: nothing here writes to the ledger.

A run's state is known without listing it per page (viewer/runstate.py: a cheap marker, refreshed in the
background); its analysis is cached in memory and on disk under that marker, built off the request thread
(a request waits at most `page_budget_s`, then gets the last analysis or an "analysing" page that reloads),
one analysis per run at a time. A run that is still being swept shows its live counters at every load; its
table is re-analysed at most every REANALYSE_S seconds (or 3 times what an analysis takes), not per reload.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger.local import LocalStore
from elo_per_token.viewer.reading import BatchReader, Forbidden, inside, read_capped, read_manifest
from elo_per_token.viewer.runstate import DiskCache, RunState, Tracker, default_cache_dir, measure
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
PAGE_BUDGET_S = 2.0  # a request waits this long for an analysis or a first count, then answers without it
REANALYSE_S = 10.0  # a running sweep's table is rebuilt at most this often (its counters: every load)

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
    token: str = ""  # the RunState token it was analysed at (viewer.runstate)
    pending: bool = False  # an analysis (or a first count) is under way: the page says so and reloads
    analysed_done: int | None = None  # jobs done when the shown table was built (< done: a newer one is due)
    took: float = 0.0  # seconds the analysis took
    analysed_at: float = 0.0  # time.monotonic() in this process when it was built or loaded

    @property
    def running(self) -> bool:
        """Whether the page should follow the run (a sweep under way, or an analysis still being built)."""
        return self.pending or (self.planned is not None and self.done + self.failed < self.planned)


class Store:
    """A ledger opened for reading, with one cached analysis per run. Each run has its own lock, so a long
    analysis (a plan asking for 100,000 bootstrap rounds) holds up only its own run's pages."""

    def __init__(
        self,
        ledger_url: str,
        *,
        budget: str | None = None,
        margin: float = 10.0,
        page_rows: int = PAGE_ROWS,
        cache_dir: str | None = None,
        page_budget_s: float | None = None,
        state_ttl_s: float = 0.0,
        reanalyse_s: float = 0.0,
    ) -> None:
        """`cache_dir`: where analyses are kept on disk ("" for viewer.runstate.default_cache_dir; None: in
        memory only). `page_budget_s`: how long a request waits for an analysis or a count (None: until it is
        done). `state_ttl_s`: how long a run's measured state is used before it is measured again; `reanalyse_s`:
        how often a running sweep's table is rebuilt at most. `ept view` passes the server's values
        (viewer.cli: the disk cache, PAGE_BUDGET_S, 2 s, REANALYSE_S)."""
        from elo_per_token.ledger import open_ledger_for_reading

        self.url = ledger_url
        self.ledger = open_ledger_for_reading(ledger_url)
        self.budget = budget
        self.margin = margin
        self.page_rows = page_rows  # rows per page of the runs, arm and task lists
        self.page_budget_s = page_budget_s
        self.reanalyse_s = reanalyse_s
        # A stale count is waited for this long (a compacted run's is quick), else the last one is shown.
        self.fresh_wait_s = None if page_budget_s is None else min(0.25, page_budget_s)
        self._cache: dict[str, RunView] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()  # held only to find a run's lock, never during an analysis
        self._compare: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self._texts = TextCache()
        # Counting and analysing happen here, never on a request's thread: 2 workers each (2 cores).
        self._count_pool = ThreadPoolExecutor(2, thread_name_prefix="ept-view-count")
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="ept-view-analyse")
        self._building: dict[str, tuple[str, Future[RunView]]] = {}
        self.states = Tracker(lambda r: measure(self.ledger, r), self._count_pool, ttl=state_ttl_s)
        self.disk = DiskCache(default_cache_dir() if cache_dir == "" else cache_dir)

    def run_ids(self) -> list[str]:
        """The names of the ledger's runs/ folder, sorted (foreign names included: runs() lists them unreadable)."""
        return self.ledger.list_runs()

    def runs(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """Rows of the runs index for `names` (default: every run): start time, profile, planned jobs and jobs done,
        or `problem` (file and field) for a run that cannot be read; one bad run never hides the others."""
        names = self.run_ids() if names is None else names
        # Every run's count is started at once (in the background); the page then waits for them together, at
        # most the page budget in all, not a wait per run.
        until = None if self.page_budget_s is None else time.monotonic() + self.page_budget_s
        if until is not None:
            for name in names:
                with contextlib.suppress(Exception):  # its row says what is wrong, below
                    self.states.get(name, 0.0, 0.0)
        return [self._run_row(name, until) for name in names]

    def _run_row(self, run_id: str, until: float | None = None) -> dict[str, Any]:
        row: dict[str, Any] = {
            "run_id": run_id,
            "started_at": None,
            "planned": None,
            "done": 0,
            "failed": 0,
            "profile": None,
            "problem": None,
            "link": True,
        }
        try:
            m = read_manifest(self.ledger, run_id)
            self._contained(run_id)
            # The last count known, measured in the background (a run never counted yet waits a moment).
            left = None if until is None else max(0.0, until - time.monotonic())
            st = self.states.get(run_id, left, None if left is None else min(left, 0.25))
            row["done"], row["failed"] = (st.done, st.failed) if st is not None else (0, 0)
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
        """(jobs done, failed) as last measured (viewer.runstate: no listing on this thread)."""
        self._contained(run_id)
        st = self.states.get(run_id, self.page_budget_s, self.fresh_wait_s)
        return (st.done, st.failed) if st is not None else (0, 0)

    def _contained(self, run_id: str) -> None:
        """Forbidden when the run's folder, or the folders the analysis lists, lead out of the ledger."""
        if isinstance(self.ledger.store, LocalStore):
            for sub in ("", "/jobs", "/compact", "/failures", "/spent", "/transcripts"):
                inside(self.ledger.store, f"runs/{run_id}{sub}")

    def _token(self, run_id: str) -> str:
        st = self.states.get(run_id, self.page_budget_s, self.fresh_wait_s)
        return st.token if st is not None else ""

    def check_run(self, run_id: str) -> None:
        if run_id not in self.run_ids():
            raise InputError(f"no run {run_id!r} in {self.url}", field="run")
        self.ledger.run_url(run_id)  # a foreign folder name: InputError (field run_id)
        self._contained(run_id)

    def _lock(self, run_id: str) -> threading.RLock:
        with self._locks_guard:
            return self._locks.setdefault(run_id, threading.RLock())

    def view(self, run_id: str) -> RunView:
        """The run's analysis at its current state (viewer.runstate): from memory, from the disk cache, or
        built in the background — a request waits at most `page_budget_s`, then gets the last analysis with
        the live counters, or a pending view (the page says it is being analysed and reloads)."""
        self.check_run(run_id)
        st = self.states.get(run_id, self.page_budget_s, self.fresh_wait_s)
        if st is None:  # a first count still running (a large run that is not compacted)
            return RunView(
                run_id=run_id, done=0, planned=None, failed=0, pending=True, error="counting the run's jobs"
            )
        with self._lock(run_id):  # held for bookkeeping only, never during an analysis
            cached = self._cache.get(run_id)
            if cached is not None and cached.token == st.token:
                return cached
            fut = self._start(run_id, st, cached)
        if fut is None:  # a recent analysis of an earlier state: shown with the live counters
            return self._live(cached, st) if cached is not None else self._pending(run_id, st)
        try:
            return self._live(fut.result(timeout=self.page_budget_s), st)
        except TimeoutError:
            return self._live(cached, st) if cached is not None else self._pending(run_id, st)

    def _start(self, run_id: str, st: RunState, cached: RunView | None) -> Future[RunView] | None:
        """The analysis of state `st` (under way, started now, or from the disk cache); None when the cached
        analysis of an earlier state is recent enough for a run that is still changing."""
        building = self._building.get(run_id)
        if building is not None and (building[0] == st.token or not building[1].done()):
            return building[1]  # one analysis per run at a time: the next starts when it ends
        if (
            cached is not None
            and not cached.error
            and cached.planned
            and st.done + st.failed < cached.planned
        ):
            # A sweep still running: its table is rebuilt at most every REANALYSE_S (counters: every load).
            every = max(self.reanalyse_s, 3 * cached.took) if self.reanalyse_s else 0.0
            if time.monotonic() - cached.analysed_at < every:
                return None
        key = self._disk_key(run_id, st)
        hit = self.disk.load(key)
        fut: Future[RunView] = Future()
        if isinstance(hit, RunView) and hit.token == st.token:
            fut.set_result(self._remember(run_id, hit))
        else:
            fut = self._pool.submit(self._build, run_id, st, key)
        self._building[run_id] = (st.token, fut)
        return fut

    def _disk_key(self, run_id: str, st: RunState) -> str:
        return self.disk.key(self.ledger.url, run_id, st.token, self.budget, self.margin)

    def _build(self, run_id: str, st: RunState, key: str) -> RunView:
        t0 = time.monotonic()
        v = RunView(run_id=run_id, done=st.done, planned=None, failed=st.failed, token=st.token)
        v.analysed_done = st.done
        try:
            v.manifest = read_manifest(self.ledger, run_id)
            v.planned = v.manifest.get("n_jobs")
            v.result, v.doc, v.options_from = self._analyse(run_id)
        except InputError as e:  # a sweep that has not finished one job per arm yet, or a bad manifest
            v.error = str(e)
        if v.error is None:
            try:  # the explorer's frame too (off the request thread), so a cold server has it from disk
                self._build_samples(run_id, v)
            except (InputError, Forbidden, OSError, ValueError):
                v.samples = None  # built on its first request instead, which then says what went wrong
        v.took = time.monotonic() - t0
        if v.error is None:
            self.disk.save(key, v)
        return self._remember(run_id, v)

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

    def _remember(self, run_id: str, v: RunView) -> RunView:
        v.analysed_at = time.monotonic()
        with self._lock(run_id):
            self._cache[run_id] = v
        return v

    def _live(self, v: RunView, st: RunState) -> RunView:
        """`v` with the run's current counters (its table as analysed)."""
        if (v.done, v.failed) == (st.done, st.failed):
            return v
        return replace(v, done=st.done, failed=st.failed)

    def _pending(self, run_id: str, st: RunState) -> RunView:
        return RunView(
            run_id=run_id,
            done=st.done,
            planned=None,
            failed=st.failed,
            pending=True,
            error="the run is being analysed; this page reloads when it is ready",
        )

    def samples(self, run_id: str) -> RunView:
        """The run's view with its sample explorer frame (viewer.samples.samples) built, once per run state:
        the records' rows per job, the answers and latencies read from the job objects (runs of up to
        SIDE_MAX_JOBS jobs)."""
        v = self.view(run_id)
        if v.result is None or v.result.records is None or v.samples is not None:
            return v
        with self._lock(run_id):
            base = self._cache.get(run_id)
            # Built once per analysis: on the cached view (`v` may be a copy with live counters).
            holder = base if base is not None and base.token == v.token else v
            if holder.samples is None:
                self._build_samples(run_id, holder)
            v.samples, v.samples_note = holder.samples, holder.samples_note
        return v

    def _build_samples(self, run_id: str, v: RunView) -> None:
        from elo_per_token.analysis.breakdown import parse_prices

        if v.result is None or v.result.records is None:
            return
        jobs = job_frame(v.result.records, parse_prices(v.result.options.prices))
        side = None
        if jobs.height <= SIDE_MAX_JOBS:
            reader = BatchReader(self.ledger)  # each folder resolved once, not each object's path
            side = side_frame(
                jobs["job_key"].drop_nulls().to_list(),
                lambda k, cap: self._head(reader, run_id, k, cap),
            )
        else:
            v.samples_note = (
                f"final answers and latencies are read for runs of up to {SIDE_MAX_JOBS:,} "
                f"jobs; this run has {jobs.height:,}"
            )
        v.samples = samples(jobs, side)

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
            return {
                "job_key": key,
                "calls": [],
                "grader": {},
                "error": f"not read: {got[1]:,} bytes, over the {MAX_BLOB_BYTES:,}-byte transcript bound",
            }
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
        key = (base, cur, self._token(base), self._token(cur))
        if key not in self._compare:
            bu, cu = self.ledger.run_url(base), self.ledger.run_url(cur)
            co = compare_options(bu, cu)  # the options `ept compare BASE CUR` uses: the same intervals
            res = compare_runs(
                load_run(bu),
                load_run(cu),
                rule=parse_fail_on("none"),
                rounds=co.rounds,
                seed=co.seed,
                level=co.level,
            )
            if co.note:
                res.notes.append(co.note)
            self._compare[key] = to_json_dict(res)
        return self._compare[key]


def server_store(ledger_url: str, budget: str | None, margin: float) -> Store:
    """The Store `ept view` serves: analyses cached on disk (viewer.runstate.default_cache_dir), requests
    answered within PAGE_BUDGET_S (or $EPT_VIEW_PAGE_BUDGET_S), counts kept 2 s, a running sweep's table
    rebuilt at most every REANALYSE_S."""
    from elo_per_token.contracts.settings import read_seconds

    wait = read_seconds("EPT_VIEW_PAGE_BUDGET_S", 1e-3, 3600.0)
    return Store(
        ledger_url,
        budget=budget,
        margin=margin,
        cache_dir="",
        page_budget_s=wait,
        state_ttl_s=2.0,
        reanalyse_s=REANALYSE_S,
    )


def _records(data: bytes, size: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The complete JSON-object lines of a job object's first bytes, and notes on what was left out."""
    notes: list[str] = []
    if size > len(data):
        data = data[: data.rfind(b"\n") + 1]  # the cut line is not parsed
        notes.append(
            f"The job object is {size:,} bytes; the viewer reads at most {MAX_JOB_BYTES:,}: only the "
            "records in them are shown (the analysis reads the whole object)."
        )
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
