"""`ept view`'s HTTP server: the standard library's threading HTTP server, GET only, pages from viewer.pages.

Routes:  /  ·  /run/<id>  ·  /run/<id>/report.json  ·  /run/<id>/arm?arm=  ·  /run/<id>/grid?family=&disagree=1
·  /run/<id>/task?task=  ·  /run/<id>/job?key=  ·  /compare?a=&b=  ·  /static/<file>
Every asset is served from the package (a Content-Security-Policy forbids anything else), bad input is a 4xx
page naming the parameter, and nothing is ever written.
"""

from __future__ import annotations

import json
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.secrets import scrub
from elo_per_token.viewer import grids, pages
from elo_per_token.viewer.job_page import job_page
from elo_per_token.viewer.store import Store

STATIC = {"view.js": "text/javascript; charset=utf-8", "view.css": "text/css; charset=utf-8"}
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


def route(store: Store, path: str, query: str) -> tuple[str, bytes]:
    """(content type, body) of a GET; raises NotFound or InputError."""
    params = parse_qs(query, max_num_fields=20)
    parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
    if not parts:
        return _html(pages.runs_page(store.runs(), store.url))
    if parts[0] == "static" and len(parts) == 2 and parts[1] in STATIC:
        return STATIC[parts[1]], (resources.files("elo_per_token.viewer") / "static" / parts[1]).read_bytes()
    if parts == ["compare"]:
        a, b = _one(params, "a") or "", _one(params, "b") or ""
        return _html(pages.compare_page(a, b, store.compare(a, b)))
    if parts[0] == "run" and len(parts) in (2, 3):
        return _run_route(store, parts[1], parts[2] if len(parts) == 3 else "", params)
    raise NotFound(path)


def _run_route(store: Store, run_id: str, page: str, params: dict[str, list[str]]) -> tuple[str, bytes]:
    if page == "job":
        key = _one(params, "key") or ""
        return _html(job_page(run_id, key, store.job(run_id, key), store.transcript(run_id, key)))
    v = store.view(run_id)
    if page == "":
        return _html(pages.run_page(v))
    if page == "report.json":
        body = json.dumps(
            v.doc.as_dict() if v.doc is not None else {"error": v.error}, default=str, allow_nan=False
        )
        return "application/json", body.encode()
    if v.result is None:
        return _html(pages.run_page(v))  # no analysis yet: the run page says why
    if page == "arm":
        arm = _one(params, "arm") or ""
        if arm not in v.result.arms:
            raise NotFound(f"arm {arm!r}")
        return _html(pages.arm_page(v, arm, grids.arm_rows(v.result, arm)))
    if page == "grid":
        fam, dis = _one(params, "family", False), _one(params, "disagree", False) == "1"
        return _html(pages.grid_page(v, grids.grid(v.result, fam, dis), fam, dis))
    if page == "task":
        task = _one(params, "task") or ""
        rows = grids.task_rows(v.result, task)
        if not rows:
            raise NotFound(f"task {task!r}")
        return _html(pages.task_page(v, task, rows))
    raise NotFound(page)


def _html(text: str) -> tuple[str, bytes]:
    return "text/html; charset=utf-8", text.encode("utf-8")


class Handler(BaseHTTPRequestHandler):
    """GET and HEAD only; the store is set on the class by `serve`."""

    store: Store
    server_version = "ept-view"

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        try:
            ctype, body = route(self.store, url.path, url.query)
            status = HTTPStatus.OK
        except NotFound as ex:
            status, ctype, body = HTTPStatus.NOT_FOUND, *_html(pages.error_page(404, f"not found: {ex}"))
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
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, *_html(pages.error_page(405, "read-only: GET only")))

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def _send(self, status: HTTPStatus, ctype: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(scrub(f"{self.address_string()} {format % args}") + "\n")


def serve(store: Store, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A bound server (port 0: any free port); the caller runs serve_forever."""
    handler = type("BoundHandler", (Handler,), {"store": store})
    return ThreadingHTTPServer((host, port), handler)
