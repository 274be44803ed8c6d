"""An HTTP transport that bounds every provider request in time and in bytes, by construction.

httpx's `timeout` is per socket operation: a server that sends one byte every two seconds, drips its headers,
or streams SSE events forever never trips it. Here every request gets a **total deadline** (the profile's
`timeout`, from the moment the request is handed to the transport until its body is read) and a **byte cap**
(the profile's `max_response_mb`, counted as the body is read, never buffered past it):

- every socket read and write of the request is given min(its own timeout, time left), and a read after the
  deadline raises httpcore's ReadTimeout at once — so headers dripped byte by byte end on time too;
- the response body is counted chunk by chunk; past the cap `ResponseTooLarge` is raised before the next
  chunk is kept, so a 1.5 GB body costs at most the cap plus one chunk.

Both apply to success and error bodies, streamed or not, for every protocol the SDKs speak, because the
SDKs (openai, anthropic) send through this transport. The deadline lives in a thread-local: sync httpx
sends and reads a request on the calling thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpcore2
import httpx2

_local = threading.local()


class CrossHostRedirect(httpx2.HTTPError):
    """A redirect to another origin (scheme, host or port): not followed, so the prompt (and whatever the
    SDK would resend) never goes to a host the profile does not name."""


class ResponseTooLarge(httpx2.ReadError):
    """The response body passed the byte cap: the rest is not read (the connection is dropped)."""


class DeadlineExceeded(httpx2.ReadTimeout):
    """The request's total deadline passed while its body was still arriving (a drip or an endless stream)."""


def _left(timeout: float | None) -> float | None:
    """`timeout` clamped to what is left of this thread's request deadline; raises once it has passed."""
    deadline: float | None = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore2.ReadTimeout("the request's total deadline passed")
    return left if timeout is None else min(timeout, left)


class _ClampedStream(httpcore2.NetworkStream):
    """A socket stream whose every read and write ends by the request's deadline."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.NetworkStream:
        return _ClampedStream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _ClampedBackend(httpcore2.NetworkBackend):
    """Connects (TCP or Unix socket) within the deadline and hands out clamped streams."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        return _ClampedStream(
            self._inner.connect_tcp(host, port, _left(timeout), local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.NetworkStream:
        return _ClampedStream(self._inner.connect_unix_socket(path, _left(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _CountedBody(httpx2.SyncByteStream):
    """The response body, counted against the cap and the deadline; ends the request's deadline when closed."""

    def __init__(self, inner: httpx2.SyncByteStream, cap: int, deadline: float) -> None:
        self._inner, self._cap, self._deadline = inner, cap, deadline

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        _local.deadline = self._deadline  # a streamed body may be read after another request on this thread
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._cap:
                raise ResponseTooLarge(
                    f"response body over {self._cap} bytes (max_response_mb): not read further"
                )
            if time.monotonic() > self._deadline:
                raise DeadlineExceeded("the request's total deadline passed while its body was arriving")
            yield chunk

    def close(self) -> None:
        _local.deadline = None
        self._inner.close()


class BoundedTransport(httpx2.HTTPTransport):
    """httpx2's own transport, with a total deadline and a byte cap per request (see the module docstring)."""

    def __init__(self, *, total_s: float, max_bytes: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.total_s, self.max_bytes = total_s, max_bytes
        # httpx2 builds its connection pool without a network_backend argument; wrapping the pool's backend
        # is the one place every socket operation of every request (proxied or not) passes through.
        pool: Any = self._pool
        pool._network_backend = _ClampedBackend(pool._network_backend)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = time.monotonic() + self.total_s
        _local.deadline = deadline
        try:
            response = super().handle_request(request)
        except BaseException:
            _local.deadline = None
            raise
        assert isinstance(response.stream, httpx2.SyncByteStream)
        response.stream = _CountedBody(response.stream, self.max_bytes, deadline)
        return response


class _BoundedClient(httpx2.Client):
    """httpx2's client with every transport it makes bounded — the direct one and those it mounts for the
    environment's proxies (HTTPS_PROXY…), which passing `transport=` would switch off."""

    def __init__(self, *, total_s: float, max_bytes: int, **kwargs: Any) -> None:
        self._total_s, self._max_bytes = total_s, max_bytes  # read by the _init_* calls of __init__
        super().__init__(**kwargs)

    def _build_redirect_request(self, request: httpx2.Request, response: httpx2.Response) -> httpx2.Request:
        """Redirects within the endpoint's origin are followed as before; one to another origin is refused."""
        nxt = super()._build_redirect_request(request, response)
        a, b = request.url, nxt.url
        if (a.scheme, a.host, a.port) != (b.scheme, b.host, b.port):
            where = f"{b.scheme}://{b.host}" + (f":{b.port}" if b.port else "")
            raise CrossHostRedirect(
                f"{response.status_code} redirect from {a.host} to another origin ({where})"
            )
        return nxt

    def _init_transport(self, *args: Any, **kwargs: Any) -> httpx2.BaseTransport:
        kwargs.pop("transport", None)
        return BoundedTransport(*args, total_s=self._total_s, max_bytes=self._max_bytes, **kwargs)

    def _init_proxy_transport(self, proxy: httpx2.Proxy, *args: Any, **kwargs: Any) -> httpx2.BaseTransport:
        return BoundedTransport(
            *args, proxy=proxy, total_s=self._total_s, max_bytes=self._max_bytes, **kwargs
        )


def bounded_http_client(
    total_s: float, max_bytes: int, on_headers: Callable[[httpx2.Headers], None] | None = None
) -> httpx2.Client:
    """An httpx2 client for the SDKs: per-operation timeouts of `total_s`, and the bounds above (the SDKs'
    own connection limits; redirects followed within the endpoint's origin only; proxies from the environment
    as usual). `on_headers` sees the headers of every response, errors included (the rate limiter reads
    x-ratelimit-*)."""
    hooks = {"response": [lambda r: on_headers(r.headers)]} if on_headers is not None else None
    return _BoundedClient(
        event_hooks=hooks,
        total_s=total_s,
        max_bytes=max_bytes,
        limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=5.0),
        timeout=httpx2.Timeout(total_s),
        follow_redirects=True,
    )
