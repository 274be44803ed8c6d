"""Ledger: exclusive job creates, overwritable failures, manifest, listing — on a folder and on real S3."""

from __future__ import annotations

import json
import threading

import pytest

from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger import FileLedger, S3Ledger, open_ledger


def _ledger(kind: str, tmp_path, request):
    if kind == "file":
        return FileLedger(tmp_path / "ledger")
    bucket = request.getfixturevalue("s3_bucket")
    return open_ledger(f"s3://{bucket}/some/prefix")


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.services)])
def ledger(request, tmp_path):
    return _ledger(request.param, tmp_path, request)


def test_job_create_is_exclusive_and_listable(ledger):
    assert ledger.list_jobs("r1") == set()
    assert not ledger.has_job("r1", "math/t-1/greedy_n1/r0")
    assert ledger.put_job("r1", "math/t-1/greedy_n1/r0", b'{"a":1}\n') is True
    # A second writer (a redelivered job) must not replace the first copy.
    assert ledger.put_job("r1", "math/t-1/greedy_n1/r0", b'{"a":2}\n') is False
    assert ledger.get_job("r1", "math/t-1/greedy_n1/r0") == b'{"a":1}\n'
    assert ledger.has_job("r1", "math/t-1/greedy_n1/r0")
    ledger.put_job("r1", "code/c-2/majority_n4/r1", b"x\n")
    assert ledger.list_jobs("r1") == {"math/t-1/greedy_n1/r0", "code/c-2/majority_n4/r1"}
    assert ledger.list_jobs("other") == set()


def test_concurrent_creates_have_one_winner(ledger):
    wins: list[bool] = []
    barrier = threading.Barrier(12)

    def write(i: int) -> None:
        barrier.wait()
        wins.append(ledger.put_job("race", "f/t/a/r0", f"writer {i}\n".encode()))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins.count(True) == 1
    body = ledger.get_job("race", "f/t/a/r0").decode()
    assert body.startswith("writer ") and body.endswith("\n")


def test_failures_overwrite_and_delete(ledger):
    ledger.put_failure("r", "f/t/a/r0", {"class": "transient", "attempt": 1})
    ledger.put_failure("r", "f/t/a/r0", {"class": "rate_limit", "attempt": 2})
    ledger.put_failure("r", "f/u/a/r0", {"class": "credential"})
    fails = ledger.list_failures("r")
    assert fails == {"f/t/a/r0": {"class": "rate_limit", "attempt": 2}, "f/u/a/r0": {"class": "credential"}}
    ledger.delete_failure("r", "f/t/a/r0")
    ledger.delete_failure("r", "missing/k/a/r0")  # deleting nothing is fine
    assert set(ledger.list_failures("r")) == {"f/u/a/r0"}
    # Failures never show up as results.
    assert ledger.list_jobs("r") == set()


def test_manifest_roundtrip_and_runs(ledger):
    assert ledger.get_manifest("run-a") is None
    ledger.put_manifest("run-a", {"plan": {"name": "run-a"}, "n": 1})
    ledger.put_manifest("run-a", {"plan": {"name": "run-a"}, "n": 2})
    assert ledger.get_manifest("run-a") == {"plan": {"name": "run-a"}, "n": 2}
    ledger.put_job("run-b", "f/t/a/r0", b"{}\n")
    assert ledger.list_runs() == ["run-a", "run-b"]
    assert ledger.run_url("run-a").endswith("runs/run-a")


def test_file_ledger_leaves_no_temp_files(tmp_path):
    led = FileLedger(tmp_path)
    led.put_job("r", "f/t/a/r0", b"1\n")
    led.put_job("r", "f/t/a/r0", b"2\n")
    led.put_failure("r", "f/t/a/r0", {"x": 1})
    names = [p.name for p in tmp_path.rglob("*") if p.is_file()]
    assert sorted(names) == ["r0.json", "r0.jsonl"]


def test_open_ledger_urls(tmp_path):
    assert isinstance(open_ledger(str(tmp_path)), FileLedger)
    f = open_ledger(f"file://{tmp_path}/x")
    assert isinstance(f, FileLedger) and f.url == str(tmp_path / "x")
    s = open_ledger("s3://bkt/a/b/")
    assert isinstance(s, S3Ledger) and (s.bucket, s.prefix) == ("bkt", "a/b")
    assert open_ledger("s3://bkt").prefix == ""
    for bad in ("", "s3://", "gs://bkt/x"):
        with pytest.raises(InputError) as ei:
            open_ledger(bad)
        assert ei.value.field == "ledger"
    with pytest.raises(InputError):
        FileLedger(tmp_path).put_job("../evil", "k", b"")


@pytest.mark.services
def test_s3_objects_visible_to_plain_boto3(s3_bucket):
    import boto3

    led = open_ledger(f"s3://{s3_bucket}/pre")
    led.put_job("r", "math/t-1/greedy_n1/r0", b'{"kind":"outcome"}\n')
    led.put_manifest("r", {"k": 1})
    keys = sorted(o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=s3_bucket)["Contents"])
    assert keys == ["pre/runs/r/jobs/math/t-1/greedy_n1/r0.jsonl", "pre/runs/r/manifest.json"]
    body = boto3.client("s3").get_object(Bucket=s3_bucket, Key="pre/runs/r/manifest.json")["Body"].read()
    assert json.loads(body) == {"k": 1}


@pytest.mark.services
def test_s3_retries_connection_errors_then_fails(monkeypatch):
    from botocore.exceptions import EndpointConnectionError
    from fixtures_services import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    led = S3Ledger("nobucket", "p", attempts=2)
    calls = []
    real = led.store._retry

    def counting(fn):
        def wrapped():
            calls.append(1)
            return fn()

        return real(wrapped)

    led.store._retry = counting  # count attempts of our own retry loop (the S3 store's)
    with pytest.raises(EndpointConnectionError):
        led.has_job("r", "k")
    assert len(calls) == 2
