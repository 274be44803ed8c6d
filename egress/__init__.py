"""The egress layer: provider profiles, the HTTP client (retries, failure classes), `ept doctor` and
client-config exports. Credentials and endpoints live here; nothing of evaluation does — workers and the
CLI import from egress, egress imports nothing from worker/, analysis/ or coordinator/."""
