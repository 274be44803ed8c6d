"""OpenAI Batch API files -> `ept analyze`.

The files are built the way the Batch API builds them: each input line's request body is sent with the
openai SDK to the simulator over HTTP and the real ChatCompletion it returns (model_dump) becomes the
output line's `response.body`; a failed request carries an openai `BatchError`.
"""

from __future__ import annotations

import csv
import functools
import json
from pathlib import Path

import pytest
from cli_runner import run_ept
from fixtures_sim import SIM_KEY
from openai import OpenAI
from openai.types import BatchError
from openai.types.chat import ChatCompletion

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.prompts import solve_messages
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.graders import grade

TASKS = load_builtin_suite("math")[:10]
ARMS = {"t0": 0.0, "t07": 0.7}


_cli = functools.partial(run_ept, columns=200)  # the CLI in this process (testkit/cli_runner.py)


def make_batch(sim, tmp_path, *, metadata: bool = True):
    """(input path, output path, outcomes path, total usage per arm) from real calls to the simulator."""
    client = OpenAI(base_url=sim.url, api_key=SIM_KEY)
    inputs, outputs, scores, tokens = [], [], [], dict.fromkeys(ARMS, 0)
    for arm, temp in ARMS.items():
        for rep in range(2):
            for t in TASKS:
                cid = f"{t['task_id']}__{arm}__r{rep}"
                body = {"model": "ept-sim-1", "messages": solve_messages(t), "temperature": temp, "seed": rep}
                if metadata:
                    body["metadata"] = {
                        "task_id": t["task_id"],
                        "arm": arm,
                        "replicate": str(rep),
                        "family": "math",
                    }
                inputs.append(
                    {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}
                )
                comp: ChatCompletion = client.chat.completions.create(**body)
                outputs.append(
                    {
                        "id": f"batch_req_{len(outputs):04d}",
                        "custom_id": cid,
                        "response": {
                            "status_code": 200,
                            "request_id": f"req_{len(outputs):04d}",
                            "body": comp.model_dump(mode="json"),
                        },
                        "error": None,
                    }
                )
                tokens[arm] += comp.usage.prompt_tokens + comp.usage.completion_tokens
                scores.append({"custom_id": cid, "score": grade(t, comp.choices[0].message.content).score})
    # One request that failed inside the batch: not billed, so no call and no tokens.
    cid = f"{TASKS[0]['task_id']}__t0__r9"
    inputs.append(
        {
            "custom_id": cid,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "ept-sim-1", "messages": solve_messages(TASKS[0])},
        }
    )
    err = BatchError(code="rate_limit_exceeded", message="Rate limit reached", line=len(inputs))
    outputs.append(
        {"id": "batch_req_fail", "custom_id": cid, "response": None, "error": err.model_dump(mode="json")}
    )
    paths = tmp_path / "batch_input.jsonl", tmp_path / "batch_output.jsonl", tmp_path / "outcomes.csv"
    paths[0].write_text("".join(json.dumps(r) + "\n" for r in inputs))
    paths[1].write_text("".join(json.dumps(r) + "\n" for r in outputs))
    with paths[2].open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["custom_id", "score"])
        w.writeheader()
        w.writerows(scores)
    return (*map(str, paths), tokens)


@pytest.fixture
def batch(sim, tmp_path):
    return make_batch(sim, tmp_path)


def test_batch_import_then_analyze(batch, tmp_path):
    inp, outp, outcomes, tokens = batch
    rec = tmp_path / "records.jsonl"
    res = _cli("import", "batch", outp, "--input", inp, "--outcomes", outcomes, "-o", str(rec))
    assert res.returncode == 0, res.stderr
    assert "40 call and 40 outcome records" in res.stdout and "1 failed request" in res.stderr
    tok = _cli("tokens", str(rec), "--json", "-")
    assert tok.returncode == 0, tok.stderr
    by_arm = {a["arm"]: a for a in json.loads(tok.stdout[tok.stdout.index("{") :])["arms"]}
    assert {a: by_arm[a]["total_tokens"] for a in ARMS} == tokens  # every response's usage, nothing else
    assert by_arm["t0"]["calls"] == 20
    ana = _cli("analyze", str(rec), "--rounds", "30", "--out", str(tmp_path / "rep"), "--no-plots")
    assert ana.returncode == 0, ana.stderr
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert "t0" in json.dumps(report) and "t07" in json.dumps(report)


def test_id_template_and_mapping_template(sim, tmp_path):
    inp, outp, outcomes, _ = make_batch(sim, tmp_path, metadata=False)
    rec = tmp_path / "r.jsonl"
    res = _cli(
        "import",
        "batch",
        outp,
        "--id-template",
        "{task_id}__{arm}__r{replicate}",
        "--outcomes",
        outcomes,
        "-o",
        str(rec),
    )
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in rec.read_text().splitlines()]
    call = next(r for r in lines if r["kind"] == "call" and r["replicate"] == 1)
    assert (
        call["task_id"] == TASKS[0]["task_id"] and call["arm"] in ARMS and call["usage"]["prompt_tokens"] > 0
    )
    tmpl = tmp_path / "map.csv"
    res = _cli("import", "batch", "--input", inp, "--write-template", str(tmpl))
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(tmpl.open()))
    assert len(rows) == 41 and rows[0]["custom_id"].endswith("__t0__r0") and rows[0]["task_id"] == ""
    for r in rows:  # what a user fills in
        r["task_id"], r["arm"], r["replicate"] = r["custom_id"].split("__")
        r["replicate"] = r["replicate"][1:]
    with tmpl.open("w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    rec2 = tmp_path / "r2.jsonl"
    res = _cli("import", "batch", outp, "--mapping", str(tmpl), "--outcomes", outcomes, "-o", str(rec2))
    assert res.returncode == 0, res.stderr

    def strip(p):
        return [{k: v for k, v in json.loads(x).items() if k != "source"} for x in p.read_text().splitlines()]

    assert strip(rec2) == strip(rec)


def test_bad_lines_name_file_line_field_exit_2_and_skip_bad(batch, tmp_path):
    inp, outp, outcomes, _ = batch
    lines = Path(outp).read_text().splitlines()
    bad = json.loads(lines[4])
    bad["response"]["body"]["usage"]["prompt_tokens"] = "many"
    lines[4] = json.dumps(bad)
    lines[7] = lines[7][:40]  # truncated line
    Path(outp).write_text("\n".join(lines) + "\n")
    rec = tmp_path / "records.jsonl"
    res = _cli("import", "batch", outp, "--input", inp, "-o", str(rec))
    assert res.returncode == 2
    assert f"{outp}:5: field 'response.body.usage.prompt_tokens'" in res.stderr.replace("\n", "")
    assert not rec.exists()
    res = _cli("import", "batch", outp, "--input", inp, "--outcomes", outcomes, "-o", str(rec), "--skip-bad")
    assert res.returncode == 0, res.stderr
    assert "skipped 2 bad line(s)" in res.stderr and f"{outp}:8" in res.stderr
    assert "38 call" in res.stdout


def test_unknown_custom_id_and_bad_outcomes(batch, tmp_path):
    from elo_per_token.analysis.imports.batch import import_batch

    inp, outp, outcomes, _ = batch
    with pytest.raises(InputError) as e:
        import_batch([outp], id_template="{task_id}--{arm}")
    assert (e.value.file, e.value.line, e.value.field) == (outp, 1, "custom_id")
    with open(outcomes) as fh:
        rows = list(csv.DictReader(fh))
    rows[3]["score"] = "1.7"
    with open(outcomes, "w", newline="") as fh:
        w = csv.DictWriter(fh, ["custom_id", "score"])
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(InputError) as e:
        import_batch([outp], input_file=inp, outcomes=outcomes)
    assert (e.value.line, e.value.field) == (5, "score")  # CSV line 5 = data row 4 (header is line 1)
    with pytest.raises(InputError) as e:
        import_batch([outp])
    assert e.value.field == "mapping"


def test_responses_and_embeddings_usage_shapes(tmp_path):
    from openai.types import CreateEmbeddingResponse
    from openai.types.responses import ResponseUsage

    from elo_per_token.analysis.imports.batch import import_batch

    usage = ResponseUsage(
        input_tokens=120,
        output_tokens=30,
        total_tokens=150,
        input_tokens_details={"cached_tokens": 0, "cache_write_tokens": 0},
        output_tokens_details={"reasoning_tokens": 0},
    )
    emb = CreateEmbeddingResponse(
        data=[], model="m", object="list", usage={"prompt_tokens": 9, "total_tokens": 9}
    )
    lines = [
        {
            "id": "r1",
            "custom_id": "t-1__a@1__r0",
            "error": None,
            "response": {
                "status_code": 200,
                "request_id": "x",
                "body": {"object": "response", "usage": usage.model_dump(mode="json")},
            },
        },
        {
            "id": "r2",
            "custom_id": "t-2__a@1__r0",
            "error": None,
            "response": {"status_code": 200, "request_id": "y", "body": emb.model_dump(mode="json")},
        },
    ]
    out = tmp_path / "out.jsonl"
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    col = import_batch([str(out)], id_template="{task_id}__{arm}__r{replicate}")
    assert [r["usage"] for r in col.records] == [
        {"prompt_tokens": 120, "completion_tokens": 30},
        {"prompt_tokens": 9, "completion_tokens": 0},
    ]
    assert col.records[0]["strategy"] == "a" and col.records[0]["budget_n"] == 1
