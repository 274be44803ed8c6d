"""One S3 configuration (ledger/s3config.py) for the ledger's boto3 client, the analysis reader and polars.

Before it, the ledger honoured AWS_ENDPOINT_URL_S3 while the analysis reader and polars `storage_options` read
only AWS_ENDPOINT_URL, so a run written to one server was read from another. The end-to-end test points
AWS_ENDPOINT_URL_S3 at a real SeaweedFS and AWS_ENDPOINT_URL at a closed port: writing with the ledger and
reading with the io reader and `ept analyze` must both reach SeaweedFS.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import fixtures_ledger as ledger_gen
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.ledger.s3config import S3_ENV_VARS, s3_settings, storage_options

REPO = Path(__file__).resolve().parents[2]


def test_service_specific_endpoint_wins_as_in_boto3():
    env = {"AWS_ENDPOINT_URL_S3": "http://s3.example:1", "AWS_ENDPOINT_URL": "http://all.example:2"}
    assert s3_settings(env).endpoint == "http://s3.example:1"
    assert storage_options(env)["aws_endpoint_url"] == "http://s3.example:1"
    assert s3_settings({"AWS_ENDPOINT_URL_S3": "", "AWS_ENDPOINT_URL": "http://all.example:2"}).endpoint == (
        "http://all.example:2"
    )
    assert s3_settings({}).endpoint is None and s3_settings({}).region == "us-east-1"
    assert s3_settings({"AWS_DEFAULT_REGION": "eu-west-1"}).region == "eu-west-1"
    assert s3_settings({"AWS_DEFAULT_REGION": "eu-west-1", "AWS_REGION": "ap-south-1"}).region == "ap-south-1"


_values = st.one_of(st.just(""), st.text(max_size=200), st.text(alphabet="htps:/.0123456789abc", max_size=50))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from((*S3_ENV_VARS, "OTHER")), _values))
def test_any_environment_resolves_consistently_fast_and_small(env):
    """Hostile/degenerate environment values: the boto3 settings and polars options always agree."""
    tracemalloc.start()
    t0 = time.perf_counter()
    s = s3_settings(env)
    opts = storage_options(env)
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 1.0 and peak < 1_000_000
    assert opts.get("aws_endpoint_url") == s.endpoint
    assert s.endpoint == (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None)
    assert opts["aws_region"] == s.region and s.region
    assert opts.get("aws_access_key_id") == s.access_key_id
    assert ("aws_skip_signature" in opts) == (s.access_key_id is None)
    assert ("aws_allow_http" in opts) == bool(s.endpoint and s.endpoint.startswith("http://"))


@pytest.mark.services
def test_ledger_and_reader_reach_the_same_server(s3_bucket, s3_env, monkeypatch, tmp_path):
    from fixtures_services import free_port

    from elo_per_token.analysis.io import read_records
    from elo_per_token.ledger import open_ledger

    closed = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_env.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", closed)
    led = open_ledger(f"s3://{s3_bucket}/l")
    ledger_gen.write_s3(led, "r", 40)
    # Compacted segments are read by polars (storage_options); objects outside a run by the reader's boto3 client.
    from elo_per_token.ledger.segments import compact_run

    compact_run(led, "r")
    ledger_gen.write_s3(led, "r", 10, offset=40)
    from fixtures_services import s3_client

    body = b"".join(led.get_jobs("r", sorted(led.iter_job_keys("r"))[:3]))
    s3_client(s3_env.endpoint).put_object(Bucket=s3_bucket, Key="loose/calls.jsonl", Body=body)
    loose = read_records([f"s3://{s3_bucket}/loose/"])
    assert loose.frame.height > 0 and loose.files == [f"s3://{s3_bucket}/loose/calls.jsonl"]
    # The io reader: boto3 listing + polars (object_store) reads, both through storage_options / s3_settings.
    frame = read_records([f"s3://{s3_bucket}/l/runs/r/jobs"])
    assert frame.frame.height > 0 and not frame.skipped
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "500"}
    for i, args in enumerate((["r", "--ledger", f"s3://{s3_bucket}/l"], [f"s3://{s3_bucket}/l/runs/r/jobs"])):
        out = tmp_path / str(i)
        r = subprocess.run([sys.executable, "-m", "elo_per_token", "analyze", *args, "--rounds", "5", "--no-plots",
                            "--out", str(out)], capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert (out / "arms.csv").is_file() and closed not in r.stderr
