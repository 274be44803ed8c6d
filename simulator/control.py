"""Running a simulator in-process and controlling any simulator (in-thread, subprocess or remote) over HTTP.

`start_in_thread(config) -> RunningSimulator(url, root, port, control, stop())`; `SimControl(root)` calls the
/_sim/ routes: set or read the config, read or reset the stats.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from elo_per_token.simulator.config import SimConfig
from elo_per_token.simulator.generic import Brain
from elo_per_token.simulator.server import make_app


class SimControl:
    """Runtime control over HTTP (works for in-thread, subprocess and remote simulators)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(
            self.root + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            reply: dict[str, Any] = json.loads(r.read())
        return reply

    def set(self, **updates: Any) -> dict[str, Any]:
        """Change config at runtime (same fields as SimConfig); returns the config now in effect."""
        return self._call("POST", "/_sim/config", updates)

    def config(self) -> dict[str, Any]:
        return self._call("GET", "/_sim/config")

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/_sim/stats")

    def reset(self) -> None:
        """Zero the stats and the request counter (the config stays)."""
        self._call("POST", "/_sim/reset", {})


@dataclass
class RunningSimulator:
    url: str  # base_url for OpenAI clients, including /v1
    root: str  # http://host:port (Anthropic clients use this as base_url)
    port: int
    control: SimControl
    _stop: Any = None

    def stop(self) -> None:
        if self._stop:
            self._stop()
            self._stop = None

    def __enter__(self) -> RunningSimulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _start(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048)
    await site.start()
    bound = runner.addresses[0][1]
    return runner, bound


def start_in_thread(
    config: SimConfig | dict[str, Any] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    brain: Brain | None = None,
) -> RunningSimulator:
    """Start a simulator on its own event loop in a daemon thread; port 0 picks a free port."""
    app = make_app(config, brain)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            box["runner"], box["port"] = loop.run_until_complete(_start(app, host, port))
        except BaseException as e:
            box["error"] = e
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(box["runner"].cleanup())
        loop.close()

    t = threading.Thread(target=run, name="ept-simulator", daemon=True)
    t.start()
    ready.wait(30)
    if "error" in box:
        raise box["error"]

    def stop() -> None:
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)

    root = f"http://{host}:{box['port']}"
    return RunningSimulator(
        url=root + "/v1", root=root, port=box["port"], control=SimControl(root), _stop=stop
    )
