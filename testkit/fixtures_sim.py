"""Simulator fixtures: a real HTTP server (aiohttp, own event loop in a thread) on a free loopback port.

def test_x(sim):                      # a fresh simulator per test, default config
    client = ProviderClient(sim.profile(), api_key=SIM_KEY)
    sim.control.set(rate_429=1.0)     # change config at runtime (POST /_sim/config)
    sim.control.stats()["by_job"]     # request counts per status / job / arm / role / route

def test_y(make_sim):                 # custom start config; all are stopped after the test
    s = make_sim(api_key=SIM_KEY, latency_ms=50)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

# A dummy key for tests; "canary" so tests can assert it never leaks anywhere.
SIM_KEY = "sk-canary-0123456789abcdefWXYZ"


@dataclass
class SimHandle:
    url: str  # base_url for OpenAI clients, including /v1
    root: str  # http://127.0.0.1:PORT (Anthropic clients' base_url)
    port: int
    control: Any  # simulator.control.SimControl: .set(**cfg), .config(), .stats(), .reset()
    running: Any

    def profile(self, protocol: str = "openai", **overrides: Any) -> Any:
        """A Profile pointing at this simulator (key env: EPT_SIM_API_KEY; pass api_key= to the client)."""
        from elo_per_token.egress.profiles import Profile

        fields: dict[str, Any] = {
            "name": f"sim-{protocol}",
            "protocol": protocol,
            "api_key_env": "EPT_SIM_API_KEY",
            "model": "ept-sim-1",
            "base_url": self.url if protocol == "openai" else self.root,
            "timeout": 10.0,
            "max_retries": 3,
            "supports_n": protocol == "openai",
        }
        fields.update(overrides)
        return Profile(**fields)

    def stop(self) -> None:
        self.running.stop()


def _start(config: dict[str, Any] | None = None, *, brain: Any = None, **kw: Any) -> SimHandle:
    from elo_per_token.simulator.control import start_in_thread

    r = start_in_thread({**(config or {}), **kw}, brain=brain)
    return SimHandle(url=r.url, root=r.root, port=r.port, control=r.control, running=r)


@pytest.fixture
def make_sim() -> Iterator[Callable[..., SimHandle]]:
    started: list[SimHandle] = []

    def factory(config: dict[str, Any] | None = None, *, brain: Any = None, **kw: Any) -> SimHandle:
        h = _start(config, brain=brain, **kw)
        started.append(h)
        return h

    yield factory
    for h in started:
        h.stop()


@pytest.fixture
def sim(make_sim: Callable[..., SimHandle]) -> SimHandle:
    """A fresh simulator with the default config (no key check, no faults, zero latency)."""
    return make_sim()


@pytest.fixture
def sim_keyed(make_sim: Callable[..., SimHandle]) -> SimHandle:
    """A fresh simulator that accepts only SIM_KEY (others get 401)."""
    return make_sim(api_key=SIM_KEY)


@pytest.fixture
def generic_sim(make_sim: Callable[..., SimHandle]) -> SimHandle:
    """A fresh simulator answering with GenericBrain, whatever simulator/brain.py does (for protocol tests)."""
    from elo_per_token.simulator.generic import GenericBrain

    return make_sim(brain=GenericBrain())


def write_profiles(path: Any, sim: SimHandle, name: str = "p", key_env: str = "EPT_P_KEY") -> Any:
    """A profiles.toml at `path` with one OpenAI-protocol profile `name` for `sim`, its key read from
    `key_env`: what a test that runs `ept` as a user would write. Returns the path."""
    path.write_text(f'[profiles.{name}]\nprotocol = "openai"\nbase_url = "{sim.url}"\napi_key_env = "{key_env}"\n'
                    'model = "ept-sim-1"\n')  # fmt: skip
    return path
