"""Check a compose sweep's ledger straight from the S3 bucket (boto3, not the project's ledger code).

Run inside a container of the compose project that holds the S3 credentials (the `worker` service), fed on
stdin by .ci/compose_e2e.sh:  python - RUN_ID [--count]  <.ci/compose_check.py

Prints one JSON line. Exit 0 only when every declared job key has exactly one job object, no job object is
outside the declared key space, no failure object is left and each job object holds one outcome line for its
own key; with `--exact-calls`, also only when the simulator answered exactly the calls the job objects record.
`--count` prints only the number of job objects so far (progress polling); `--reset-simulator` zeroes the
simulator's counters.
"""

from __future__ import annotations

import io
import json
import os
import sys
import urllib.request

import boto3
import polars as pl

BUCKET, PREFIX = "ept-ledger", "sweeps/runs"


def list_keys(s3: object, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)  # type: ignore[attr-defined]
    return [o["Key"] for p in pages for o in p.get("Contents", [])]


def sim(route: str, method: str = "GET") -> dict[str, object]:
    """The simulator's control routes (the worker shares its network); {} if unreachable."""
    req = urllib.request.Request(
        f"http://simulator:8765/_sim/{route}", data=b"{}" if method == "POST" else None, method=method
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return dict(json.load(r))
    except OSError:
        return {}


def main(run: str, flags: list[str]) -> int:
    if "--reset-simulator" in flags:  # count the next run's provider requests from zero
        print(json.dumps(sim("reset", "POST")))
        return 0
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    base = f"{PREFIX}/{run}/"
    jobs = list_keys(s3, base + "jobs/")
    if "--count" in flags:
        print(len(jobs))
        return 0
    names = [k[len(base + "jobs/") : -len(".jsonl")] for k in jobs]
    declared: set[str] = set()
    for k in list_keys(s3, base + "planned/"):
        if k.endswith(".parquet"):
            body = s3.get_object(Bucket=BUCKET, Key=k)["Body"].read()
            declared |= set(pl.read_parquet(io.BytesIO(body))["job_key"].to_list())
    calls = tokens = 0
    bad: list[str] = []
    suites: dict[str, int] = {}
    for key, name in zip(jobs, names, strict=True):
        lines = [
            json.loads(x)
            for x in s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().splitlines()
            if x.strip()
        ]
        outcomes = [x for x in lines if x.get("kind") == "outcome"]
        if len(outcomes) != 1 or any(x.get("job_key") != name for x in lines):
            bad.append(name)
        for x in lines:
            if x.get("kind") == "call":
                calls += 1
                tokens += int((x.get("usage") or {}).get("total_tokens") or 0)
        fam = str(outcomes[0].get("family", "?")) if outcomes else "?"
        suites[fam] = suites.get(fam, 0) + 1
    failures = list_keys(s3, base + "failures/")
    report = {
        "run": run,
        "declared": len(declared),
        "job_objects": len(jobs),
        "distinct": len(set(names)),
        "missing": len(declared - set(names)),
        "undeclared": len(set(names) - declared),
        "failures": len(failures),
        "malformed": len(bad),
        "calls_in_ledger": calls,
        "tokens_in_ledger": tokens,
        "jobs_by_family": suites,
        "simulator_completions": sim("stats").get("completion_requests"),
    }
    # Provider requests the simulator answered but no job object records: paid for twice or lost.
    report["unrecorded_calls"] = int(report["simulator_completions"] or 0) - calls  # type: ignore[call-overload]
    print(json.dumps(report, sort_keys=True))
    ok = declared and len(jobs) == len(set(names)) == len(declared) and not report["missing"]
    exact = "--exact-calls" not in flags or report["unrecorded_calls"] == 0
    return 0 if ok and exact and not report["undeclared"] and not failures and not bad else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
