"""elo-per-token: how much quality each extra 1k tokens of test-time compute buys.

Every stage is a subpackage of this one import package — `elo_per_token.coordinator`, `.worker`,
`.analysis`, `.contracts`, `.egress`, `.simulator`, `.suites`, `.ept` (the CLI) — so installing the
distribution next to any other project's `analysis` or `worker` package is safe. In the repository the stages
stay top-level folders (the design's layout); pyproject.toml maps them under this package for the wheel and
the editable install.
"""

from pathlib import Path as _Path

__version__ = "0.1.0"

# A plain source checkout (`PYTHONPATH=<checkout>`, no install) has the stage folders next to this one, not
# inside it: look for them there too, so `elo_per_token.analysis` is the checkout's `analysis/`. In an
# installed wheel the parent is site-packages, which has no pyproject.toml of ours, and nothing is added.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "analysis" / "__init__.py").is_file():
    __path__.append(str(_checkout))
