"""An S3 store makes its boto3 client once, however many threads reach it first at the same moment (issue 39:
a Celery worker's 16 threads each made one on their first job: ~0.1 s of CPU each and ~500k objects in
reference cycles for a full garbage collection mid-sweep), and the fast path is set up before any thread
can see the client."""

from __future__ import annotations

import threading

import pytest

from elo_per_token.ledger import open_ledger

pytestmark = pytest.mark.services


def test_sixteen_threads_at_once_share_one_client_and_one_bucket_check(s3_bucket, monkeypatch):
    import boto3.session

    made: list[object] = []
    real = boto3.session.Session.client

    def counting(self, *a, **kw):
        made.append(a)
        return real(self, *a, **kw)

    monkeypatch.setattr(boto3.session.Session, "client", counting)
    led = open_ledger(f"s3://{s3_bucket}/once")
    start = threading.Barrier(16)
    seen: list[tuple[object, object]] = []
    errors: list[BaseException] = []

    def first_job(i: int) -> None:
        try:
            start.wait()
            led.put_job("r", f"math/t-{i}/greedy_n1/r0", b'{"kind":"outcome"}\n')
            store = led.store
            seen.append((store.client, store._signed))
        except BaseException as e:  # reported below, with the thread's failure
            errors.append(e)

    threads = [threading.Thread(target=first_job, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(made) == 1, f"{len(made)} boto3 clients made"
    assert len({id(c) for c, _ in seen}) == 1 and all(s is not None for _, s in seen)
    assert len(led.list_jobs("r")) == 16
