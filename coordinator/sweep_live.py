"""A sweep's live progress: the progress bar, the results already in the ledger, and the executors' callbacks that count results."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from elo_per_token.contracts.jobs import Job, JobSummary
from elo_per_token.coordinator.sweep_tally import (
    Tally,
)
from elo_per_token.ledger import Ledger

if TYPE_CHECKING:  # annotations only: these are imported where a sweep needs them
    from rich.console import Console
    from rich.progress import Progress, TaskID


def progress_bar(console: Console, total: int) -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
        refresh_per_second=4,
    )


def existing_keys(ledger: Ledger, run_id: str, prog: Progress, bar: TaskID) -> tuple[set[str], set[str]]:
    """(keys of the run's results, keys of the jobs with a failure object and no result), counting on the bar."""
    have: set[str] = set()
    for k in ledger.iter_job_keys(run_id):
        have.add(k)
        if len(have) % 10_000 == 0:
            prog.update(bar, detail=f"{len(have):,} results found")
    # Only jobs that failed before have a failure object to delete when they succeed (no blind DELETE).
    had_failure = {k for k in ledger.iter_failure_keys(run_id) if k not in have}
    return have, had_failure


class LiveTally:
    """The executors' callbacks: count results in the tally and show them on the progress bar."""

    def __init__(
        self, tally: Tally, prog: Progress, bar: TaskID, on_note: Callable[[str | None], None] | None = None
    ) -> None:
        self.tally, self.prog, self.bar = tally, prog, bar
        self.counted = 0  # jobs handed to the executor (the true number to run, known once the stream ends)
        # The provider's state when it is not answering ("provider unreachable since …, waiting (patience …)").
        self.weather_note: Callable[[], str | None] = lambda: None
        # The run lease's copy of the note, for `ept status` (coordinator.runlease.RunLease.set_note).
        self.on_note: Callable[[str | None], None] = on_note or (lambda _note: None)

    def todo(self, stream: Callable[[], Iterator[Job]], have: set[str]) -> Iterator[Job]:
        for j in stream():
            if j.key not in have:
                self.counted += 1
                yield j

    def refresh(self) -> None:
        from rich.markup import escape

        tally = self.tally
        note = self.weather_note()
        self.on_note(note)
        self.prog.update(
            self.bar,
            completed=tally.finished,
            detail=(f"[yellow]{escape(note)}[/] · " if note else "")
            + f"done {tally.done + tally.duplicate} · skipped {tally.skipped} · failed {tally.failed} · "
            f"retrying {len(tally.retrying)} · calls {tally.calls} · tokens {tally.tokens:,}",
        )

    def show_note(self, note: str | None) -> None:
        """A Celery sweep's outage note (the workers' reports, read by the coordinator): shown until replaced."""
        changed = note != self.weather_note()
        self.weather_note = lambda: note
        if changed:
            self.refresh()

    def on_result(self, s: JobSummary) -> None:
        self.tally.add(s)
        self.refresh()

    def on_retry(self, job_or_key: Job | str, attempt: int, cls: str) -> None:
        self.tally.retry(job_or_key if isinstance(job_or_key, str) else job_or_key.key)
        self.refresh()
