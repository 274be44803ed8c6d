"""`ept view`: a local, read-only web app over a ledger or a run (added to the `ept` app by ept.cli)."""

from __future__ import annotations

from typing import Annotated

import typer

from elo_per_token.contracts.errors import InputError

# Not the simulator's 8765: `ept simulate & ept view` with defaults must both start.
VIEW_PORT = 8766


_TargetOpt = Annotated[
    str,
    typer.Argument(
        help="A ledger (folder or s3://bucket/prefix) or a run in one (…/runs/ID, or a run id in --ledger)."
    ),
]
_LedgerOpt = Annotated[
    str | None,
    typer.Option("--ledger", help="Ledger holding a run given by id; default ./ept-out/ledger."),
]
_HostOpt = Annotated[str, typer.Option("--host", help="Address to listen on (default: this machine only).")]
_PortOpt = Annotated[
    int,
    typer.Option("--port", help=f"Port (default {VIEW_PORT}; `ept simulate` has 8765); 0 picks a free one."),
]
_BudgetOpt = Annotated[
    str | None,
    typer.Option("--budget", help="Tokens (3k) or dollars ($0.002) per task for the recommendation."),
]
_MarginOpt = Annotated[
    float,
    typer.Option(
        "--margin", help="Elo: the recommendation's equivalence margin (as `ept analyze --margin`)."
    ),
]
_TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="EPT_VIEW_TOKEN",
        help="Required in every request (?token= or its cookie); generated when --host is not loopback.",
    ),
]


def view(
    target: _TargetOpt = "ept-out/ledger",
    ledger: _LedgerOpt = None,
    host: _HostOpt = "127.0.0.1",
    port: _PortOpt = VIEW_PORT,
    budget: _BudgetOpt = None,
    margin: _MarginOpt = 10.0,
    token: _TokenOpt = None,
) -> None:
    """Serve the runs, their tables, an interactive Elo-vs-tokens plot, the arms x tasks grid and job transcripts."""
    from elo_per_token.analysis.recommend import check_margin, parse_budget
    from elo_per_token.viewer.server import serve
    from elo_per_token.viewer.store import server_store

    parse_budget(budget)
    check_margin(margin)
    if not 0 <= port <= 65535:
        raise InputError(f"must be 0..65535, got {port}", field="--port")
    token = _token(host, token)
    ledger_url, run_id = _target(target, ledger)
    try:
        server = serve(server_store(ledger_url, budget, margin), host, port, token=token)
    except OSError as e:
        import errno

        why = (
            "in use (pick another --port, or 0 for a free one)" if e.errno == errno.EADDRINUSE else e.strerror
        )
        raise InputError(f"cannot listen on {host}:{port}: {why}", field="--port") from None
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    where = f"http://{shown}:{server.server_address[1]}/" + (f"run/{run_id}" if run_id else "")
    where += f"?token={token}" if token else ""  # printed once: the browser keeps it as a cookie
    typer.echo(f"ept view: serving {ledger_url} (read-only) at {where}  (Ctrl-C stops)", err=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _token(host: str, token: str | None) -> str | None:
    """The token requests must carry: as given, or generated for an address other than loopback (with a
    warning: anyone who can reach the port and has the URL reads every transcript)."""
    import secrets

    from elo_per_token.viewer.server import check_token, is_loopback

    if token is not None:
        return check_token(token)
    if is_loopback(host):
        return None
    typer.echo(
        f"ept view: warning: --host {host} is not this machine only: anyone who can reach the port could read "
        "every run's transcripts and grader output, so each request must carry the token in the URL below "
        "(kept as a cookie once opened). Share it as you would a password.",
        err=True,
    )
    return secrets.token_urlsafe(24)


def _target(target: str, ledger: str | None) -> tuple[str, str | None]:
    """(ledger URL, run id or None): a ledger as given, or the ledger and id of a run."""
    import os

    from elo_per_token.analysis.io import run_source

    src = run_source(target)
    if src is not None:
        return src.ledger_url, src.run_id
    if target.startswith("s3://") or os.path.isdir(os.path.join(target, "runs")) or os.path.isdir(target):
        return target, None
    from elo_per_token.analysis.io import resolve_input

    src = run_source(
        resolve_input(target, ledger)
    )  # a bare run id: checked, its ledger's runs listed if missing
    if src is None:
        raise InputError(f"not a ledger or a run: {target!r}", field="target")
    return src.ledger_url, src.run_id


def register(app: typer.Typer) -> None:
    app.command("view")(view)
