"""elo-per-token: how much quality each extra 1k tokens of test-time compute buys.

Every stage is a subpackage of this one import package — `elo_per_token.coordinator`, `.worker`,
`.analysis`, `.contracts`, `.egress`, `.ledger` (storage), `.simulator`, `.suites`, `.ept` (the CLI) — so installing the
distribution next to any other project's `analysis` or `worker` package is safe. In the repository the stages
stay top-level folders (the design's layout); pyproject.toml maps them under this package for the wheel and
the editable install.
"""

import os as _os
from pathlib import Path as _Path


def _version() -> str:
    """The version, read once from one place: the installed distribution's metadata, or in a plain checkout
    (PYTHONPATH, nothing installed) pyproject.toml next to this folder. No other copy of it exists."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("elo-per-token")
    except PackageNotFoundError:
        import tomllib

        try:
            with open(_Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as f:
                return str(tomllib.load(f)["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


def __getattr__(name: str) -> str:
    """`__version__`, read on first use (then cached as a plain attribute): importlib.metadata costs ~25 ms of
    start-up, which only `ept --version` and a run's manifest need, not every command."""
    if name == "__version__":
        value = _version()
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# polars allocates through its own jemalloc, which keeps freed pages a while before giving them back (polars'
# default: 500 ms dirty, then 1 s muzzy): an analysis of a 1M-job run frees ~0.3 GB between stages that then
# still counts as resident at the next stage's peak (1.93-1.96 GiB peak RSS with the earlier 1000 ms setting;
# 1.71-1.72 GiB with this one, ~3% slower, measured in docs/benchmarks.md). jemalloc reads this once, when polars is first imported, so it must be set before
# that. A value the user set wins; polars' own default (which polars writes into the environment on import,
# so a parent process that imported polars hands it to us) does not count as the user's.
_POLARS_DEFAULT = "dirty_decay_ms:500,muzzy_decay_ms:1000"
_conf = _os.environ.get("_RJEM_MALLOC_CONF", "")
if _conf in ("", _POLARS_DEFAULT, _POLARS_DEFAULT + ",thp:always,metadata_thp:always"):
    _os.environ["_RJEM_MALLOC_CONF"] = ",".join(filter(None, [_conf, "dirty_decay_ms:250,muzzy_decay_ms:0"]))

# A plain source checkout (`PYTHONPATH=<checkout>`, no install) has the stage folders next to this one, not
# inside it: look for them there too, so `elo_per_token.analysis` is the checkout's `analysis/`. In an
# installed wheel the parent is site-packages, which has no pyproject.toml of ours, and nothing is added.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "analysis" / "__init__.py").is_file():
    __path__.append(str(_checkout))
