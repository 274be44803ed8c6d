"""Ledger storage: where a run's manifest, job records and failures live (a local folder or S3).

Key layout under the ledger root (a folder, or s3://bucket/prefix):

    runs/<run_id>/manifest.json          the plan, code version, public profile, start times
    runs/<run_id>/jobs/<job.key>.jsonl   the bytes of JobResult.to_jsonl() — written ONCE (conditional create)
    runs/<run_id>/failures/<job.key>.json  the last failure of a job (overwritable; deleted when it succeeds)
    runs/<run_id>/compact/part-NNNNN.parquet  a segment: the records of some job objects (`ept compact`)
    runs/<run_id>/compact/part-NNNNN.keys     its index: the job keys it holds (Parquet, one column);
                                            written after the segment, so it is the segment's commit
    runs/<run_id>/planned/keys-<digest>.parquet  job keys a session declared before writing any (so readers
                                            of a compacted run need not list jobs/: ledger/keyspace.py)
    runs/<run_id>/planned/listed-<digest>.parquet  the job keys `ept compact` found listing a run that
                                            declared none (written by another tool): readers use them likewise
    runs/<run_id>/planned/open-<id>         a writer that could not declare its keys: readers list

Segments are derived copies (see ledger/segments.py): the job objects stay the source of truth.

The layout is written once, in `Ledger`, over an object store (ledger/objects.py): a local folder
(ledger/local.py) or S3 (ledger/s3.py). `FileLedger` and `S3Ledger` only choose the store.

Job objects are created exclusively, so a redelivered or duplicated job can never add a second copy:
a local write goes to a temporary file that is hard-linked into place (link fails if the name exists,
and readers never see a partial file); an S3 write uses `put_object(IfNoneMatch='*')`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.finite import dumps_finite
from elo_per_token.contracts.keys import check_key
from elo_per_token.contracts.settings import read_float
from elo_per_token.ledger.local import LocalStore
from elo_per_token.ledger.objects import ObjectStore, strip_suffix
from elo_per_token.ledger.s3 import S3Store
from elo_per_token.ledger.s3config import s3_settings

# Where `ept demo`, plans without a `ledger` and commands given a bare run id keep runs (relative to the cwd).
DEFAULT_LEDGER = "./ept-out/ledger"

JOB_SUFFIX = ".jsonl"
FAILURE_SUFFIX = ".json"
MANIFEST = "manifest.json"


def _check_run_id(run_id: str) -> None:
    if not run_id or "/" in run_id or run_id.startswith(".") or any(c.isspace() for c in run_id):
        raise InputError(f"invalid run id {run_id!r} (no slashes, spaces or leading dot)", field="run_id")


class Ledger:
    """A run's storage over an object store: the key layout of the module docstring, in one place. `run_id`
    is checked (no slashes, spaces or leading dot) and job keys by contracts.keys.check_key before any
    object is touched."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.url = store.url()  # the ledger's root: a folder path or s3://bucket[/prefix]
        self.checked_runs: set[str] = set()  # runs run_exists found (runs are not deleted by ept)

    def _run(self, run_id: str) -> str:
        _check_run_id(run_id)
        return f"runs/{run_id}"

    def _job(self, run_id: str, key: str) -> str:
        return f"{self._run(run_id)}/jobs/{check_key(key)}{JOB_SUFFIX}"

    def _failure(self, run_id: str, key: str) -> str:
        return f"{self._run(run_id)}/failures/{check_key(key)}{FAILURE_SUFFIX}"

    def run_url(self, run_id: str) -> str:
        """Where the run's objects live (a folder path or s3://…/runs/<run_id>); nothing is read.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
        """
        return self.store.url(self._run(run_id))

    def run_exists(self, run_id: str) -> bool:
        """Whether the run has any object (S3: one LIST of at most one key; a diagnosed InputError when the
        endpoint, credentials or bucket are wrong).

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
        """
        if run_id in self.checked_runs:
            return True
        found = self.store.has_prefix(self._run(run_id) + "/")
        if found:
            self.checked_runs.add(run_id)
        return found

    def get_manifest(self, run_id: str) -> dict[str, Any] | None:
        """The run's manifest.json, parsed; None when the run has none.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
        """
        raw = self.store.get(f"{self._run(run_id)}/{MANIFEST}")
        return json.loads(raw) if raw is not None else None

    def put_manifest(self, run_id: str, manifest: dict[str, Any]) -> None:
        """Write (replace) the run's manifest.json: finite JSON, indented, keys sorted.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            manifest: The manifest (finite JSON values only).
        """
        body = dumps_finite(manifest, indent=2, sort_keys=True).encode()
        self.store.put(f"{self._run(run_id)}/{MANIFEST}", body, content_type="application/json")

    def has_job(self, run_id: str, key: str) -> bool:
        """Whether the job object `key` exists (a stat locally, a HEAD on S3).

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            key: The job key (checked by contracts.keys.check_key).
        """
        return self.store.exists(self._job(run_id, key))

    def put_job(self, run_id: str, key: str, data: bytes) -> bool:
        """Create the job object `key` with `data`, exclusively: True if this call created it, False if it
        already existed (a redelivered or duplicated job: the first copy stands, `data` is dropped).

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            key: The job key (checked by contracts.keys.check_key).
            data: The object's bytes.
        """
        return self.store.create(self._job(run_id, key), data)

    def get_job(self, run_id: str, key: str) -> bytes:
        """The job object's bytes; FileNotFoundError if there is none.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            key: The job key (checked by contracts.keys.check_key).
        """
        return self.store.get_many([self._job(run_id, key)], threads=1)[0]

    def list_jobs(self, run_id: str) -> set[str]:
        """Every job key of the run (a full listing).

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
        """
        return set(self.iter_job_keys(run_id))

    def iter_job_keys(self, run_id: str) -> Iterator[str]:
        """Every job key of the run as found (no order), streamed.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
        """
        return self.store.list_suffix(f"{self._run(run_id)}/jobs/", JOB_SUFFIX)

    def iter_job_keys_split(self, run_id: str, bounds: list[str], threads: int = 8) -> Iterator[str]:
        """Every job key of the run, listed as key ranges split at `bounds` (known keys, any order) in
        parallel where the store lists a page at a time (S3); elsewhere the same as iter_job_keys.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            bounds: Known job keys (any order) at which the key range is split.
            threads: Reads (or listings) in flight at once.
        """
        return self.store.list_suffix(
            f"{self._run(run_id)}/jobs/", JOB_SUFFIX, bounds=bounds, threads=threads
        )

    def get_jobs(self, run_id: str, keys: list[str], threads: int = 16) -> list[bytes]:
        """The job objects' bytes in `keys` order, `threads` reads in flight; FileNotFoundError if one is
        missing.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            keys: The job keys to read.
            threads: Reads (or listings) in flight at once.
        """
        base = f"{self._run(run_id)}/jobs/"
        return self.store.get_many([base + k + JOB_SUFFIX for k in keys], threads=threads)

    def job_url(self, run_id: str, key: str) -> str:
        """The job object's URL (a path locally), for messages and for polars' own readers.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            key: The job key (checked by contracts.keys.check_key).
        """
        return self.store.url(self._job(run_id, key))

    def put_failure(self, run_id: str, key: str, failure: dict[str, Any]) -> None:
        """Record (replace) the last failure of job `key`.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            key: The job key (checked by contracts.keys.check_key).
            failure: The failure record (finite JSON values only).
        """
        self.store.put(self._failure(run_id, key), dumps_finite(failure, sort_keys=True).encode())

    def delete_failure(self, run_id: str, key: str) -> None:
        """Remove job `key`'s failure object (none there: nothing happens).

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            key: The job key (checked by contracts.keys.check_key).
        """
        self.store.delete(self._failure(run_id, key))

    def iter_failure_keys(self, run_id: str) -> Iterator[str]:
        """Keys of the jobs that have a failure object, streamed (no object read).

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
        """
        for name in self.store.list(f"{self._run(run_id)}/failures/"):
            k = strip_suffix(name, FAILURE_SUFFIX)
            if k:
                yield k

    def list_failures(self, run_id: str) -> dict[str, dict[str, Any]]:
        """Every failure object of the run, by job key (each object read).

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
        """
        base = f"{self._run(run_id)}/failures/"
        out = {}
        for name in list(self.store.list(base)):
            key = strip_suffix(name, FAILURE_SUFFIX)
            raw = self.store.get(base + name) if key else None
            if key and raw is not None:  # None: deleted by a worker that just succeeded
                out[key] = json.loads(raw)
        return out

    def blob_url(self, run_id: str, name: str) -> str:
        """The object `name`'s URL (a path locally).

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            name: The object's path relative to the run (e.g. "compact/segment-0001.jsonl").
        """
        return self.store.url(f"{self._run(run_id)}/{name}")

    def put_blob(self, run_id: str, name: str, data: bytes) -> str:
        """Write (replace) the object `name` (a path relative to the run); returns its URL.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            name: The object's path relative to the run (e.g. "compact/segment-0001.jsonl").
            data: The object's bytes.
        """
        key = f"{self._run(run_id)}/{name}"
        self.store.put(key, data)
        return self.store.url(key)

    def create_blob(self, run_id: str, name: str, src: str | Path) -> bool:
        """Create the object `name` from the local file `src`, exclusively: False if it already exists.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            name: The object's path relative to the run (e.g. "compact/segment-0001.jsonl").
            src: The local file whose bytes the object gets.
        """
        return self.store.create_from_file(f"{self._run(run_id)}/{name}", src)

    def create_object(self, run_id: str, name: str, data: bytes) -> bool:
        """Create the object `name` with `data`, exclusively, as job objects are: False if it already exists
        (the run lease, coordinator/runlease.py, is taken this way).

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            name: The object's path relative to the run (e.g. "compact/segment-0001.jsonl").
            data: The object's bytes.
        """
        return self.store.create(f"{self._run(run_id)}/{name}", data)

    def get_blob(self, run_id: str, name: str) -> bytes | None:
        """The object `name`'s bytes; None when there is none.

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            name: The object's path relative to the run (e.g. "compact/segment-0001.jsonl").
        """
        return self.store.get(f"{self._run(run_id)}/{name}")

    def list_blobs(self, run_id: str, prefix: str) -> list[str]:
        """Names (relative to the run, sorted) of the objects directly under the folder `prefix` ("compact/").

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            prefix: A folder relative to the run, with its trailing slash ("compact/").
        """
        return sorted(prefix + n for n in self.store.list(f"{self._run(run_id)}/{prefix}") if "/" not in n)

    def delete_blob(self, run_id: str, name: str) -> None:
        """Remove the object `name` (none there: nothing happens).

        Args:
            run_id: The run's id (checked: no slashes, spaces or leading dot).
            name: The object's path relative to the run (e.g. "compact/segment-0001.jsonl").
        """
        self.store.delete(f"{self._run(run_id)}/{name}")

    def list_runs(self) -> list[str]:
        """The run ids the ledger holds, sorted."""
        return self.store.list_dirs("runs/")


class FileLedger(Ledger):
    """A ledger in a local folder (ledger/local.py). Safe for many threads and processes on one filesystem."""

    store: LocalStore

    def __init__(self, root: str | Path, *, fsync: bool | None = None) -> None:
        super().__init__(LocalStore(root, fsync=fsync))
        self.root = self.store.root


class S3Ledger(Ledger):
    """A ledger in an S3 bucket under a prefix (ledger/s3.py: endpoint, credentials and region from the
    standard AWS environment variables)."""

    store: S3Store

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        create_bucket: bool = True,
        attempts: int = 6,
        patience_s: float = 0.0,
    ) -> None:
        super().__init__(
            S3Store(
                bucket,
                prefix,
                client=client,
                create_bucket=create_bucket,
                attempts=attempts,
                patience_s=patience_s,
            )
        )
        self.bucket = self.store.bucket
        self.prefix = self.store.prefix

    @property
    def client(self) -> Any:
        """The boto3 client (built on first use; a writer's first use also makes sure the bucket exists)."""
        return self.store.client


def open_ledger(url: str | Path) -> Ledger:
    """`s3://bucket/prefix` -> S3Ledger; `file:///path` or a plain path -> FileLedger.

    Args:
        url: A path, `file:///path` or `s3://bucket/prefix`.
    """
    s = str(url).strip()
    if not s:
        raise InputError("empty ledger URL", field="ledger")
    if s.startswith("s3://"):
        rest = s[len("s3://") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise InputError(f"ledger URL {s!r} has no bucket (expected s3://bucket/prefix)", field="ledger")
        # Ride out S3 outages up to EPT_S3_PATIENCE_S (default 180 s) before a write is given up.
        return S3Ledger(bucket, prefix, patience_s=read_float("EPT_S3_PATIENCE_S"))
    if s.startswith("file://"):
        return FileLedger(s[len("file://") :] or "/")
    if "://" in s:
        raise InputError(
            f"unsupported ledger URL {s!r} (use a path, file://… or s3://bucket/prefix)", field="ledger"
        )
    return FileLedger(s)


_READERS: dict[tuple[str, ...], S3Ledger] = {}


def open_ledger_for_reading(url: str | Path) -> Ledger:
    """A ledger to read from: an S3 ledger fails fast (no outage patience, no bucket creation), so a wrong
    endpoint, key or bucket is reported at once rather than retried for minutes. One S3 reader per ledger
    and endpoint/credentials per process: a boto3 client costs ~0.3-1 s to build, and a command resolves
    its run and then opens it (which also checks the run once, not twice).

    Args:
        url: A path, `file:///path` or `s3://bucket/prefix`.
    """
    led = open_ledger(url)
    if isinstance(led, S3Ledger):
        # One reader per endpoint and credentials: s3_settings is the one read of the AWS variables.
        cache_key = (led.url, *dataclasses.astuple(s3_settings()))
        if cache_key not in _READERS:
            _READERS[cache_key] = S3Ledger(
                led.bucket, led.prefix, create_bucket=False, attempts=2, patience_s=0.0
            )
        return _READERS[cache_key]
    return led


def check_run(led: Ledger, run_id: str) -> None:
    """InputError unless the ledger is reachable and holds the run; the error lists the runs it does hold.

    Args:
        led: The ledger to look in.
        run_id: The run's id (checked: no slashes, spaces or leading dot).
    """
    _check_run_id(run_id)
    if not led.run_exists(run_id):
        runs = led.list_runs()
        shown = ", ".join(runs[:30]) + (f" … ({len(runs)} in all)" if len(runs) > 30 else "")
        raise InputError(
            f"no run {run_id!r} in ledger {led.url}; it holds: {shown or 'no runs'}", field="RUN"
        )
