"""Measure every fault scenario and write docs/reliability.md.

    python benchmarks/reliability_table.py            # all six faults (~6-8 min on 2 cores)
    python benchmarks/reliability_table.py -k redis   # a subset (pytest -k expression)

Each scenario is the fault test in tests/system/test_fault_*.py, run with real processes (Redis, SeaweedFS, Celery
worker subprocesses, the simulator over HTTP). With EPT_RELIABILITY_OUT set, each test also runs the same plan
cleanly (local executor, fault-free simulator, same seeds) and writes what it measured: jobs, records,
duplicates, lost jobs, requests at the simulator, and tokens against the clean run. This script collects those
rows, prints the table and writes docs/reliability.md. A test that fails still leaves its row out and is listed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_fault_*.py"))
COLUMNS = ("fault", "injected", "jobs", "in ledger", "records", "duplicates", "lost", "failed", "requests",
           "tokens", "clean-run tokens", "tokens = clean")  # fmt: skip


def run(k: str | None) -> tuple[list[dict], dict[str, str], float]:
    out = Path(tempfile.mkdtemp(prefix="ept-reliability-"))
    junit = out / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", *TESTS, "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning",
           f"--junitxml={junit}"]  # fmt: skip
    if k:
        cmd += ["-k", k]
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=REPO, env={**os.environ, "EPT_RELIABILITY_OUT": str(out / "rows")}, check=False)
    elapsed = time.monotonic() - t0
    rows = (
        [json.loads(p.read_text()) for p in sorted((out / "rows").glob("*.json"))]
        if (out / "rows").exists()
        else []
    )
    outcomes: dict[str, str] = {}
    if junit.exists():
        for tc in ET.parse(junit).getroot().iter("testcase"):
            name = f"{tc.get('classname', '').rsplit('.', 1)[-1]}::{tc.get('name')}"
            bad = tc.find("failure") is not None or tc.find("error") is not None
            outcomes[name] = "skipped" if tc.find("skipped") is not None else ("FAILED" if bad else "passed")
    return rows, outcomes, elapsed


def _cell(v: object) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v).replace("|", "\\|")


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        vals = [r["fault"], r["injected"], r["jobs"], r["jobs_in_ledger"], r["records"], r["duplicates"], r["lost"],
                r["failed"], r["requests_at_simulator"], r["tokens"], r["tokens_clean"], r["tokens_match_clean"]]  # fmt: skip
        lines.append("| " + " | ".join(_cell(v) for v in vals) + " |")
    return "\n".join(lines)


def write_doc(rows: list[dict], outcomes: dict[str, str], elapsed: float, k: str | None) -> str:
    notes = "\n".join(f"- **{r['fault']}**: {r['notes']}" for r in rows if r.get("notes"))
    tests = "\n".join(f"- `{n}`: {o}" for n, o in sorted(outcomes.items()))
    impl = sorted({r["job_impl"] for r in rows})
    cmd = "python benchmarks/reliability_table.py" + (f" -k '{k}'" if k else "")
    return f"""# Reliability: faults survived, nothing lost

Produced by `{cmd}` on {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
({platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, {elapsed:.0f} s for all
scenarios). Every row is measured by the fault test of the same number in `tests/system/test_fault_*.py`, with real
processes: Redis, SeaweedFS (S3), Celery worker subprocesses and the simulator over HTTP. Rerun the command to
regenerate this page; the same tests run in CI (marked `slow` and `services`).

Columns: **jobs** planned; **in ledger** job objects found afterwards; **records** JSONL lines (calls + outcomes)
in them; **duplicates** job keys or (job, call index) pairs stored more than once; **lost** planned jobs with
neither a result nor a failure record; **failed** jobs left with only a failure record; **requests** completion
requests the simulator received (retries and work lost in killed processes included); **tokens** prompt +
completion tokens of the stored calls; **clean-run tokens** the same plan and seeds on the local executor against
a fault-free simulator. Job function: {", ".join(f"`{i}`" for i in impl) or "—"}.

{table(rows)}

Notes:
{notes or "- none"}

What each scenario checks beyond the table (see the test files for the assertions):
1. Worker SIGKILL: the sweep finishes on the surviving worker once the killed workers' unacknowledged messages
   come back (visibility timeout 10 s in the test); tokens per arm equal the clean run's exactly.
2. Redis restart: workers reconnect on their own; the coordinator rides out the outage (it used to crash with a
   redis ConnectionError — fixed in coordinator/celery_exec.py). 2a: Redis with an append-only file keeps the
   queue; requests per job = recorded calls. 2b: Redis without persistence (as in docker-compose.yml) comes back
   empty; the coordinator notices (a marker key is gone) and enqueues the unfinished jobs again (it used to wait
   forever); the per-job claims were wiped too, so a job still running at the restart could run twice (the
   ledger keeps one copy) — the requests column shows whether that happened.
3. S3 outage: job writes wait for S3 (the S3 ledger used to give up after ~6 s and lose finished jobs — fixed in
   ledger/store.py, `EPT_S3_PATIENCE_S`, default 180 s); no partial objects or multipart leftovers.
4. Provider faults: 429 (Retry-After honoured), 5xx, hangs past the timeout and malformed JSON are retried and
   the attempts are on the call records; missing usage is null + flagged on the record and counted in
   `calls_missing_usage` of the token table (never zero); short replies are recorded as such.
5. Credential 401 mid-run: no retries (attempts = 1), the sweep stops after a short streak (it used to send one
   doomed request per remaining job once any job had succeeded — fixed in coordinator/sweep.py), the message
   names `$EPT_SIM_API_KEY` and masks the key; after the fix the same command resumes and completes.
6. Coordinator SIGKILL: the rerun skips what landed and re-enqueues the rest; duplicates of still-queued messages
   are absorbed by the per-job claim and the conditional create: requests per job = recorded calls.

Test outcomes in this run:
{tests or "- (no junit report)"}
"""


HAND_WRITTEN = "\n## Hostile input"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", help="pytest -k expression to run a subset")
    ap.add_argument("--out", default=str(REPO / "docs" / "reliability.md"))
    args = ap.parse_args()
    rows, outcomes, elapsed = run(args.k)
    rows.sort(key=lambda r: r["fault"])
    print(table(rows))
    for n, o in sorted(outcomes.items()):
        print(f"{o:8s} {n}")
    out = Path(args.out)
    # Hand-written sections after the generated part (e.g. "## Hostile input") are kept as they are.
    old = out.read_text() if out.exists() else ""
    kept = old[old.index(HAND_WRITTEN) :] if HAND_WRITTEN in old else ""
    out.write_text(write_doc(rows, outcomes, elapsed, args.k) + ("\n" + kept if kept else ""))
    print(f"wrote {args.out}")
    if any(o == "FAILED" for o in outcomes.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
