"""The one parser of "which ledger run does this name": ledger.runref (arguments and data-file names) and
analysis.io.resolve_input (run ids, plan files), fed hostile text. Each answer is a valid reference, None
(not a run) or an InputError that names the argument, within bounded time and memory."""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from elo_per_token.analysis.io import open_run, resolve_input
from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger.runref import RunSource, run_of_file, run_source, runs_of_files

# Text made of the pieces a run reference is built from, so the parser's branches are reached often, plus
# anything at all (surrogates, NUL, newlines).
_PIECES = st.sampled_from(
    ["runs/", "/", "jobs", "compact", "s3://", "://", "*", "?", "[", ".", "..", "r1", "\x00"]
)
HOSTILE = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(_PIECES, st.text(max_size=4)), max_size=80).map("".join),
)
_ID = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=20).filter(
    lambda s: s not in (".", "..")
)

_SECONDS = 0.5  # per call: the regexes are linear-ish in the text; a catastrophic backtrack takes far longer
_PEAK_BYTES = 2_000_000


def _bounded(fn, arg):  # type: ignore[no-untyped-def]
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        return fn(arg)
    finally:
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert elapsed < _SECONDS, f"{fn.__name__} took {elapsed:.2f} s on {len(arg)} chars"
        assert peak < _PEAK_BYTES, f"{fn.__name__} used {peak} bytes on {len(arg)} chars"


def _first_run_in(name: str) -> RunSource | None:
    """An oracle written without a regex: the first `runs/<id>/jobs/` or `runs/<id>/compact/` in the name's
    first line (the ledger root before it, its trailing slash dropped)."""
    for i in range(len(name)):
        if "\n" in name[:i]:
            return None
        if not name.startswith("runs/", i):
            continue
        seg = name[i + 5 :].split("/", 1)[0]
        after = name[i + 5 + len(seg) :]
        if seg and after.startswith(("/jobs/", "/compact/")):
            return RunSource(name[:i].removesuffix("/") or ".", seg)
    return None


@settings(max_examples=300, deadline=None)
@given(HOSTILE)
@example("s3://b/x/runs/r1/jobs/math/t/a.jsonl")
@example("led//runs/r1/compact/records.parquet")
@example("a\nruns/r/jobs/x")
@example("runs/" * 2000 + "x")
def test_a_data_file_name_is_a_run_or_none(name: str) -> None:
    ref = _bounded(run_of_file, name)
    assert ref == _first_run_in(name)
    if ref is not None:
        assert ref.run_id and "/" not in ref.run_id and not ref.objects_only


@settings(max_examples=300, deadline=None)
@given(HOSTILE)
@example("s3://runs/r1")
@example("s3:///runs/r1/jobs")
@example("runs/" * 2000 + "x" * 5000)
def test_an_argument_is_a_run_or_none(arg: str) -> None:
    ref = _bounded(run_source, arg)
    if ref is None:
        return
    assert ref.run_id and "/" not in ref.run_id
    assert f"runs/{ref.run_id}" in arg
    if arg.startswith("s3://"):
        assert ref.ledger_url.startswith("s3://")
        if ref.ledger_url == "s3://":  # no bucket: opening it is a clear error naming the ledger field
            with pytest.raises(InputError, match="has no bucket") as e:
                open_run(ref)
            assert e.value.field == "ledger"
    else:
        assert os.path.isdir(arg)


@given(
    st.one_of(st.just("s3://bucket"), st.just("s3://bucket/pre/fix"), st.just("/tmp/led"), st.just("led")),
    _ID,
    st.sampled_from(["jobs/math/t1/greedy@1/r0.jsonl", "compact/records.parquet"]),
)
def test_a_file_of_a_run_names_that_run(ledger: str, run_id: str, rest: str) -> None:
    ref = run_of_file(f"{ledger}/runs/{run_id}/{rest}")
    assert ref == RunSource(ledger, run_id)
    assert ref.url == f"{ledger}/runs/{run_id}"
    assert runs_of_files([f"{ledger}/runs/{run_id}/{rest}"] * 3 + ["plain.jsonl"]) == [ref]


@given(
    st.sampled_from(["s3://bucket", "s3://bucket/pre"]), _ID, st.sampled_from(["", "/", "/jobs", "/jobs/"])
)
def test_an_s3_run_url_names_its_run(ledger: str, run_id: str, tail: str) -> None:
    assert run_source(f"{ledger}/runs/{run_id}{tail}") == RunSource(ledger, run_id, tail.startswith("/jobs"))


def test_a_folder_is_a_run_only_when_it_holds_one(tmp_path: Path) -> None:
    run = tmp_path / "led" / "runs" / "r1"
    run.mkdir(parents=True)
    assert run_source(str(run)) is None  # a folder named like a run, holding nothing of one
    (run / "jobs").mkdir()
    assert run_source(str(run)) == RunSource(str(tmp_path / "led"), "r1")
    assert run_source(str(run / "jobs")) == RunSource(str(tmp_path / "led"), "r1", objects_only=True)


@pytest.fixture
def in_empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(HOSTILE)
def test_a_command_line_argument_resolves_or_names_itself(in_empty_dir: Path, arg: str) -> None:
    """A bare name in an empty ledger is no run: the error names the argument (and what the ledger holds);
    anything else passes through unchanged for the reader, which names the file it cannot read."""
    ledger = str(in_empty_dir / "ledger")
    try:
        got = _bounded(lambda a: resolve_input(a, ledger), arg)
    except InputError as e:
        assert e.message
        assert repr(arg) in e.message or e.file == arg
        return
    assert got == arg
