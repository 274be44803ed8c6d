"""Reading inputs: shapes, classification, families, formats, locations, and precise bad-input errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from elo_per_token.analysis.io import read_records
from elo_per_token.contracts.errors import EXIT_BAD_INPUT, InputError
from elo_per_token.contracts.jobs import Job
from elo_per_token.contracts.records import CallRecord, JobResult, Outcome


def write_jsonl(path: Path, rows: list, *, raw: list[str] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in rows] + (raw or [])
    path.write_text("".join(x + "\n" for x in lines))
    return path


def call(task: str, strategy: str, n: int, p: int = 100, c: int = 10, **kw) -> dict:
    return {
        "task_id": task,
        "strategy": strategy,
        "budget_n": n,
        "usage": {"prompt_tokens": p, "completion_tokens": c},
        **kw,
    }


def outcome(task: str, strategy: str, n: int, score: float, **kw) -> dict:
    return {"task_id": task, "strategy": strategy, "budget_n": n, "score": score, **kw}


GOOD = [
    call("math-001", "greedy", 1),
    call("math-001", "best_of_n", 4, 400, 40),
    outcome("math-001", "greedy", 1, 0.0),
    {"task_id": "math-001", "strategy": "best_of_n", "budget_n": 4, "correct": True},
    {"task_id": "math-001", "arm_a": "greedy@1", "arm_b": "best_of_n@4", "winner": "B"},
]


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch) -> None:
    # rich wraps captured output at 80 columns, which would split file paths in error messages.
    monkeypatch.setenv("COLUMNS", "1000")


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    from elo_per_token.ept.cli import main

    with pytest.raises(SystemExit) as ex:
        main(args)
    out, err = capsys.readouterr()
    return int(ex.value.code or 0), out, err


# ---------------------------------------------------------------- shapes and classification


def test_lines_without_kind_are_classified_and_arms_keep_the_budget(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "log.jsonl", GOOD)
    rec = read_records([str(f)])
    assert rec.frame["kind"].to_list() == ["call", "call", "outcome", "outcome", "judgment"]
    assert rec.calls["arm"].to_list() == ["greedy@1", "best_of_n@4"]
    assert rec.calls["prompt_tokens"].to_list() == [100, 400]
    assert rec.outcomes["score"].to_list() == [0.0, 1.0]  # correct=true -> 1.0
    j = rec.judgments.row(0, named=True)
    assert (j["arm_a"], j["arm_b"], j["winner"]) == ("greedy@1", "best_of_n@4", "B")
    assert rec.frame["family"].unique().to_list() == ["math"]


def test_flat_token_fields_and_judgment_by_strategy_fields(tmp_path: Path) -> None:
    rows = [
        {"task_id": "t-1", "strategy": "s", "budget_n": 2, "prompt_tokens": 7, "completion_tokens": 3},
        {
            "task_id": "t-1",
            "strategy_a": "s",
            "budget_a": 2,
            "strategy_b": "s",
            "budget_b": 8,
            "winner": "tie",
        },
    ]
    rec = read_records([str(write_jsonl(tmp_path / "a.jsonl", rows))])
    assert rec.calls.select("prompt_tokens", "completion_tokens").row(0) == (7, 3)
    assert rec.judgments.select("arm_a", "arm_b", "winner").row(0) == ("s@2", "s@8", "tie")


def test_missing_usage_is_flagged_not_zeroed_silently(tmp_path: Path) -> None:
    rows = [call("m-1", "g", 1), {"task_id": "m-1", "strategy": "g", "budget_n": 1, "usage": None}]
    rec = read_records([str(write_jsonl(tmp_path / "a.jsonl", rows))])
    assert rec.calls["usage_missing"].to_list() == [False, True]


def test_families_field_then_tasks_file_then_prefix(tmp_path: Path) -> None:
    rows = [
        call("alpha-1", "g", 1, family="explicit"),
        call("alpha-1", "g", 2),  # same task, no field: inherits the task's family
        call("beta-7", "g", 1),  # in the tasks file
        call("gamma-x-2", "g", 1),  # prefix before the LAST '-'
        call("plain", "g", 1),  # nothing applies
    ]
    f = write_jsonl(tmp_path / "a.jsonl", rows)
    tasks = write_jsonl(
        tmp_path / "tasks.jsonl", [{"task_id": "beta-7", "family": "from_file", "prompt": "x"}]
    )
    rec = read_records([str(f)], tasks_file=str(tasks))
    fam = dict(rec.frame.select("task_id", "family").unique().rows())
    assert fam == {"alpha-1": "explicit", "beta-7": "from_file", "gamma-x-2": "gamma-x", "plain": "default"}


def test_conflicting_family_for_one_task_names_the_line(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "a.jsonl", [call("a-1", "g", 1, family="x"), call("a-1", "g", 2, family="y")])
    with pytest.raises(InputError) as e:
        read_records([str(f)])
    assert (e.value.line, e.value.field) == (2, "family")


# ---------------------------------------------------------------- formats and locations


def _ledger_job(run_dir: Path, task: str, strategy: str, n: int, score: float) -> None:
    job = Job(run_id="r1", task={"task_id": task, "family": "fam"}, strategy=strategy, budget_n=n)
    calls = [
        CallRecord(call_index=0, role="sample", model="m", usage={"prompt_tokens": 50, "completion_tokens": 5},
                   latency_s=0.1, attempts=1),
        CallRecord(call_index=1, role="judge", model="m", usage={"prompt_tokens": 900, "completion_tokens": 9},
                   latency_s=0.1, attempts=1),
        CallRecord(call_index=2, role="sample", model="m", usage=None, latency_s=0.1, attempts=1, usage_missing=True),
    ]  # fmt: skip
    res = JobResult(job=job, calls=calls, outcome=Outcome(answer="4", score=score, correct=score == 1.0))
    path = run_dir / "jobs" / (job.key + ".jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(res.to_jsonl())


def test_ledger_directory_is_read_recursively(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    _ledger_job(run, "t1", "greedy", 1, 0.0)
    _ledger_job(run, "t1", "best_of_n", 4, 1.0)
    rec = read_records([str(tmp_path / "runs")])
    assert len(rec.files) == 2
    calls = rec.calls.sort("arm", "row")
    assert calls["role"].to_list() == ["sample", "judge", "sample"] * 2
    assert calls["usage_missing"].to_list() == [False, False, True] * 2
    assert set(rec.frame["family"]) == {"fam"}  # the ledger's family field wins over the task_id
    assert dict(rec.outcomes.select("arm", "score").rows()) == {"greedy@1": 0.0, "best_of_n@4": 1.0}


def test_gzip_parquet_glob_and_mixed_inputs_agree(tmp_path: Path) -> None:
    plain = write_jsonl(tmp_path / "plain" / "log.jsonl", GOOD)
    gz = tmp_path / "gz" / "log.jsonl.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    pq = tmp_path / "pq" / "log.parquet"
    pq.parent.mkdir()
    pl.read_ndjson(plain).write_parquet(pq)  # nested usage struct survives as a parquet struct
    cols = ["kind", "task_id", "family", "arm", "prompt_tokens", "completion_tokens", "score", "winner"]
    want = read_records([str(plain)]).frame.select(cols)
    for src in [str(gz), str(pq), str(tmp_path / "g*" / "*.gz"), str(tmp_path / "pq")]:
        assert read_records([src]).frame.select(cols).equals(want), src
    both = read_records([str(plain), str(pq)])
    assert both.frame.height == 2 * want.height


@pytest.mark.services
def test_s3_prefix_reads_like_local(tmp_path: Path, s3_bucket: str) -> None:
    from elo_per_token.analysis.io.sources import _s3_client

    local = tmp_path / "logs"
    write_jsonl(local / "a.jsonl", GOOD[:2])
    write_jsonl(local / "b.jsonl", GOOD[2:])
    (local / "c.jsonl.gz").write_bytes(gzip.compress(json.dumps(call("code-1", "g", 1)).encode() + b"\n"))
    s3 = _s3_client()
    s3.create_bucket(Bucket=s3_bucket)
    for f in sorted(local.iterdir()):
        s3.put_object(Bucket=s3_bucket, Key=f"runs/x/{f.name}", Body=f.read_bytes())
    s3.put_object(Bucket=s3_bucket, Key="runs/x/notes.txt", Body=b"not a log")
    pl.read_ndjson(local / "a.jsonl").write_parquet(tmp_path / "a.parquet")
    s3.put_object(Bucket=s3_bucket, Key="pq/a.parquet", Body=(tmp_path / "a.parquet").read_bytes())
    pq = read_records([f"s3://{s3_bucket}/pq"]).frame.select("kind", "task_id", "arm", "prompt_tokens")
    assert pq.equals(
        read_records([str(local / "a.jsonl")]).frame.select("kind", "task_id", "arm", "prompt_tokens")
    )
    rec = read_records([f"s3://{s3_bucket}/runs/"])
    assert rec.files == [f"s3://{s3_bucket}/runs/x/{n}" for n in ("a.jsonl", "b.jsonl", "c.jsonl.gz")]
    cols = ["kind", "task_id", "arm", "prompt_tokens", "score", "winner"]
    assert rec.frame.select(cols).equals(read_records([str(local)]).frame.select(cols))
    globbed = read_records([f"s3://{s3_bucket}/runs/*/b.json*"])
    assert globbed.files == [f"s3://{s3_bucket}/runs/x/b.jsonl"]
    # A bad line in an S3 object is located just as precisely (error path reads the object).
    s3.put_object(
        Bucket=s3_bucket, Key="bad/x.jsonl", Body=b'\n{"task_id": "a-1", "strategy": "g", "budget_n": -1}\n'
    )
    with pytest.raises(InputError) as e:
        read_records([f"s3://{s3_bucket}/bad/"])
    assert (e.value.file, e.value.line, e.value.field) == (f"s3://{s3_bucket}/bad/x.jsonl", 2, "budget_n")


# ---------------------------------------------------------------- bad input


BAD_CASES = [
    ("malformed JSON", '{"task_id": "m-1", "strategy": "g", "budget_n": 1', None, "malformed JSON"),
    ("missing field", '{"task_id": "m-1", "budget_n": 1, "usage": {"prompt_tokens": 1, "completion_tokens": 1}}',
     "strategy", "is required"),
    ("wrong type", '{"task_id": "m-1", "strategy": "g", "budget_n": "four"}', "budget_n", "must be an integer"),
    ("float budget", '{"task_id": "m-1", "strategy": "g", "budget_n": 4.0}', "budget_n", "must be an integer"),
    ("negative tokens", '{"task_id": "m-1", "strategy": "g", "budget_n": 1, "usage": {"prompt_tokens": 5, '
     '"completion_tokens": -3}}', "usage.completion_tokens", "must be >= 0"),
    # 4 x 2**62 wraps an Int64 sum to 0: before the bound, such a log's arm showed 0 prompt tokens as measured.
    ("absurd tokens", '{"task_id": "m-1", "strategy": "g", "budget_n": 1, "usage": {"prompt_tokens": 4611686018427387904, '
     '"completion_tokens": 3}}', "usage.prompt_tokens", "must be at most 10,000,000"),
    ("one token over", '{"task_id": "m-1", "strategy": "g", "budget_n": 1, "usage": {"prompt_tokens": 5, '
     '"completion_tokens": 10000001}}', "usage.completion_tokens", "must be at most"),
    ("token as string", '{"task_id": "m-1", "strategy": "g", "budget_n": 1, "usage": {"prompt_tokens": "5", '
     '"completion_tokens": 3}}', "usage.prompt_tokens", "must be an integer"),
    ("score out of range", '{"task_id": "m-1", "strategy": "g", "budget_n": 1, "score": 1.5}', "score", "between 0 and 1"),
    ("bad winner", '{"task_id": "m-1", "arm_a": "g@1", "arm_b": "h@1", "winner": "C"}', "winner", "A, B or tie"),
    ("bad kind", '{"kind": "banana", "task_id": "m-1"}', "kind", "must be one of"),
    ("not an object", "[1, 2]", None, "JSON object"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "line", "field", "msg"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_line_is_named_by_file_line_and_field(tmp_path: Path, name, line, field, msg) -> None:
    rows = [json.dumps(r) for r in GOOD[:3]]
    # Blank lines before the bad one: the reported line is the physical line number.
    f = tmp_path / "log.jsonl"
    f.write_text("\n".join(rows) + "\n\n   \n" + line + "\n" + json.dumps(GOOD[3]) + "\n")
    with pytest.raises(InputError) as e:
        read_records([str(f)])
    assert (e.value.file, e.value.line, e.value.field) == (str(f), 6, field)
    assert msg in e.value.message


def test_bad_row_in_parquet_is_named_by_row(tmp_path: Path) -> None:
    rows = [call("m-1", "g", 1), call("m-2", "g", 1, p=-5)]
    pq = tmp_path / "x.parquet"
    pl.DataFrame(rows).write_parquet(pq)
    with pytest.raises(InputError) as e:
        read_records([str(pq)])
    assert (e.value.line, e.value.field) == (2, "usage.prompt_tokens")


def test_wrongly_typed_parquet_values_are_named_by_row_and_skippable(tmp_path: Path) -> None:
    # A string column for integer fields: values that convert are kept, the ones that don't are the bad rows.
    rows = [
        {
            "task_id": "m-1",
            "strategy": "g",
            "budget_n": "1",
            "usage": {"prompt_tokens": "5", "completion_tokens": "1"},
        },
        {
            "task_id": "m-2",
            "strategy": "g",
            "budget_n": "x",
            "usage": {"prompt_tokens": "5", "completion_tokens": "1"},
        },
        {
            "task_id": "m-3",
            "strategy": "g",
            "budget_n": "2",
            "usage": {"prompt_tokens": "five", "completion_tokens": "1"},
        },
        {
            "task_id": "m-4",
            "strategy": "g",
            "budget_n": "2",
            "usage": {"prompt_tokens": "7", "completion_tokens": "1"},
        },
    ]
    pq = tmp_path / "x.parquet"
    pl.DataFrame(rows).write_parquet(pq)
    with pytest.raises(InputError) as e:
        read_records([str(pq)])
    assert (e.value.file, e.value.line, e.value.field) == (str(pq), 2, "budget_n")
    assert "must be an integer" in e.value.message
    got = read_records([str(pq)], skip_bad=True)
    assert got.frame.select("task_id", "budget_n", "prompt_tokens").rows() == [("m-1", 1, 5), ("m-4", 2, 7)]
    assert [(b.line, b.field) for b in got.skipped] == [(2, "budget_n"), (3, "usage.prompt_tokens")]


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path: Path, capsys) -> None:
    f = write_jsonl(
        tmp_path / "log.jsonl", GOOD, raw=['{"task_id": "m-2", "strategy": "g", "budget_n": "x"}']
    )
    out = tmp_path / "report"
    code, _, err = run_cli(["analyze", str(f), "--out", str(out), "--rounds", "10"], capsys)
    assert code == EXIT_BAD_INPUT
    assert f"{f}:6" in err and "budget_n" in err
    assert not out.exists()
    code, _, err = run_cli(["tokens", str(f)], capsys)
    assert code == EXIT_BAD_INPUT and f"{f}:6" in err


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        (lambda d: (d / "empty.jsonl").write_text(""), "no records"),
        (lambda d: (d / "blank.jsonl").write_text("\n\n"), "no records"),
        (lambda d: (d / "sub").mkdir(), "holds no"),
    ],
    ids=["empty-file", "blank-lines", "empty-dir"],
)
def test_empty_inputs_are_input_errors(tmp_path: Path, capsys, setup, needle) -> None:
    setup(tmp_path)
    target = next(tmp_path.iterdir())
    code, _, err = run_cli(["analyze", str(target), "--out", str(tmp_path / "o")], capsys)
    assert code == EXIT_BAD_INPUT and needle in err
    assert not (tmp_path / "o").exists()


def test_missing_path_and_empty_glob(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_records([str(tmp_path / "nope.jsonl")])
    with pytest.raises(InputError, match="glob matches no files"):
        read_records([str(tmp_path / "*.jsonl")])


def test_unknown_arm_in_judgment_names_line_and_field(tmp_path: Path, capsys) -> None:
    judg = {"task_id": "math-001", "arm_a": "greedy@1", "arm_b": "greedy@2", "winner": "A"}
    f = write_jsonl(tmp_path / "log.jsonl", [*GOOD, judg])
    code, _, err = run_cli(["analyze", str(f), "--rounds", "0"], capsys)
    assert code == EXIT_BAD_INPUT
    assert f"{f}:6" in err and "arm_b" in err and "greedy@2" in err


def test_skip_bad_skips_counts_and_says_where(tmp_path: Path, capsys) -> None:
    bad = [
        '{"task_id": "math-001", "strategy": "greedy", "budget_n": 1, "usage": {"prompt_tokens": -1, "completion_tokens": 0}}',
        "{oops",
    ]
    judg = {"task_id": "math-001", "arm_a": "greedy@1", "arm_b": "nope@1", "winner": "A"}
    f = write_jsonl(tmp_path / "log.jsonl", [*GOOD, judg], raw=bad)
    with pytest.raises(InputError):
        read_records([str(f)])
    rec = read_records([str(f)], skip_bad=True)
    assert [(b.line, b.field) for b in rec.skipped] == [(7, "usage.prompt_tokens"), (8, None)]
    assert rec.frame.height == 6  # the unknown-arm judgment is a cross-line check, made by analyze
    out = tmp_path / "o"
    code, stdout, err = run_cli(
        ["analyze", str(f), "--skip-bad", "--rounds", "20", "--out", str(out)], capsys
    )
    assert code == 0, err
    doc = json.loads((out / "report.json").read_text())
    assert doc["counts"]["skipped_lines"] == 3
    assert [(s["line"], s["field"]) for s in doc["skipped"]] == [
        (6, "arm_b"),
        (7, "usage.prompt_tokens"),
        (8, None),
    ]
    assert "skipped 3 bad line(s)" in stdout
    assert f"{f}:7: field 'usage.prompt_tokens'" in err and f"{f}:8:" in err


def test_duplicate_outcome_is_rejected_with_its_line(tmp_path: Path) -> None:
    from elo_per_token.analysis.pipeline import AnalysisOptions, analyze

    f = write_jsonl(tmp_path / "log.jsonl", [*GOOD, outcome("math-001", "greedy", 1, 1.0)])
    with pytest.raises(InputError) as e:
        analyze([str(f)], AnalysisOptions(rounds=0))
    assert (e.value.line, e.value.field) == (6, "replicate")


def test_reading_does_not_depend_on_file_order(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", GOOD[:2])
    b = write_jsonl(tmp_path / "b.jsonl", GOOD[2:])
    r1 = read_records([str(a), str(b)]).frame.drop("file", "row").sort(pl.all())
    r2 = read_records([str(b), str(a)]).frame.drop("file", "row").sort(pl.all())
    assert r1.equals(r2)


def test_run_directory_does_not_count_its_compacted_copy_twice(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    _ledger_job(run, "t1", "greedy", 1, 0.0)
    once = read_records([str(tmp_path)])
    (run / "compact").mkdir()
    once.frame.drop("file", "row").write_parquet(run / "compact" / "records.parquet")
    again = read_records([str(tmp_path)])
    assert again.files == once.files
    # Named explicitly, the compacted file is read like any other.
    assert read_records([str(run / "compact" / "records.parquet")]).frame.height == once.frame.height


def test_parquet_usage_struct_with_extra_fields(tmp_path: Path) -> None:
    rows = [call("a-1", "g", 1), {"task_id": "a-1", "strategy": "g", "budget_n": 1, "usage": None}]
    rows[0]["usage"]["total_tokens"] = 110
    pq = tmp_path / "x.parquet"
    pl.DataFrame(rows).write_parquet(pq)
    got = read_records([str(pq)]).calls.select("prompt_tokens", "completion_tokens", "usage_missing").rows()
    assert got == [(100, 10, False), (None, None, True)]


ODD_VALUES = [
    {"correct": 1}, {"usage_missing": "yes"}, {"kind": 5}, {"task_id": {"a": 1}}, {"usage": "abc"},
    {"usage": [1, 2]}, {"winner": 1, "arm_a": "g@1", "arm_b": "h@1"}, {"strategy": ["x"]}, {"score": "0.5"},
    {"usage": {"prompt_tokens": 1.0, "completion_tokens": 1}}, {"budget_n": None}, {"strategy": True},
    {"task_id": 7}, {"replicate": -2}, {"score": 0.25}, {"usage": {"prompt_tokens": 3}}, {"usage": {}},
    {"winner": "TIE", "arm_a": "g@1", "arm_b": "h@1"}, {"kind": "judgment"}, {"budget_n": True},
]  # fmt: skip


@pytest.mark.parametrize("extra", ODD_VALUES, ids=[json.dumps(v) for v in ODD_VALUES])
def test_fast_path_and_line_by_line_path_agree(tmp_path: Path, extra: dict) -> None:
    """The two paths must accept the same lines and blame the same field, whichever path a file takes."""
    from elo_per_token.analysis.io.recovery import _slow_read
    from elo_per_token.analysis.io.scan import _fast

    f = tmp_path / "one.jsonl"
    f.write_text(json.dumps({"task_id": "m-1", "strategy": "g", "budget_n": 1, **extra}) + "\n")
    fast = _fast([str(f)])
    good, bad = _slow_read(str(f), skip_bad=True)
    if fast is None:  # polars refused the line: the slow path must name the problem
        assert len(bad) == 1 and bad[0].line == 1
    elif fast["bad_field"][0] is not None:
        assert [b.field for b in bad] == [fast["bad_field"][0]]
    else:
        assert bad == []
        cols = [
            "kind",
            "task_id",
            "strategy",
            "budget_n",
            "prompt_tokens",
            "usage_missing",
            "score",
            "winner",
        ]
        assert good.select(cols).equals(fast.select(cols))


def test_first_bad_line_is_reported_whatever_its_kind_of_problem(tmp_path: Path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_text(
        json.dumps(GOOD[0])
        + "\n"
        + json.dumps({"task_id": "m-1", "strategy": "g", "budget_n": -4})
        + "\n"  # a check polars runs
        + json.dumps(GOOD[1])
        + "\n"
        + "{not json\n"  # a line polars refuses
    )
    with pytest.raises(InputError) as e:
        read_records([str(f)])
    assert (e.value.line, e.value.field) == (2, "budget_n")
    rec = read_records([str(f)], skip_bad=True)
    assert [b.line for b in rec.skipped] == [2, 4] and rec.frame.height == 2


def test_bad_file_among_good_ones_with_skip_bad(tmp_path: Path) -> None:
    for k in range(5):
        write_jsonl(tmp_path / f"ok{k}.jsonl", GOOD)
    write_jsonl(
        tmp_path / "bad.jsonl", GOOD[:2], raw=['{"task_id": "m-9", "strategy": "g", "budget_n": "x"}']
    )
    rec = read_records([str(tmp_path)], skip_bad=True)
    assert rec.frame.height == 5 * len(GOOD) + 2
    assert [(Path(b.file).name, b.line, b.field) for b in rec.skipped] == [("bad.jsonl", 3, "budget_n")]
