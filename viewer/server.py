"""`ept view`'s HTTP server: the standard library's threading HTTP server, GET only, pages from viewer.pages.

Routes:  /  ·  /run/<id>  ·  /run/<id>/report.json  ·  /run/<id>/arm?arm=&sort=&desc=1  ·  /run/<id>/grid?family=&disagree=1
·  /run/<id>/task?task=  ·  /run/<id>/samples?family=&arm=&smin=&smax=&error=&disagree=&q=&sort=&desc=&page=  ·  /run/<id>/job?key=  ·  /compare?a=&b=  ·  /static/<file>
Every asset is served from the package (a Content-Security-Policy forbids anything else), bad input is a 4xx
page naming the parameter, and nothing is ever written.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.secrets import scrub
from elo_per_token.viewer import grids, pages, samples
from elo_per_token.viewer.arm_page import arm_page, sort_rows
from elo_per_token.viewer.compare_page import compare_page
from elo_per_token.viewer.explorer import explorer_page
from elo_per_token.viewer.job_page import job_page
from elo_per_token.viewer.reading import BatchReader, Forbidden
from elo_per_token.viewer.store import Store

T = TypeVar("T")

STATIC = {
    "view.js": "text/javascript; charset=utf-8",
    "view.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; form-action 'self'"


class NotFound(Exception):
    """An unknown page, run, arm, task or job (404)."""


def _one(params: dict[str, list[str]], name: str, required: bool = True) -> str | None:
    v = params.get(name)
    if not v or not v[0]:
        if required:
            raise InputError("missing", field=name)
        return None
    if len(v[0]) > 2000:
        raise InputError("too long", field=name)
    return v[0]


def _page(params: dict[str, list[str]]) -> int:
    """The 1-based page number of a paged list (`?page=`)."""
    raw = _one(params, "page", False) or "1"
    if not raw.isdigit() or not 1 <= int(raw) <= 10**6:
        raise InputError(f"must be a whole number 1..1000000, got {raw[:40]!r}", field="page")
    return int(raw)


def _slice(rows: list[T], page: int, per: int) -> tuple[list[T], pages.Pager]:
    """The rows of one page, and where it sits (a page past the end is a 404)."""
    n_pages = max(1, -(-len(rows) // per))
    if page > n_pages:
        raise NotFound(f"page {page} (there are {n_pages})")
    return rows[(page - 1) * per : page * per], pages.Pager(page, n_pages, len(rows))


def route(store: Store, path: str, query: str) -> tuple[str, bytes]:
    """(content type, body) of a GET; raises NotFound, InputError or Forbidden."""
    try:
        params = parse_qs(query, max_num_fields=20)
    except ValueError:  # more fields than that: a 400, not a broken page
        raise InputError("more than 20 query parameters", field="query") from None
    parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
    if not parts:
        names = store.run_ids()
        shown, pager = _slice(names, _page(params), store.page_rows)
        return _html(pages.runs_page(store.runs(shown), store.url, names, pager))
    if parts == ["favicon.ico"]:  # asked for by browsers whatever the page's <link rel=icon> says
        parts = ["static", "favicon.svg"]
    if parts[0] == "static" and len(parts) == 2 and parts[1] in STATIC:
        return STATIC[parts[1]], (resources.files("elo_per_token.viewer") / "static" / parts[1]).read_bytes()
    if parts == ["compare"]:
        a, b = _one(params, "a") or "", _one(params, "b") or ""
        res = store.compare(a, b)
        acc = [(d.accuracy if (d := store.view(r).doc) is not None else []) for r in (a, b)]
        return _html(compare_page(a, b, res, *acc))
    if parts[0] == "run" and len(parts) in (2, 3):
        return _run_route(store, parts[1], parts[2] if len(parts) == 3 else "", params)
    raise NotFound(path)


def _run_route(store: Store, run_id: str, page: str, params: dict[str, list[str]]) -> tuple[str, bytes]:
    if page == "job":
        key = _one(params, "key") or ""
        records, notes = store.job(run_id, key)
        return _html(job_page(run_id, key, records, store.transcript(run_id, key), notes))
    v = store.view(run_id)
    if page == "":
        budget = _one(params, "budget", False)
        se = _one(params, "se", False) == "1"
        return _html(pages.run_page(v, budget, pages.budget_pick(v, budget), se))
    if page == "report.json":
        body = json.dumps(
            v.doc.as_dict() if v.doc is not None else {"error": v.error}, default=str, allow_nan=False
        )
        return "application/json", body.encode()
    if v.result is None:
        return _html(pages.run_page(v))  # no analysis yet: the run page says why
    if page == "samples":
        return _html(_samples(store, run_id, params))
    if page == "arm":
        arm = _one(params, "arm") or ""
        if arm not in v.result.arms:
            raise NotFound(f"arm {arm!r}")
        sort, desc = _one(params, "sort", False), _one(params, "desc", False) == "1"
        ordered = sort_rows(grids.arm_rows(v.result, arm), sort, desc)
        rows, pager = _slice(ordered, _page(params), store.page_rows)
        return _html(arm_page(v, arm, rows, pager, sort=sort, desc=desc))
    if page == "grid":
        fam, dis = _one(params, "family", False), _one(params, "disagree", False) == "1"
        return _html(pages.grid_page(v, grids.grid(v.result, fam, dis), fam, dis))
    if page == "task":
        task = _one(params, "task") or ""
        rows = grids.task_rows(v.result, task)
        if not rows:
            raise NotFound(f"task {task!r}")
        shown, pager = _slice(rows, _page(params), store.page_rows)
        came_from = _one(params, "arm", False)
        from_arm = came_from if came_from in v.result.arms else None
        return _html(
            pages.task_page(
                v,
                task,
                shown,
                pager,
                arm=from_arm,
                about=store.task_info(run_id, task, [r["job_key"] for r in rows]),
            )
        )
    raise NotFound(page)


def _samples(store: Store, run_id: str, params: dict[str, list[str]]) -> str:
    """The sample explorer: the query (validated) over the run's job rows, searched within its bound, paged."""
    q = samples.parse_query(lambda n: _one(params, n, False), _page(params))
    v = store.samples(run_id)
    if (
        v.samples is None
    ):  # no records to list (a run analysed from elsewhere): the run page says what there is
        return pages.run_page(v)
    rows = samples.filtered(v.samples, q)
    candidates, scanned, capped = rows.height, 0, False
    if q.q is not None:
        reader = BatchReader(store.ledger)  # one request's transcript reads: each folder resolved once
        rows, scanned, capped = samples.search(rows, q.q, lambda k: store.text(run_id, k, reader))
    per = store.page_rows
    n_pages = max(1, -(-rows.height // per))
    if q.page > n_pages:
        raise NotFound(f"page {q.page} (there are {n_pages})")
    found = samples.Found(
        rows.slice((q.page - 1) * per, per).to_dicts(), rows.height, scanned, candidates, capped
    )
    return explorer_page(v, v.samples, q, found, pages.Pager(q.page, n_pages, rows.height))


def _html(text: str) -> tuple[str, bytes]:
    return "text/html; charset=utf-8", text.encode("utf-8")


IDLE_S = 10.0  # a connection that sends nothing for this long is closed (its thread ends)
MAX_CONNECTIONS = 256  # connections served at once; one more is closed at once, never given a thread
TOKEN_COOKIE = "ept_view_token"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARD = ("0.0.0.0", "::", "")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or address, IPv6 with or without brackets) is this machine only."""
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """The Host header values the viewer answers: the loopback names and the --host given, each with the port
    (and bare on port 80, as browsers send it). None for a wildcard address (0.0.0.0, ::): any name the
    machine is reached by, so the token is what guards it."""
    h = host.strip().lower()
    if h in WILDCARD:
        return None
    names = {*LOOPBACK_NAMES, f"[{h.strip('[]')}]" if ":" in h else h}
    return frozenset({f"{n}:{port}" for n in names} | (names if port == 80 else set()))


def check_token(token: str) -> str:
    """A --token as given: InputError unless 16+ URL-safe characters (it travels in a URL and a cookie)."""
    if len(token) < 16 or not set(token) <= _TOKEN_CHARS:
        raise InputError("must be 16 or more of A-Z a-z 0-9 - _", field="--token")
    return token


class Handler(BaseHTTPRequestHandler):
    """GET and HEAD only; the store, the allowed Host values and the token are set on the class by `serve`.

    Before any page: exactly one Host header, one of `allowed` (else 421: a page on another name, e.g. a DNS
    rebinding, reads nothing); an Origin header, when sent, naming this same origin (else 403); with a token,
    the token as `?token=` (then kept in a cookie) or that cookie (else 403)."""

    store: Store
    allowed: frozenset[str] | None = frozenset()
    token: str | None = None
    _new_cookie = False  # set per request when a valid ?token= came
    server_version = "ept-view"
    timeout = IDLE_S  # the socket's timeout: an idle or dripping connection is closed, not kept forever

    def _refusal(self, url: SplitResult) -> tuple[HTTPStatus, str] | None:
        """Why this request is not answered (status, message), None when it is."""
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1:
            return HTTPStatus.BAD_REQUEST, "exactly one Host header is required"
        host = hosts[0].strip().lower()
        if self.allowed is not None and host not in self.allowed:
            names = ", ".join(sorted(self.allowed))
            return HTTPStatus.MISDIRECTED_REQUEST, f"this viewer answers only for {names}"
        origins = self.headers.get_all("Origin") or []
        if len(origins) > 1 or (origins and origins[0].strip().lower() != f"http://{host}"):
            return HTTPStatus.FORBIDDEN, "a request from another origin; refused"
        if not self.path.startswith("/"):
            return HTTPStatus.BAD_REQUEST, "the request target must be a path"
        if self.token is not None and not self._token_ok(url):
            return (
                HTTPStatus.FORBIDDEN,
                "this viewer needs its token: open the URL `ept view` printed (…?token=…)",
            )
        return None

    def _token_ok(self, url: SplitResult) -> bool:
        if self.token is None:
            return True
        want = self.token.encode()
        given = parse_qs(url.query, max_num_fields=20).get("token") or []
        self._new_cookie = bool(given) and hmac.compare_digest(given[0].encode(), want)
        if self._new_cookie:
            return True
        for part in ",".join(self.headers.get_all("Cookie") or [])[:8192].split(";"):
            name, _, value = part.strip().partition("=")
            if name == TOKEN_COOKIE and hmac.compare_digest(value.encode(), want):
                return True
        return False

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        self._new_cookie = False
        refused = self._refusal(url)
        if refused is not None:
            self._send(refused[0], *_html(pages.error_page(int(refused[0]), refused[1])))
            return
        try:
            ctype, body = route(self.store, url.path, url.query)
            status = HTTPStatus.OK
        except NotFound as ex:
            status, ctype, body = HTTPStatus.NOT_FOUND, *_html(pages.error_page(404, f"not found: {ex}"))
        except Forbidden as ex:
            status, ctype, body = HTTPStatus.FORBIDDEN, *_html(pages.error_page(403, scrub(str(ex))))
        except InputError as ex:
            status = HTTPStatus.NOT_FOUND if ex.field in ("run", "job") else HTTPStatus.BAD_REQUEST
            ctype, body = _html(pages.error_page(int(status), scrub(str(ex))))
        except Exception as ex:  # one broken page must not stop the server; said without secrets
            status, ctype, body = (
                HTTPStatus.INTERNAL_SERVER_ERROR,
                *_html(pages.error_page(500, scrub(f"{type(ex).__name__}: {ex}"))),
            )
        self._send(status, ctype, body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def _refuse(self) -> None:
        self._new_cookie = False
        refused = self._refusal(urlsplit(self.path)) or (HTTPStatus.METHOD_NOT_ALLOWED, "read-only: GET only")
        self._send(refused[0], *_html(pages.error_page(int(refused[0]), refused[1])))

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse

    def _send(self, status: HTTPStatus, ctype: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Cache-Control", "no-store")
        # The token came in the URL: the next pages carry it as a cookie.
        if self._new_cookie:
            self.send_header("Set-Cookie", f"{TOKEN_COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        line = f"{self.address_string()} {format % args}"
        if self.token:
            line = line.replace(self.token, "<token>")  # the request line holds ?token=…
        sys.stderr.write(scrub(line) + "\n")


class ViewServer(ThreadingHTTPServer):
    """The threading server with a bound on connections served at once (a flood of idle connections gets
    closed sockets, not threads); closing it does not wait for open connections."""

    block_on_close = False
    request_queue_size = 128  # the listen backlog: a burst of connections is queued, not dropped and retried

    def __init__(self, addr: tuple[str, int], handler: type[Handler], max_connections: int) -> None:
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(addr, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def serve(
    store: Store,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    token: str | None = None,
    idle_s: float = IDLE_S,
    max_connections: int = MAX_CONNECTIONS,
) -> ViewServer:
    """A bound server (port 0: any free port); the caller runs serve_forever. It answers only Host values of
    allowed_hosts(host, bound port), and with a token only requests that carry it."""
    handler: type[Handler] = type(
        "BoundHandler", (Handler,), {"store": store, "token": token, "timeout": idle_s}
    )
    server = ViewServer((host.strip("[]"), port), handler, max_connections)
    handler.allowed = allowed_hosts(host, int(server.server_address[1]))
    return server
