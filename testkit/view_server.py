"""Start a real `ept view` process and speak raw HTTP/1.1 to it (any Host, Origin or path a browser or an
attacker could send), and read the server's memory from /proc."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class View:
    """A running `ept view`: its process, port, the URL it printed and the Host header it answers to."""

    proc: subprocess.Popen[str]
    port: int
    url: str
    log: Any = None  # the server's stderr (a temporary file)

    def stderr(self) -> str:
        """Everything the server wrote to stderr so far (its warnings and access log)."""
        self.log.flush()
        self.log.seek(0)
        return str(self.log.read())

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kib(self, field: str = "VmHWM") -> int:
        """The server's VmHWM (peak resident memory) or VmRSS in KiB, from /proc."""
        text = Path(f"/proc/{self.proc.pid}/status").read_text()
        m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
        assert m, text
        return int(m.group(1))


@contextmanager
def view(
    ledger: Path | str, *args: str, cwd: Path | None = None, page_budget_s: float = 600.0
) -> Iterator[View]:
    """`python -m elo_per_token view LEDGER --port 0 ARGS…` until the block ends (port passed explicitly: the
    default port is not assumed)."""
    import os

    # The viewer's disk cache (viewer.runstate) in a folder of the test's, not the user's ~/.cache. A request
    # waits for its analysis up to `page_budget_s` (the server's 2 s would make a loaded machine's first page
    # an "analysing" page; tests of that pass a small one).
    env = {
        **os.environ,
        "EPT_VIEW_CACHE": os.environ.get("EPT_VIEW_CACHE") or tempfile.mkdtemp(prefix="ept-vc-"),
        "EPT_VIEW_PAGE_BUDGET_S": str(page_budget_s),
    }
    # The access log goes to a file, never a pipe nobody reads: requests with long URLs would fill a pipe's
    # 64 KB and block the server mid-request.
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "elo_per_token", "view", str(ledger), "--port", "0", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            m = re.search(r"(http://\S+?:(\d+)/\S*)", line)
            if not m:
                proc.wait(timeout=30)
                log.seek(0)
            assert m, (line, "" if m else log.read())
            yield View(proc, int(m.group(2)), m.group(1), log)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@dataclass
class Reply:
    status: int  # 0: an HTTP/0.9 reply (no status line)
    headers: dict[str, str]
    body: bytes


def request(
    port: int,
    path: str = "/",
    *,
    host: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    method: str = "GET",
    timeout: float = 120,
) -> Reply:
    """One raw HTTP/1.1 request (headers sent exactly as given, latin-1), the whole reply read."""
    lines = [f"{method} {path} HTTP/1.1"]
    lines += [f"Host: {host if host is not None else f'127.0.0.1:{port}'}"]
    lines += [f"{k}: {v}" for k, v in headers] + ["Connection: close", "", ""]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall("\r\n".join(lines).encode("latin-1"))
        chunks = []
        while chunk := s.recv(1 << 16):
            chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.startswith(b"HTTP/"):  # an HTTP/0.9 answer (a request line without a version): body only
        return Reply(0, {}, raw)
    head, _, body = raw.partition(b"\r\n\r\n")
    first, *rest = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for h in rest:
        k, _, v = h.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return Reply(int(first.split()[1]), hdrs, body)
