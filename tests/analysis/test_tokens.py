"""Token accounting per arm, against hand counts and an independent plain-Python computation."""

from __future__ import annotations

import collections
import csv
import io
import json
import random
from pathlib import Path

import pytest

from elo_per_token.analysis.io import read_records
from elo_per_token.analysis.tokens import arm_tokens, judge_tokens, task_tokens


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def c(task: str, s: str, n: int, p: int | None, o: int | None, **kw) -> dict:
    usage = None if p is None else {"prompt_tokens": p, "completion_tokens": o}
    return {"task_id": task, "strategy": s, "budget_n": n, "usage": usage, **kw}


def test_hand_counted_table(tmp_path: Path) -> None:
    rows = [
        c("m-1", "best_of_n", 4, 100, 10),
        c("m-1", "best_of_n", 4, 100, 20),
        c("m-2", "best_of_n", 4, 300, 30),
        c("m-1", "best_of_n", 16, 1000, 100),  # same strategy, other budget: another arm (the seed's bug)
        c("m-1", "best_of_n", 16, None, None),  # missing usage: counted, m-1's cost unknown, not zero
        c("m-2", "best_of_n", 16, 2000, 200),
        c("m-1", "best_of_n", 4, 5000, 5, role="judge"),  # evaluation cost
    ]
    t = arm_tokens(read_records([str(_write(tmp_path / "a.jsonl", rows))]).calls)
    assert t.to_dicts() == [
        {"arm": "best_of_n@4", "strategy": "best_of_n", "budget_n": 4, "calls": 3, "calls_missing_usage": 0,
         "prompt_tokens": 500, "completion_tokens": 60, "total_tokens": 560, "tasks": 2,
         "avg_tokens_per_task": (230 + 330) / 2},
        {"arm": "best_of_n@16", "strategy": "best_of_n", "budget_n": 16, "calls": 3, "calls_missing_usage": 1,
         "prompt_tokens": 3000, "completion_tokens": 300, "total_tokens": 3300, "tasks": 2,
         "avg_tokens_per_task": 2200.0},  # m-2 only: m-1 has a call without usage
    ]  # fmt: skip
    j = judge_tokens(read_records([str(tmp_path / "a.jsonl")]).calls)
    assert j.select("arm", "judge_calls", "total_tokens").rows() == [("best_of_n@4", 1, 5005)]


def test_replicates_do_not_multiply_the_cost_of_a_task(tmp_path: Path) -> None:
    rows = [c("m-1", "g", 1, 100, 0, replicate=r) for r in range(3)] + [c("m-2", "g", 1, 40, 0)]
    tt = task_tokens(read_records([str(_write(tmp_path / "a.jsonl", rows))]).calls)
    assert tt.select("task_id", "replicates", "tokens").rows() == [("m-1", 3, 100.0), ("m-2", 1, 40.0)]


def test_matches_plain_python_on_random_log(tmp_path: Path) -> None:
    rng = random.Random(5)
    rows = []
    for _ in range(3000):
        s, n = rng.choice([("greedy", 1), ("best_of_n", 4), ("best_of_n", 8), ("tree", 8)])
        rows.append(
            c(f"{rng.choice(['math', 'code'])}-{rng.randrange(40)}", s, n, rng.randrange(2000), rng.randrange(500),
              replicate=rng.randrange(2), role=rng.choice(["sample", "sample", "verifier", "judge"]))
        )  # fmt: skip
    t = arm_tokens(read_records([str(_write(tmp_path / "r.jsonl", rows))]).calls)

    # Independent: dictionaries, no polars.
    tot: dict = collections.defaultdict(lambda: [0, 0, 0, set()])
    per_task: dict = collections.defaultdict(lambda: [0, set()])
    for r in rows:
        if r["role"] == "judge":
            continue
        arm = f"{r['strategy']}@{r['budget_n']}"
        u = r["usage"]
        a = tot[arm]
        a[0] += 1
        a[1] += u["prompt_tokens"]
        a[2] += u["completion_tokens"]
        a[3].add(r["task_id"])
        pt = per_task[(arm, r["task_id"])]
        pt[0] += u["prompt_tokens"] + u["completion_tokens"]
        pt[1].add(r["replicate"])
    for row in t.iter_rows(named=True):
        calls, p, o, tasks = tot[row["arm"]]
        assert (row["calls"], row["prompt_tokens"], row["completion_tokens"], row["tasks"]) == (
            calls,
            p,
            o,
            len(tasks),
        )
        avg = sum(v[0] / len(v[1]) for (arm, _), v in per_task.items() if arm == row["arm"]) / len(tasks)
        assert row["avg_tokens_per_task"] == pytest.approx(avg, rel=1e-12)
    assert sorted(t["arm"]) == sorted(tot)
    # Ordered by tokens per task.
    assert t["avg_tokens_per_task"].to_list() == sorted(t["avg_tokens_per_task"].to_list())


def test_tokens_command_csv_and_json(tmp_path: Path, capsys, monkeypatch) -> None:
    from elo_per_token.ept.cli import main

    monkeypatch.setenv("COLUMNS", "1000")
    f = _write(
        tmp_path / "a.jsonl", [c("m-1", "g", 1, 10, 5), c("m-1", "h", 2, 20, 5), c("m-2", "h", 2, None, None)]
    )
    out_json = tmp_path / "t.json"
    with pytest.raises(SystemExit) as ex:
        main(["tokens", str(f), "--csv", "-", "--json", str(out_json)])
    assert ex.value.code in (0, None)
    out, err = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["arm"], r["total_tokens"], r["calls_missing_usage"]) for r in rows] == [
        ("g@1", "15", "0"),
        ("h@2", "25", "1"),
    ]
    assert "without usage" in err  # the table goes to stderr when stdout carries CSV
    doc = json.loads(out_json.read_text())
    assert doc["arms"][1]["avg_tokens_per_task"] == pytest.approx(25.0)  # m-2's cost is unknown, not 0
    assert doc["files"] == [str(f)]


def _random_rows(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    rows: list[dict] = []
    for _ in range(n):
        s, b = rng.choice([("greedy", 1), ("best_of_n", 4), ("best_of_n", 16), ("majority", 8)])
        task = f"{rng.choice(['math', 'code'])}-{rng.randrange(30)}"
        kind = rng.random()
        if kind < 0.15:  # outcome lines are read and validated but carry no cost
            rows.append({"task_id": task, "strategy": s, "budget_n": b, "score": rng.random()})
            continue
        usage = rng.random() > 0.05
        rows.append(c(task, s, b, rng.randrange(900) if usage else None, rng.randrange(90) if usage else None,
                      replicate=rng.randrange(3), role=rng.choice(["sample", "verifier", "judge"])))  # fmt: skip
    return rows


def test_one_pass_command_equals_read_then_aggregate(tmp_path: Path, capsys, monkeypatch) -> None:
    """`ept tokens` aggregates while it scans; the two-step path (every record in a frame) must agree."""
    from elo_per_token.ept.cli import main

    monkeypatch.setenv("COLUMNS", "1000")
    a = _write(tmp_path / "a.jsonl", _random_rows(1, 1500))
    b = _write(tmp_path / "b.jsonl", _random_rows(2, 900))
    calls = read_records([str(a), str(b)]).calls
    want_arms, want_judge = arm_tokens(calls), judge_tokens(calls)
    assert want_arms["calls_missing_usage"].sum() > 0 and want_judge.height > 0  # the fixture exercises both
    out_json = tmp_path / "t.json"
    with pytest.raises(SystemExit) as ex:
        main(["tokens", str(a), str(b), "--json", str(out_json)])
    assert ex.value.code in (0, None)
    doc = json.loads(out_json.read_text())
    assert doc["arms"] == want_arms.to_dicts()
    assert doc["judge"] == want_judge.to_dicts()


def test_one_pass_command_still_names_a_bad_line_and_skips_it(tmp_path: Path, capsys, monkeypatch) -> None:
    from elo_per_token.ept.cli import main

    monkeypatch.setenv("COLUMNS", "1000")
    good = _random_rows(3, 400)
    a = _write(tmp_path / "a.jsonl", good)
    bad_rows = [*good[:7], c("math-1", "greedy", 1, -5, 3), *good[7:20]]
    b = _write(tmp_path / "b.jsonl", bad_rows)
    with pytest.raises(SystemExit) as ex:
        main(["tokens", str(a), str(b), "--csv", str(tmp_path / "t.csv")])
    assert ex.value.code == 2
    err = capsys.readouterr().err.replace("\n", "")
    assert f"{b}:8" in err and "usage.prompt_tokens" in err
    assert not (tmp_path / "t.csv").exists()  # nothing written

    out_json = tmp_path / "t.json"
    with pytest.raises(SystemExit) as ex:
        main(["tokens", str(a), str(b), "--skip-bad", "--json", str(out_json)])
    assert ex.value.code in (0, None)
    kept = read_records([str(a), str(_write(tmp_path / "b_good.jsonl", [*good[:7], *good[7:20]]))]).calls
    assert json.loads(out_json.read_text())["arms"] == arm_tokens(kept).to_dicts()
    assert "skipped 1 bad line" in capsys.readouterr().err


def test_tokens_parses_only_its_fields_and_still_validates_them(tmp_path: Path, capsys, monkeypatch) -> None:
    """`ept tokens` parses the usage counts, not the breakdown (analysis.io.TOKENS_FIELDS): same table as the
    full parse on a log that carries the breakdown; a wrongly typed count is still named by file, line, field."""

    from elo_per_token.analysis.io import TOKENS_FIELDS, fields_schema, read_summary
    from elo_per_token.analysis.tokens import arm_tokens_from_groups, calls_of, record_groups
    from elo_per_token.ept.cli import main

    monkeypatch.setenv("COLUMNS", "1000")
    rows = _random_rows(4, 600)
    for i, r in enumerate(rows):
        if r.get("usage") and i % 3:
            r["usage"] |= {"prompt_tokens_details": {"cached_tokens": i % 7}, "cache_read_input_tokens": i % 5,
                           "completion_tokens_details": {"reasoning_tokens": i % 11}}  # fmt: skip
    a = _write(tmp_path / "a.jsonl", rows)
    narrow = fields_schema(TOKENS_FIELDS)
    assert "family" not in narrow and [f.name for f in narrow["usage"].fields] == [
        "prompt_tokens",
        "completion_tokens",
    ]

    def groups(fields):
        return calls_of(read_summary([str(a)], record_groups, fields=fields).frame)

    want = arm_tokens(read_records([str(a)]).calls)
    assert arm_tokens_from_groups(groups(TOKENS_FIELDS)).equals(want)
    assert arm_tokens_from_groups(groups(None)).equals(want)
    with pytest.raises(ValueError, match="unknown record field"):
        fields_schema(["usage.total_tokens"])

    bad = [*rows[:4], {**rows[4], "usage": {"prompt_tokens": "12", "completion_tokens": 3}}, *rows[5:9]]
    b = _write(tmp_path / "b.jsonl", bad)
    with pytest.raises(SystemExit) as ex:
        main(["tokens", str(b)])
    assert ex.value.code == 2
    err = capsys.readouterr().err.replace("\n", "")
    assert f"{b}:5" in err and "usage.prompt_tokens" in err
