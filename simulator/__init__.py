"""The ept simulator: an OpenAI-compatible (and Anthropic messages) HTTP server that is NOT a real model.

It gives the project a provider it can always reach: deterministic answers for a seed, configurable
latency and faults, and request statistics (docs/simulator.md). In-process use:
`simulator.control.start_in_thread(config) -> RunningSimulator(url, stop())`.
"""
