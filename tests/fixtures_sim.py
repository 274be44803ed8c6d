"""Simulator fixtures (a real HTTP server on a free loopback port)."""
