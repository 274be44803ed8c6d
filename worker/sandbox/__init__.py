"""Running untrusted (model-written) code: a bubblewrap sandbox, a harness inside it that reports values,
and worker-side checks that turn those values into verdicts. See docs/reliability.md ("Hostile input")."""
