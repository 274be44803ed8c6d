"""The simulated latency of a completion request, drawn from the config's distribution."""

from __future__ import annotations

import random

from elo_per_token.simulator.config import SimConfig


def latency_s(cfg: SimConfig, rng: random.Random) -> float:
    """Seconds to wait before answering: latency_ms with latency_jitter_ms, as uniform, normal or
    exponential (never negative; 0 when both are 0)."""
    mean, jit = cfg.latency_ms, cfg.latency_jitter_ms
    if mean <= 0 and jit <= 0:
        return 0.0
    if cfg.latency_dist == "exponential":
        ms = rng.expovariate(1 / mean) if mean > 0 else 0.0
    elif cfg.latency_dist == "normal":
        ms = rng.gauss(mean, jit)
    else:
        ms = rng.uniform(mean - jit, mean + jit)
    return max(ms, 0.0) / 1000
