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

    @property
    def running(self) -> bool:
        return self.planned is not None and self.done + self.failed < self.planned


class Store:
    """A ledger opened for reading, with one cached analysis per run."""

    def __init__(self, ledger_url: str, *, budget: str | None = None, margin: float = 10.0) -> None:
        from elo_per_token.ledger import open_ledger_for_reading

        self.url = ledger_url
        self.ledger = open_ledger_for_reading(ledger_url)
        self.budget = budget
        self.margin = margin
        self._cache: dict[str, RunView] = {}
        self._lock = threading.Lock()
        self._compare: dict[tuple[str, str, int, int], dict[str, Any]] = {}

    def runs(self) -> list[dict[str, Any]]:
        """Every run of the ledger with its manifest's start time, planned jobs and jobs done."""
        out = []
        for run_id in self.ledger.list_runs():
            m = self.ledger.get_manifest(run_id) or {}
            done, failed = self._progress(run_id)
            out.append({"run_id": run_id, "started_at": m.get("started_at"), "planned": m.get("n_jobs"),
                        "done": done, "failed": failed,
                        "profile": (m.get("profile") or {}).get("name") if isinstance(m.get("profile"), dict) else None})  # fmt: skip
        return out

    def _progress(self, run_id: str) -> tuple[int, int]:
        return len(self.ledger.list_jobs(run_id)), len(list(self.ledger.iter_failure_keys(run_id)))

    def check_run(self, run_id: str) -> None:
        if run_id not in self.ledger.list_runs():
            raise InputError(f"no run {run_id!r} in {self.url}", field="run")

    def view(self, run_id: str) -> RunView:
        """The run's analysis, recomputed only when its job or failure count changed since the last one."""
        self.check_run(run_id)
        done, failed = self._progress(run_id)
        with self._lock:
            cached = self._cache.get(run_id)
            if cached is not None and (cached.done, cached.failed) == (done, failed):
                return cached
            manifest = self.ledger.get_manifest(run_id) or {}
            planned = manifest.get("n_jobs") if isinstance(manifest.get("n_jobs"), int) else None
            v = RunView(run_id=run_id, done=done, planned=planned, failed=failed, manifest=manifest)
            try:
                v.result, v.doc = self._analyse(run_id)
            except InputError as e:  # e.g. a sweep that has not finished one job per arm yet
                v.error = str(e)
            self._cache[run_id] = v
            return v

    def _analyse(self, run_id: str) -> tuple[AnalysisResult, HtmlDocument]:
        import dataclasses

        from elo_per_token.analysis.cli_report import run_options
        from elo_per_token.analysis.html_gather import build_document
        from elo_per_token.analysis.pipeline import analyze

        url = self.ledger.run_url(run_id)
        opts, _ = run_options([url])
        result = analyze([url], dataclasses.replace(opts, budget=self.budget, margin=self.margin))
        return result, build_document(result)

    def job(self, run_id: str, key: str) -> list[dict[str, Any]]:
        """The job object's records (calls, then the outcome), parsed; InputError for an unknown job."""
        from elo_per_token.contracts.keys import check_key

        self.check_run(run_id)
        check_key(key)
        if not self.ledger.has_job(run_id, key):
            raise InputError(f"no job {key!r} in run {run_id!r}", field="job")
        raw = self.ledger.get_job(run_id, key)
        return [json.loads(line) for line in raw.decode("utf-8", "replace").splitlines() if line.strip()]

    def transcript(self, run_id: str, key: str) -> dict[str, Any] | None:
        """The job's stored transcript (worker.transcript), None when the run kept none."""
        from elo_per_token.contracts.transcripts import read_transcript

        return read_transcript(self.ledger, run_id, key)

    def compare(self, base: str, cur: str) -> dict[str, Any]:
        """`ept compare BASE CUR --fail-on none` as JSON (analysis.compare.to_json_dict), cached per progress."""
        from elo_per_token.analysis.compare import compare_runs, load_run, parse_fail_on, to_json_dict
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
