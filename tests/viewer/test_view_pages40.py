"""`ept view`'s task and job pages (issue 40 item 4), over real HTTP against a real `ept view` process: the task
page shows the prompt (from a stored transcript), the reference (from the built-in suite the plan names,
checked against the run's task digest) and every arm's outcome; breadcrumbs name the arm; the job page shows
each failed assert once; the favicon is served (no 404)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from view_server import request, view

ARMS = (("greedy", 1), ("majority", 4))
FAILURE = {"test": "assert nth_term(1) == 1  # the-test-source", "error": "got 8"}


def _write(root: Path, run_id: str, n_tasks: int = 3, *, digests: dict[str, str] | None = None) -> list[dict]:
    """A run over the first built-in math tasks: both arms, a transcript per job, the first job a code-style
    failure (its failed assert in the outcome's grader details and in the transcript's evidence)."""
    from elo_per_token.contracts.jobs import Job
    from elo_per_token.contracts.records import CallRecord, JobResult, Outcome
    from elo_per_token.contracts.transcripts import blob_name, encode
    from elo_per_token.ledger import FileLedger
    from elo_per_token.suites.load import load_builtin_suite

    tasks = load_builtin_suite("math")[:n_tasks]
    led = FileLedger(root)
    manifest: dict = {"run_id": run_id, "plan": {"suites": ["math"]}}
    if digests is not None:
        name = "identity/tasks-test.json"
        led.put_blob(run_id, name, json.dumps(digests).encode())
        manifest["identity"] = {"tasks_blob": name}
    led.put_manifest(run_id, manifest)
    first = True
    for t in tasks:
        for strategy, n in ARMS:
            job = Job(
                run_id=run_id, task={"task_id": t["task_id"], "family": "math"}, strategy=strategy, budget_n=n
            )
            calls = [CallRecord(call_index=0, role="sample", model="sim", latency_s=0.1, attempts=1,
                                usage={"prompt_tokens": 30 * n, "completion_tokens": 10 * n, "total_tokens": 40 * n})]  # fmt: skip
            grader = (
                {"reason": f"1 of 1 tests failed: {FAILURE['error']}", "failures": [FAILURE]} if first else {}
            )
            outcome = Outcome(answer="8" if first else str(t["reference"]), score=0.0 if first else 1.0,
                              correct=not first, grader=grader)  # fmt: skip
            led.put_job(run_id, job.key, JobResult(job=job, calls=calls, outcome=outcome).to_jsonl())
            doc = {"job_key": job.key, "calls": [{"call_index": 0, "role": "sample", "completion": "8",
                                                  "messages": [{"role": "user", "content": t["prompt"]}]}],
                   "grader": {"verdict": {"score": outcome.score, "reason": grader.get("reason")},
                              "evidence": {"failures": [FAILURE]} if first else {}}}  # fmt: skip
            led.put_blob(run_id, blob_name(job.key), encode(doc))
            first = False
    return [dict(t) for t in tasks]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    from elo_per_token.coordinator.identity import task_digests

    root = tmp_path_factory.mktemp("pages40")
    tasks = _write(root, "builtin")
    changed = task_digests(tasks)
    changed[next(iter(changed))] = "0" * 16  # the suite's task no longer matches what the run recorded
    _write(root, "changed", digests=changed)
    with view(root) as v:
        yield v, tasks


def _body(v, path: str) -> str:
    r = request(v.port, path)
    assert r.status == 200, (path, r.status, r.body[:300])
    return r.body.decode()


def test_task_page_shows_prompt_reference_and_every_arm(site) -> None:
    v, tasks = site
    t = tasks[1]
    body = _body(v, f"/run/builtin/task?task={t['task_id']}&arm=majority%404")
    assert html.escape(t["prompt"]) in body.split('id="task-prompt"')[1].split("</section>")[0]
    ref = body.split('id="task-reference"')[1].split("</section>")[0]
    assert (
        f"<pre>{html.escape(str(t['reference']))}</pre>" in ref and "built-in suite &#x27;math&#x27;" in ref
    )
    assert (
        body.count('<tr data-arm="greedy@1"') == 1
        and body.count('<tr data-arm="majority@4" class="from-arm"') == 1
    )
    crumbs = body.split('<nav class="crumbs">')[1].split("</nav>")[0]
    assert [x in crumbs for x in ("builtin", ">majority@4<", t["task_id"])] == [True, True, True]
    assert crumbs.index("majority@4") < crumbs.index(t["task_id"])
    assert ">majority@4<" not in _body(v, f"/run/builtin/task?task={t['task_id']}").split("</nav>")[0]


def test_a_changed_builtin_task_shows_no_reference(site) -> None:
    v, tasks = site
    body = _body(v, f"/run/changed/task?task={tasks[0]['task_id']}")
    ref = body.split('id="task-reference"')[1].split("</section>")[0]
    assert "has changed since this run" in ref and "<pre>" not in ref
    ok = _body(v, f"/run/changed/task?task={tasks[1]['task_id']}")
    assert "checked against the run" in ok


def test_job_page_shows_each_failure_once_and_names_the_arm(site) -> None:
    v, tasks = site
    from elo_per_token.contracts.jobs import Job

    key = Job(
        run_id="x", task={"task_id": tasks[0]["task_id"], "family": "math"}, strategy="greedy", budget_n=1
    ).key
    body = _body(v, f"/run/builtin/job?key={key}")
    assert body.count('class="failed-assert"') == 1
    assert body.count("the-test-source") == 1, body.count("the-test-source")
    crumbs = body.split('<nav class="crumbs">')[1].split("</nav>")[0]
    assert ">greedy@1<" in crumbs and crumbs.index("greedy@1") < crumbs.index(tasks[0]["task_id"])


def test_favicon_is_served(site) -> None:
    v, _ = site
    for path in ("/favicon.ico", "/static/favicon.svg"):
        r = request(v.port, path)
        assert r.status == 200 and r.headers["content-type"] == "image/svg+xml" and r.body.startswith(b"<svg")
    assert '<link rel="icon" href="/static/favicon.svg"' in _body(v, "/")
