"""Shared pytest fixtures: the simulator (fixtures_sim) and real services (fixtures_services)."""

pytest_plugins = ["fixtures_sim", "fixtures_services", "fixtures_faults"]
