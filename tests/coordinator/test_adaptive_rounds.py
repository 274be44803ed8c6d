"""The adaptive sweep reads each round's jobs once (issue 39): `read_jobs_table` over a round's job keys gives
exactly the cells the whole run's reading gives for them, hostile keys are refused or skipped, and the round
event the loop emits is typed and round-trips through the `adaptive.json` blob (issue 35)."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import numpy as np
import pytest
from bounds import bounded
from fixtures_ledger import write_local
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.coordinator.adaptive.events import RoundEvent
from elo_per_token.coordinator.adaptive.run_table import read_jobs_table, read_run_table

RUN = "rounds"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> tuple[str, list[str]]:
    """A 300-job run (5 arms, 3 families, 4 replicates per cell) and its job keys."""
    root = tmp_path_factory.mktemp("ledger")
    write_local(root, RUN, 300)
    jobs = root / "runs" / RUN / "jobs"
    keys = sorted(str(p.relative_to(jobs))[: -len(".jsonl")] for p in jobs.rglob("*.jsonl"))
    return str(root / "runs" / RUN), keys


def _cells(table) -> dict[tuple[str, str], tuple[float, float]]:
    return {
        (t, a): (float(table.scores[i, j]), float(table.tokens[i, j]))
        for i, t in enumerate(table.tasks)
        for j, a in enumerate(table.arms)
        if np.isfinite(table.scores[i, j])
    }


def _cell_of(key: str) -> tuple[str, str]:
    """(task, arm label) of a fixture key `family/task/<strategy>_n<budget>/replicate` (the label
    `<strategy>@<budget>`): every replicate of a cell together."""
    parts = key.split("/")
    strategy, _, budget = parts[2].rpartition("_n")
    return parts[1], f"{strategy}@{budget}"


def test_a_rounds_jobs_read_alone_equal_the_whole_runs_reading(run_dir):
    url, keys = run_dir
    whole = _cells(read_run_table([url]))
    by_cell: dict[tuple[str, str], list[str]] = {}
    for k in keys:
        by_cell.setdefault(_cell_of(k), []).append(k)
    cells = sorted(by_cell)
    rounds = [cells[i::3] for i in range(3)]  # three rounds, each holding whole cells (all replicates)
    seen: dict[tuple[str, str], tuple[float, float]] = {}
    for rnd in rounds:
        got = _cells(read_jobs_table(url, [k for c in rnd for k in by_cell[c]]))
        assert not set(got) & set(seen)  # a round reads its own cells only
        seen.update(got)
    assert seen == whole


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.lists(st.integers(0, 299), max_size=60, unique=True),
       junk=st.lists(st.sampled_from(["math/none/x/0", "zz", "math/t/greedy_n1/99"]), max_size=5))  # fmt: skip
def test_any_subset_of_keys_reads_the_same_cells_and_absent_keys_are_failed_jobs(run_dir, pick, junk):
    """A round whose jobs failed has no objects: absent keys read as no result; every cell read from a
    subset holding all its replicates equals the whole run's; bounded time and memory."""
    url, keys = run_dir
    sub = [keys[i] for i in pick]
    table = bounded(lambda: read_jobs_table(url, sub + junk), time_s=20, memory_mb=200)
    got = _cells(table)
    whole = _cells(read_run_table([url]))
    complete = {c for c in {_cell_of(k) for k in sub} if all(k in sub for k in keys if _cell_of(k) == c)}
    assert set(got) == {_cell_of(k) for k in sub} & set(whole)
    for c in complete:
        assert got[c] == whole[c]


@pytest.mark.parametrize("bad", ["../../../etc/passwd", "a/../../b", "/abs/path", "x\x00y"])
def test_a_hostile_key_is_refused_before_any_read(run_dir, bad):
    from elo_per_token.contracts.errors import InputError

    url, keys = run_dir
    with pytest.raises(InputError, match="unsafe ledger key"):
        read_jobs_table(url, [keys[0], bad])


def test_the_round_event_is_frozen_and_its_blob_round_trips(tmp_path):
    from elo_per_token.coordinator.adaptive.state import read_state, write_state
    from elo_per_token.ledger import open_ledger

    ev = RoundEvent(2, 10, 120, 4567.0, ("a", "b"), {"a": "on", "b": "open", "c": "off"}, {"c": "off: a …"})
    with pytest.raises(FrozenInstanceError):
        ev.round = 3  # type: ignore[misc]
    led = open_ledger(tmp_path / "led")
    write_state(led, "r", ev)
    got = read_state(led, "r")
    assert got is not None and {k: v for k, v in got.items() if k != "at"} == ev.as_dict()
    assert "finished" not in got and got["running"] == ["a", "b"]
    write_state(led, "r", replace(ev, finished=True, stop_reason="every arm settled"))
    done = read_state(led, "r")
    assert done is not None and done["finished"] is True and done["stop_reason"] == "every arm settled"
