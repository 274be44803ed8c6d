"""The S3 object store (boto3), with its fast paths: HEAD and conditional PUT of small objects as one signed
HTTP request each (`_SignedRequests`), listings split into key ranges listed in parallel, and many GETs in
flight. Every request goes through the one retry policy (ledger/retry.py); credential and endpoint problems
become InputErrors naming what to fix (`raise_if_credentials`, `s3_problem`)."""

from __future__ import annotations

import builtins
import functools
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from elo_per_token.contracts.errors import InputError
from elo_per_token.ledger.objects import strip_suffix
from elo_per_token.ledger.retry import retrying
from elo_per_token.ledger.s3config import endpoint_label, s3_settings

T = TypeVar("T")

_S3_CREDENTIAL_CODES = (
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "InvalidToken",
    "ExpiredToken",
)


def raise_if_credentials(e: Exception, url: str) -> None:
    """Wrong or missing S3 credentials are a setup error (exit 2 naming the variables), not a traceback.

    Args:
        e: The exception a boto3 call raised.
        url: The ledger URL, for the message.
    """
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    code = str(getattr(e, "response", {}).get("Error", {}).get("Code", "")) if hasattr(e, "response") else ""
    if (
        isinstance(e, NoCredentialsError | PartialCredentialsError)
        or code in _S3_CREDENTIAL_CODES
        or s3_status(e) in (401, 403)
    ):
        raise InputError(
            f"S3 refused the credentials for {url} ({code or type(e).__name__}): check AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY and AWS_ENDPOINT_URL (and that this key may read and write the bucket)",
            field="ledger",
        ) from None


def s3_status(e: Exception) -> int:
    """The HTTP status of a botocore error (0 when it has none: a connection error).

    Args:
        e: The exception a boto3 call raised.
    """
    resp = getattr(e, "response", None) or {}
    return int(resp.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


class _SignedRequests:
    """HEAD and PUT of one small object as one SigV4-signed HTTP request each (botocore's credentials chain
    and signer, urllib3's connection pool), without boto3's per-call machinery (event hooks, parameter
    validation and serialisation, response parsing). Those two calls are all a successful job makes (the
    check before its first API call, the conditional create of its result), and boto3 spent 1.0–1.7 ms of
    CPU on each against SeaweedFS where this spends 0.4–0.6 ms (measured side by side). Errors come back as
    botocore ClientErrors with the same status and code, so retries and the credential message are shared
    with every other call, which stays on boto3. Signed by botocore's own S3SigV4Auth: a hand-written signer
    measured 0.13 ms less CPU per request (issue 39), not worth a second implementation of AWS's signature."""

    def __init__(self, session: Any, client: Any) -> None:
        import urllib3
        from botocore.httpsession import get_cert_path

        self._creds = session.get_credentials()
        self._region = client.meta.region_name
        self._endpoint = client.meta.endpoint_url.rstrip("/")
        verify = session.get_config_variable("ca_bundle") or True
        tls = (
            {"cert_reqs": "CERT_REQUIRED", "ca_certs": get_cert_path(verify)}
            if self._endpoint.startswith("https")
            else {}
        )
        self._http = urllib3.PoolManager(
            maxsize=64, timeout=urllib3.Timeout(connect=5, read=60), retries=False, **tls
        )
        # The endpoint's one connection pool, asked directly with the path (PoolManager.request parses the URL
        # and looks the pool up again on every request: ~0.05 ms of 0.25 ms per PUT, measured).
        parts = urlsplit(self._endpoint)
        self._origin, self._base = f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
        self._pool = self._http.connection_from_url(self._origin)

    @staticmethod
    def usable(client: Any) -> bool:
        """Not through an HTTP proxy (boto3 handles those): then every call stays on boto3."""
        from botocore.utils import get_environ_proxies

        return not get_environ_proxies(client.meta.endpoint_url)

    def send(
        self,
        method: str,
        bucket: str,
        key: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        from urllib.parse import quote

        import urllib3
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            EndpointConnectionError,
            NoCredentialsError,
        )

        if self._creds is None:
            raise NoCredentialsError()
        # Path-style, as the boto3 client is configured; keys are checked safe (contracts.keys), quoted anyway.
        path = f"{self._base}/{quote(bucket)}/{quote(key, safe='/~')}"
        url = self._origin + path
        req = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
        # get_frozen_credentials: refreshable credentials are refreshed here.
        S3SigV4Auth(self._creds.get_frozen_credentials(), "s3", self._region).add_auth(req)
        try:
            resp = self._pool.urlopen(
                method, path, body=body, headers=dict(req.headers.items()), retries=False, redirect=False
            )
        except urllib3.exceptions.NewConnectionError as e:
            raise EndpointConnectionError(endpoint_url=url, error=e) from e
        except urllib3.exceptions.HTTPError as e:  # reset, timeout, protocol: as botocore reports them
            raise ConnectionClosedError(endpoint_url=url, error=e) from e
        if resp.status >= 300:
            found = re.search(rb"<Code>([^<]{1,64})</Code>", resp.data or b"")
            code = found.group(1).decode() if found else str(resp.status)
            meta = {"HTTPStatusCode": resp.status}
            op = {"PUT": "PutObject", "HEAD": "HeadObject"}.get(method, method)
            raise ClientError({"Error": {"Code": code, "Message": ""}, "ResponseMetadata": meta}, op)
        return resp


class S3Store:
    """Objects in an S3 bucket under a prefix. Endpoint, credentials and region come from the standard AWS
    environment variables (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    AWS_REGION). `create_bucket`: a writer creates a missing bucket on first use (a reader never does)."""

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
        self._attempts = attempts
        self._patience_s = patience_s
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._client = client
        # The per-job calls (HEAD, conditional PUT) go through this when the store built its own client; an
        # injected client (tests, callers with their own session) gets every call through boto3.
        self._signed: _SignedRequests | None = None
        self._create_bucket = create_bucket
        self._bucket_ok = False
        self._client_lock = threading.Lock()

    @property
    def client(self) -> Any:
        """The boto3 client, made once per store (and the bucket checked or created once, for a writer). Made
        under a lock: a worker's 16 threads all reach their first job's ledger call at once, and each used to
        make a client of its own (issue 39: 15 thrown away per process, ~0.1 s of CPU each, and ~500k objects
        in reference cycles left for a full garbage collection in the middle of the sweep)."""
        if self._client is None or (self._create_bucket and not self._bucket_ok):
            with self._client_lock:
                if self._client is None:
                    self._signed, self._client = self._make_client()
                if self._create_bucket and not self._bucket_ok:
                    self._ensure_bucket()
        return self._client

    @staticmethod
    def _make_client() -> tuple[_SignedRequests | None, Any]:
        """(the fast path, or None behind a proxy; the boto3 client)."""
        import boto3
        import botocore.session
        from botocore.config import Config

        settings = s3_settings()
        endpoint, region = settings.endpoint, settings.region
        cfg = Config(
            region_name=region,
            # Path-style works with every S3-compatible server (SeaweedFS, MinIO) and with AWS.
            s3={"addressing_style": "path"},
            # One try per call: ledger.retry owns the retries and the patience. botocore's own retries nested
            # inside it multiplied both (EPT_S3_PATIENCE_S=4 took 31.9 s against a closed port).
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=64,
            connect_timeout=5,
            read_timeout=60,
        )
        session = botocore.session.get_session()  # shared: one credentials chain for both paths
        client = boto3.session.Session(botocore_session=session).client(
            "s3", endpoint_url=endpoint, config=cfg
        )
        return (_SignedRequests(session, client) if _SignedRequests.usable(client) else None), client

    def _retry(self, fn: Callable[[], T]) -> T:
        try:
            return retrying(fn, attempts=self._attempts, patience_s=self._patience_s)
        except Exception as e:
            raise_if_credentials(e, self.url())
            raise

    def _ensure_bucket(self) -> None:
        c = self._client
        try:
            self._retry(lambda: c.head_bucket(Bucket=self.bucket))
        except Exception as e:
            if s3_status(e) not in (404, 400):
                raise
            try:
                self._retry(lambda: c.create_bucket(Bucket=self.bucket))
            except Exception as e2:
                code = getattr(e2, "response", {}).get("Error", {}).get("Code", "")
                if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise
        self._bucket_ok = True

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def url(self, key: str = "") -> str:
        if not key:
            return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return f"s3://{self.bucket}/{self._full(key)}"

    def _get(self, key: str) -> bytes | None:
        c = self.client
        try:
            body: bytes = self._retry(lambda: c.get_object(Bucket=self.bucket, Key=key))["Body"].read()
            return body
        except Exception as e:
            if s3_status(e) == 404 or getattr(e, "response", {}).get("Error", {}).get("Code") == "NoSuchKey":
                return None
            raise

    def _put(self, key: str, data: bytes, **kw: Any) -> None:
        c = self.client
        fast = self._signed
        if fast is not None and set(kw) <= {"IfNoneMatch"}:
            hdrs = {"If-None-Match": kw["IfNoneMatch"]} if kw else {}
            self._retry(lambda: fast.send("PUT", self.bucket, key, data, hdrs))
            return
        self._retry(lambda: c.put_object(Bucket=self.bucket, Key=key, Body=data, **kw))

    def _exists(self, key: str) -> bool:
        c = self.client
        fast = self._signed
        try:
            if fast is not None:
                self._retry(lambda: fast.send("HEAD", self.bucket, key))
            else:
                self._retry(lambda: c.head_object(Bucket=self.bucket, Key=key))
            return True
        except Exception as e:
            if s3_status(e) == 404:
                return False
            raise

    def _list(self, prefix: str) -> Iterator[str]:
        """Object names under prefix, a page at a time, each page retried (botocore retries nothing itself)."""
        c = self.client
        kw: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            page = self._retry(functools.partial(c.list_objects_v2, **kw))
            for obj in page.get("Contents", []):
                yield obj["Key"][len(prefix) :]
            if not page.get("IsTruncated") or not page.get("NextContinuationToken"):
                return
            kw["ContinuationToken"] = page["NextContinuationToken"]

    def get(self, key: str) -> bytes | None:
        return self._get(self._full(key))

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        if content_type:
            self._put(self._full(key), data, ContentType=content_type)
        else:
            self._put(self._full(key), data)

    def create(self, key: str, data: bytes) -> bool:
        try:
            self._put(self._full(key), data, IfNoneMatch="*")
            return True
        except Exception as e:
            if s3_status(e) == 412:  # someone else created it first: theirs stands
                return False
            raise

    def create_from_file(self, key: str, src: str | Path) -> bool:
        c = self.client
        full = self._full(key)

        def put() -> Any:
            with open(src, "rb") as f:
                return c.put_object(Bucket=self.bucket, Key=full, Body=f, IfNoneMatch="*")

        try:
            self._retry(put)
            return True
        except Exception as e:
            if s3_status(e) == 412:
                return False
            raise

    def exists(self, key: str) -> bool:
        return self._exists(self._full(key))

    def has_prefix(self, prefix: str) -> bool:
        """One LIST of at most one key, not retried: a wrong endpoint, key or bucket is diagnosed at once.

        Args:
            prefix: A folder-like key prefix ending in `/` ("runs/r1/jobs/").
        """
        try:
            resp = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self._full(prefix), MaxKeys=1)
        except Exception as e:
            raise s3_problem(self, e) from e
        return bool(resp.get("KeyCount") or resp.get("Contents"))

    def list(self, prefix: str) -> Iterator[str]:
        return self._list(self._full(prefix))

    def list_suffix(
        self, prefix: str, suffix: str, bounds: builtins.list[str] | None = None, threads: int = 8
    ) -> Iterator[str]:
        if bounds is None:
            for n in self._list(self._full(prefix)):
                k = strip_suffix(n, suffix)
                if k:
                    yield k
            return
        yield from self._list_split(self._full(prefix), suffix, bounds, threads)

    def _list_split(self, base: str, suffix: str, bounds: builtins.list[str], threads: int) -> Iterator[str]:
        """All names under `base` ending in `suffix`, listed as len(bounds)+1 key ranges in parallel (StartAfter = the previous bound):
        one LIST returns at most 1000 keys, so a million-key run is a thousand round trips in a row unless
        they are split. `bounds`: known names without the suffix (e.g. job keys from the segment indexes), any order."""
        # S3 lists in UTF-8 byte order of the whole object key, which Python's str order matches.
        edges = sorted({base + b + suffix for b in bounds})
        ranges = list(zip([None, *edges], [*edges, None], strict=True))
        c = self.client

        def one(rng: tuple[str | None, str | None]) -> builtins.list[str]:
            start, end = rng
            out: builtins.list[str] = []
            kw: dict[str, Any] = {"Bucket": self.bucket, "Prefix": base}
            if start:
                kw["StartAfter"] = start
            while True:
                page = self._retry(functools.partial(c.list_objects_v2, **kw))
                for obj in page.get("Contents", []):
                    if end is not None and obj["Key"] > end:
                        return out
                    k = strip_suffix(obj["Key"][len(base) :], suffix)
                    if k:
                        out.append(k)
                if not page.get("IsTruncated"):
                    return out
                kw = {**kw, "ContinuationToken": page["NextContinuationToken"]}
                kw.pop("StartAfter", None)

        with ThreadPoolExecutor(max(1, threads)) as ex:
            for keys in ex.map(one, ranges):
                yield from keys

    def get_many(self, keys: builtins.list[str], threads: int = 16) -> builtins.list[bytes]:
        """Fetched by `threads` GETs in flight (latency-bound, not CPU).

        Args:
            keys: The objects' keys.
            threads: Requests (or reads) in flight at once.
        """
        self.client  # noqa: B018 - create the client once, before the threads share it

        def get(k: str) -> bytes:
            raw = self._get(self._full(k))
            if raw is None:
                raise FileNotFoundError(self.url(k))
            return raw

        if len(keys) == 1:  # one object (get_job): no pool
            return [get(keys[0])]
        with ThreadPoolExecutor(max(1, min(threads, 64))) as ex:
            return list(ex.map(get, keys, chunksize=16))

    def delete(self, key: str) -> None:
        c = self.client
        full = self._full(key)
        self._retry(lambda: c.delete_object(Bucket=self.bucket, Key=full))

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        base = self._full(prefix)
        c = self.client

        def listing() -> builtins.list[str]:
            resp = c.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base, Delimiter="/")
            return [
                cp["Prefix"][len(base) :].rstrip("/")
                for page in resp
                for cp in page.get("CommonPrefixes", [])
            ]

        return sorted(self._retry(listing))


def s3_problem(store: S3Store, e: Exception) -> InputError:
    """Which of endpoint, credentials or bucket is wrong, from the error of a first request.

    Args:
        store: The store whose first request failed.
        e: The exception a boto3 call raised.
    """
    from botocore.exceptions import (
        ConnectionClosedError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
        ReadTimeoutError,
    )
    from botocore.exceptions import ConnectionError as BotoConnectionError

    endpoint = endpoint_label()
    if isinstance(e, NoCredentialsError | PartialCredentialsError):
        why = "credentials: none found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    elif isinstance(
        e, EndpointConnectionError | BotoConnectionError | ConnectionClosedError | ReadTimeoutError
    ):
        why = f"endpoint: cannot connect to {endpoint} (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL): {type(e).__name__}"
    else:
        code = str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))
        status = s3_status(e)
        if code in ("NoSuchBucket",) or (status == 404 and not code.startswith("NoSuchKey")):
            why = f"bucket: {store.bucket!r} does not exist at {endpoint}"
        elif code in (
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AccessDenied",
            "InvalidToken",
            "ExpiredToken",
            "AuthorizationHeaderMalformed",
        ) or status in (401, 403):
            why = f"credentials: {endpoint} refused them ({code or status}); check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
        else:
            why = f"endpoint: {endpoint} answered {code or status or type(e).__name__}"
    from elo_per_token.contracts.secrets import scrub

    return InputError(f"cannot read the ledger — {scrub(why)}", file=store.url(), field="ledger")
