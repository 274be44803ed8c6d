"""A hostile OpenAI/Anthropic-compatible provider on loopback: real sockets, replies drawn from a corpus of
attacks (newline floods, huge numbers, deep nesting, NaN fields, drips, endless streams, huge bodies, early
closes, key echoes). Raw sockets, not aiohttp: the attacks are about bytes and timing that a framework smooths out.

    srv = start_hostile(key=KEY)                    # in a thread; srv.url is the /v1 base_url
    srv.force = "drip"                              # every reply this mode (unit tests), or
    srv.weights = {"ok": 5, "drip": 1, ...}         # a mode drawn per request, seeded by (job, attempt)
    srv.stats()                                     # per mode / per job counts, longest connection (s)

A reply is *billed* (counted in stats()["billed"] per job) when the server sent a complete 2xx body that states
a usage: what a real provider would charge for.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import socket
import socketserver
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MODES = ("ok", "wrong", "flood", "spaces", "bignum_answer", "bignum_json", "deep", "nan_finish", "inf_model",
         "content_int", "echo_key", "drip", "header_drip", "endless", "huge", "early_close", "stall")  # fmt: skip
# Not drawn by default: a LiteLLM-style 400 for an unknown model.
# echo_secrets: a reply whose reasoning, text and tool-call arguments all carry `Hostile.payload` (a model or a
# provider echoing what it saw), on both protocols, plain and streamed.
EXTRA_MODES = ("bad_model", "echo_secrets")
FLOOD_NEWLINES = 100_000  # the old cubic answer regex took 8.7 s of CPU at 1,200 (docs/reliability.md)
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def anthropic(self) -> bool:
        return self.path.endswith("/messages")

    @property
    def key(self) -> str:
        auth = self.headers.get("authorization", "")
        return (
            auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else self.headers.get("x-api-key", "")
        )

    def answer(self) -> int:
        """The right answer to the fault suite's 'What is A + B?' (0 when the prompt is something else)."""
        text = json.dumps(self.body.get("messages", ""))
        m = re.search(r"What is (\d+) \+ (\d+)", text)
        return int(m.group(1)) + int(m.group(2)) if m else 0


def _read_request(conn: socket.socket) -> Request | None:
    buf = b""
    while b"\r\n\r\n" not in buf:
        part = conn.recv(65536)
        if not part or len(buf) > 1 << 20:
            return None
        buf += part
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = [*lines[0].split(" "), "", ""][:3]
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    need = int(headers.get("content-length", "0") or 0)
    while len(rest) < need:
        part = conn.recv(65536)
        if not part:
            return None
        rest += part
    try:
        body = json.loads(rest[:need] or b"{}")
    except ValueError:
        body = {}
    return Request(method, path, headers, body if isinstance(body, dict) else {})


def _chat_json(content: Any, *, model: Any = "hostile-1", finish: Any = "stop", extra: str = "") -> bytes:
    """A chat.completion body as text, so non-JSON values (NaN, Infinity, 5,000-digit ints) can be spliced in."""
    msg = (
        json.dumps(content) if not isinstance(content, str) or not content.startswith("RAW:") else content[4:]
    )
    mdl = model[4:] if isinstance(model, str) and model.startswith("RAW:") else json.dumps(model)
    fin = finish[4:] if isinstance(finish, str) and finish.startswith("RAW:") else json.dumps(finish)
    return (
        f'{{"id":"c1","object":"chat.completion","model":{mdl},"choices":[{{"index":0,"message":'
        f'{{"role":"assistant","content":{msg}}},"finish_reason":{fin}}}],"usage":{json.dumps(USAGE)}{extra}}}'
    ).encode()


def _messages_json(
    content: Any, *, model: Any = "hostile-1", finish: Any = "end_turn", extra: str = ""
) -> bytes:
    msg = (
        json.dumps(content) if not isinstance(content, str) or not content.startswith("RAW:") else content[4:]
    )
    mdl = model[4:] if isinstance(model, str) and model.startswith("RAW:") else json.dumps(model)
    fin = finish[4:] if isinstance(finish, str) and finish.startswith("RAW:") else json.dumps(finish)
    usage = {"input_tokens": 11, "output_tokens": 7}
    return (
        f'{{"id":"m1","type":"message","role":"assistant","model":{mdl},"content":[{{"type":"text","text":{msg}}}],'
        f'"stop_reason":{fin},"usage":{json.dumps(usage)}{extra}}}'
    ).encode()


def _sse(req: Request, content: Any, *, model: Any = "hostile-1", finish: Any = "stop") -> bytes:
    """The same reply as an SSE stream of the request's protocol (one content event)."""
    msg = (
        json.dumps(content) if not isinstance(content, str) or not content.startswith("RAW:") else content[4:]
    )
    mdl = model[4:] if isinstance(model, str) and model.startswith("RAW:") else json.dumps(model)
    fin = finish[4:] if isinstance(finish, str) and finish.startswith("RAW:") else json.dumps(finish)
    if req.anthropic:
        events = [
            f'{{"type":"message_start","message":{{"model":{mdl},"usage":{{"input_tokens":11,"output_tokens":0}}}}}}',
            '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
            f'{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{msg}}}}}',
            f'{{"type":"message_delta","delta":{{"stop_reason":{fin}}},"usage":{{"output_tokens":7}}}}',
            '{"type":"message_stop"}',
        ]
        return "".join(f"event: x\ndata: {e}\n\n" for e in events).encode()
    events = [
        f'{{"model":{mdl},"choices":[{{"index":0,"delta":{{"content":{msg}}}}}]}}',
        f'{{"model":{mdl},"choices":[{{"index":0,"delta":{{}},"finish_reason":{fin}}}]}}',
        f'{{"model":{mdl},"choices":[],"usage":{json.dumps(USAGE)}}}',
    ]
    return ("".join(f"data: {e}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def _body(req: Request, content: Any, **kw: Any) -> bytes:
    if req.stream:
        return _sse(req, content, **kw)
    return (_messages_json if req.anthropic else _chat_json)(content, **kw)


def _echo_openai(req: Request, payload: str, answer: str) -> bytes:
    args = json.dumps({"note": payload})
    if not req.stream:
        msg = {"role": "assistant", "content": f"{payload}\n{answer}", "reasoning_content": payload,
               "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "echo", "arguments": args}}]}  # fmt: skip
        return json.dumps({"id": "c1", "object": "chat.completion", "model": "hostile-1", "usage": USAGE,
                           "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}).encode()  # fmt: skip
    call = {"index": 0, "id": "t1", "type": "function", "function": {"name": "echo", "arguments": args}}
    deltas = [{"reasoning_content": payload}, {"content": f"{payload}\n{answer}"}, {"tool_calls": [call]}]
    events = [{"model": "hostile-1", "choices": [{"index": 0, "delta": d}]} for d in deltas]
    events += [{"model": "hostile-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
               {"model": "hostile-1", "choices": [], "usage": USAGE}]  # fmt: skip
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def _echo_anthropic(req: Request, payload: str, answer: str) -> bytes:
    blocks = [{"type": "thinking", "thinking": payload, "signature": "s"},
              {"type": "text", "text": f"{payload}\n{answer}"},
              {"type": "tool_use", "id": "t1", "name": "echo", "input": {"note": payload}}]  # fmt: skip
    if not req.stream:
        return json.dumps({"id": "m1", "type": "message", "role": "assistant", "model": "hostile-1", "content": blocks,
                           "stop_reason": "end_turn", "usage": {"input_tokens": 11, "output_tokens": 7}}).encode()  # fmt: skip
    starts = [{"type": "thinking", "thinking": ""}, {"type": "text", "text": ""},
              {"type": "tool_use", "id": "t1", "name": "echo", "input": {}}]  # fmt: skip
    deltas = [{"type": "thinking_delta", "thinking": payload}, {"type": "text_delta", "text": f"{payload}\n{answer}"},
              {"type": "input_json_delta", "partial_json": json.dumps({"note": payload})}]  # fmt: skip
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {"model": "hostile-1", "usage": {"input_tokens": 11, "output_tokens": 0}},
        }
    ]
    for i, (b, d) in enumerate(zip(starts, deltas, strict=True)):
        events += [{"type": "content_block_start", "index": i, "content_block": b},
                   {"type": "content_block_delta", "index": i, "delta": d}]  # fmt: skip
    events += [{"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}},
               {"type": "message_stop"}]  # fmt: skip
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def _head(status: int, length: int | None, stream: bool) -> bytes:
    ctype = "text/event-stream" if stream else "application/json"
    size = f"Content-Length: {length}\r\n" if length is not None else "Transfer-Encoding: chunked\r\n"
    return f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\n{size}Connection: close\r\n\r\n".encode()


@dataclass
class Hostile:
    """Server state: the attack choice and what was served."""

    key: str
    seed: int = 0
    force: str | None = None
    weights: dict[str, float] = field(default_factory=lambda: {m: 1.0 for m in MODES})
    huge_mb: int = 64
    payload: str = ""  # what echo_secrets replies carry in their reasoning, text and tool-call arguments
    lock: threading.Lock = field(default_factory=threading.Lock)
    served: Counter[str] = field(default_factory=Counter)
    by_job: Counter[str] = field(default_factory=Counter)
    billed: Counter[str] = field(default_factory=Counter)
    longest_s: float = 0.0
    url: str = ""
    server: Any = None

    @property
    def root(self) -> str:
        """The base_url for Anthropic-protocol clients (the SDK adds /v1/messages)."""
        return self.url.removesuffix("/v1")

    def pick(self, req: Request) -> str:
        if req.method == "GET" or req.path.endswith("/models"):
            return "models"
        job = req.headers.get("x-ept-job", "")
        with self.lock:
            self.by_job[job] += 1
            n = self.by_job[job]
        if self.force:
            return self.force
        # Seeded by (job, attempt): a job's replies are the same on every run, whatever the thread order.
        rng = random.Random(hashlib.sha256(f"{self.seed}/{job}/{n}".encode()).digest())
        modes = list(self.weights)
        return rng.choices(modes, weights=[self.weights[m] for m in modes])[0]

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {"served": dict(self.served), "by_job": dict(self.by_job), "billed": dict(self.billed),
                    "longest_s": self.longest_s}  # fmt: skip

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _send_complete(h: Hostile, conn: socket.socket, req: Request, body: bytes, status: int = 200) -> None:
    conn.sendall(_head(status, len(body), req.stream) + body)
    if status == 200:
        with h.lock:
            h.billed[req.headers.get("x-ept-job", "")] += 1


def _until_closed(conn: socket.socket, step: float, chunk: bytes, limit_s: float = 60.0) -> None:
    """Send `chunk` every `step` seconds until the client hangs up (or limit_s)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        conn.sendall(chunk)
        time.sleep(step)


def _serve_attack(h: Hostile, conn: socket.socket, req: Request, mode: str) -> None:
    ans = req.answer()
    simple = {
        "ok": lambda: _body(req, f"{ans}\nAnswer: {ans}"),
        "wrong": lambda: _body(req, f"Answer: {ans + 1}"),
        "flood": lambda: _body(req, "\n" * FLOOD_NEWLINES + f"Answer: {ans}"),
        "spaces": lambda: _body(req, "Answer:" + " " * 2000 + "x"),
        "bignum_answer": lambda: _body(req, "Answer: " + "9" * 5000),
        "bignum_json": lambda: _body(req, f"Answer: {ans}", finish="RAW:" + "9" * 5000),
        "deep": lambda: _body(req, "RAW:" + "[" * 100_000 + "]" * 100_000),
        "nan_finish": lambda: _body(req, f"Answer: {ans}", finish="RAW:NaN"),
        "inf_model": lambda: _body(req, f"Answer: {ans}", model="RAW:Infinity"),
        "content_int": lambda: _body(req, "RAW:42"),
        "echo_key": lambda: _body(req, f"Answer: {ans}", model=f"m-Bearer {req.key}"),
    }
    if mode in simple:
        _send_complete(h, conn, req, simple[mode]())
    elif mode == "echo_secrets":
        echo = _echo_anthropic if req.anthropic else _echo_openai
        _send_complete(h, conn, req, echo(req, h.payload, f"Answer: {ans}"))
    elif mode == "bad_model":
        msg = {"error": {"message": "Invalid model name passed in model=nope. Call `/v1/models` to view available "
                         "models for your key.", "type": "invalid_request_error", "code": "400"}}  # fmt: skip
        _send_complete(h, conn, req, json.dumps(msg).encode(), status=400)
    elif mode == "models":
        _send_complete(h, conn, req, b'{"object":"list","data":[{"id":"hostile-1","object":"model"}]}')
    elif mode == "drip":
        body = _body(req, f"Answer: {ans}")
        conn.sendall(_head(200, len(body), req.stream))
        for b in body:
            conn.sendall(bytes([b]))
            time.sleep(0.05)
    elif mode == "header_drip":
        for b in b"HTTP/1.1 200 OK\r\n" + b"X-Drip: " + b"a" * 100_000:
            conn.sendall(bytes([b]))
            time.sleep(0.05)
    elif mode == "endless":
        conn.sendall(_head(200, None, req.stream))
        ev = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        _until_closed(conn, 0.01, b"%x\r\n%s\r\n" % (len(ev), ev))
    elif mode == "huge":
        prefix = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"'
        conn.sendall(_head(200, len(prefix) + h.huge_mb * 2**20 + 100, req.stream) + prefix)
        block = b"a" * 65536
        for _ in range(h.huge_mb * 16):
            conn.sendall(block)
    elif mode == "early_close":
        body = _body(req, f"Answer: {ans}")
        conn.sendall(_head(200, len(body) + 1000, req.stream) + body[: len(body) // 2])
    elif mode == "stall":
        conn.settimeout(60)
        conn.recv(1)  # returns when the client hangs up
    else:
        raise ValueError(f"unknown hostile mode {mode!r}")


def _handler(h: Hostile) -> type[socketserver.BaseRequestHandler]:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            conn: socket.socket = self.request
            t0 = time.monotonic()
            try:
                req = _read_request(conn)
                if req is None:
                    return
                if req.key != h.key:
                    _send_complete(h, conn, req, b'{"error":{"message":"bad key"}}', status=401)
                    return
                mode = h.pick(req)
                with h.lock:
                    h.served[mode] += 1
                _serve_attack(h, conn, req, mode)
            except OSError:
                pass  # the client hung up: what a bounded client does to an endless reply
            finally:
                with h.lock:
                    h.longest_s = max(h.longest_s, time.monotonic() - t0)

    return Handler


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


def start_hostile(key: str, **kw: Any) -> Hostile:
    """The hostile provider in a daemon thread on a free loopback port."""
    h = Hostile(key=key, **kw)
    srv = _Server(("127.0.0.1", 0), _handler(h))
    h.server = srv
    h.url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return h
