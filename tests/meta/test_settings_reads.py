"""Settings are read at the edge and passed down: every call of contracts/settings.py's readers outside it is
listed here with why it is where it is.

A long-lived component (a worker's sandbox, its math grader, its jobs' rate-limit store and allow-lists, the
viewer's store, a sweep's executor) gets its settings as a value read where it is built: the worker's start
(`worker.celery_app.configure_process`, `make_app`), the command that builds it, or a `from_env` constructor
those call; the reader takes the value as a parameter whose default is the environment (a test or a library
caller passes its own). What stays a read at call time is a documented per-call override (`--verify-jobs`,
the import size caps) or a lookup made once per command. A new call of `read*`/`is_set` in a product file,
with a variable not listed for that file, fails here: read it at the edge and pass it down, or list it with
its reason. (tests/meta/test_edge_reads.py does the same for raw os.environ uses.)
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_MODULE = "contracts/settings.py"
MODULE = "elo_per_token.contracts.settings"
NOT_SCANNED = ("tests/", "testkit/", "benchmarks/")
READERS = frozenset({"read", "read_str", "read_bool", "read_int", "read_float", "read_seconds", "is_set"})

_EDGE_WORKER = "a from_env constructor: called once where the worker starts (configure_process / make_app)"
_APP = "worker.celery_app.make_app, the worker's app factory (its edge), and `ept status`'s app"
# file -> {the variable (the first argument as written) -> why it is read there}
ALLOWED: dict[str, dict[str, str]] = {
    "worker/sandbox/settings.py": {
        v: "SandboxSettings.from_env: " + _EDGE_WORKER
        for v in (
            "EPT_SANDBOX_MEMORY_MB",
            "EPT_SANDBOX_CONCURRENCY",
            "EPT_SANDBOX_CGROUP",
            "EPT_SANDBOX_PYTHON",
            "EPT_BWRAP",
            "EPT_SANDBOX_UID_BASE",
        )
    },
    "worker/graders/mathproc.py": {
        v: "MathSettings.from_env: " + _EDGE_WORKER + "; and in the math child, whose start is its own edge"
        for v in ("EPT_MATH_TIMEOUT_S", "EPT_MATH_PROCS", "EPT_MATH_MEMORY_MB")
    },
    "worker/celery_job.py": {
        v: "JobSettings.from_env: " + _EDGE_WORKER
        for v in ("EPT_RATELIMIT_URL", "EPT_BROKER_URL", "LEDGERS_ENV", "BASE_URLS_ENV")
    },
    "worker/celery_app.py": {
        "EPT_BROKER_URL": _APP + " (and the declared default, read from an empty mapping)",
        "EPT_GRADE_TIMEOUT": _APP + " (lease_seconds / grading_route take an env mapping)",
        "EPT_GRADE_QUEUE": _APP + " (lease_seconds checks the lease against the grading wait)",
        "EPT_VISIBILITY_TIMEOUT": _APP,
        "EPT_RESULT_BACKEND": _APP,
    },
    "worker/graders/remote.py": {"EPT_GRADE_QUEUE": "grade_queue(env): called by grading_route in make_app"},
    "worker/trust.py": {
        "name": "the allow-list checks take an env mapping: a worker's jobs pass JobSettings.trust_env(), "
        "`ept worker`'s start check reads the environment (its edge)"
    },
    "coordinator/consumers.py": {
        "EPT_NO_CONSUMER_S": "read when a Celery sweep builds its queue watch (once per sweep), and the declared default",
        "EPT_GRADE_QUEUE": "redis_watch: built once per sweep / `ept status`, names the grade queue it watches",
        "EPT_BROKER_URL": "`ept status`: whether a broker is named at all (the command's edge)",
    },
    "coordinator/celery_exec.py": {
        "EPT_RATELIMIT_URL": "the coordinator's Redis client for the workers' claims: built once per sweep, cached"
    },
    "coordinator/demo.py": {"DEMO_KEY_ENV": "`ept demo`'s key, read once when the demo starts (its edge)"},
    "coordinator/local.py": {
        "EPT_STOP_GRACE_S": "stop_grace_s(): the default of the local executor's grace_s, read when a run starts"
    },
    "coordinator/runlease.py": {
        "EPT_RUN_LEASE_TTL": "lease_ttl_s(): the default of RunLease's ttl_s, read when the lease is built"
    },
    "viewer/store.py": {"EPT_VIEW_PAGE_BUDGET_S": "server_store: read once when `ept view` builds its store"},
    "analysis/runcache.py": {
        "EPT_VIEW_CACHE": "default_cache_dir(): the default of the cache_dir a Store / `ept analyze` is given",
        "EPT_ANALYZE_CACHE": "analyze_cache_on(): read once per `ept analyze`, as its --no-cache",
    },
    "analysis/imports/inspect_log.py": {
        "EPT_MAX_IMPORT_MB": "a documented per-call size cap: checked for each log file `ept import` opens"
    },
    "analysis/imports/zipcap.py": {
        "name": "the documented import caps (EPT_MAX_IMPORT_MB, _TOTAL_MB), read once per `ept import` budget"
    },
    "analysis/io/scan.py": {
        "EPT_MAX_PARQUET_ROWS": "a documented per-call cap, checked for each Parquet file read (settable by a test)"
    },
    "egress/doctor.py": {
        "EPT_CLIENT_CONFIGS": "client_config_paths(): the default of `paths`, once per command"
    },
    "egress/profiles.py": {
        "EPT_PROFILES": "profiles_path(): the default when no path is passed (`ept worker --profiles` passes one)"
    },
    "ledger/keyspace.py": {
        "VERIFY_ENV": "a documented per-call override (EPT_VERIFY_JOBS / `ept --verify-jobs`), the default of verify="
    },
    "ledger/local.py": {"EPT_LEDGER_FSYNC": "LocalStore's fsync= default, read when the store is built"},
    "ledger/store.py": {"EPT_S3_PATIENCE_S": "read when an S3 ledger is opened (its patience_s parameter)"},
}


def python_files(root: Path = ROOT) -> list[str]:
    """The repository's tracked Python files (relative paths), minus tests, benchmarks and the settings module."""
    out = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    return sorted(f for f in out if not f.startswith(NOT_SCANNED) and f != SETTINGS_MODULE)


def settings_reads(source: str) -> list[tuple[int, str]]:
    """(line, variable as written) of every call of a contracts.settings reader in `source`, however imported
    (`from ...settings import read_str as r`, `from ...contracts import settings as s`); a method of another
    object with the same name (`event.is_set()`) is not one."""
    tree = ast.parse(source)
    names: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == MODULE:
            names |= {a.asname or a.name for a in node.names if a.name in READERS}
        elif isinstance(node, ast.ImportFrom) and node.module == "elo_per_token.contracts":
            modules |= {a.asname or a.name for a in node.names if a.name == "settings"}
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name == MODULE and a.asname}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        direct = isinstance(fn, ast.Name) and fn.id in names
        via_module = (
            isinstance(fn, ast.Attribute)
            and fn.attr in READERS
            and isinstance(fn.value, ast.Name)
            and fn.value.id in modules
        )
        if direct or via_module:
            arg = node.args[0] if node.args else None
            out.append((node.lineno, arg.value if isinstance(arg, ast.Constant) else ast.unparse(arg or fn)))
    return sorted(out)


def unlisted(files: dict[str, str], allowed: dict[str, dict[str, str]]) -> list[str]:
    """`file:line variable` for each read whose variable is not listed for its file."""
    return [
        f"{name}:{line} {var}"
        for name, source in sorted(files.items())
        for line, var in settings_reads(source)
        if var not in allowed.get(name, {})
    ]


def test_every_settings_read_outside_the_edge_is_listed_with_its_reason() -> None:
    files = {f: (ROOT / f).read_text(encoding="utf-8") for f in python_files()}
    assert len(files) > 100 and "worker/sandbox/budget.py" in files  # the walk is not vacuous
    bad = unlisted(files, ALLOWED)
    assert not bad, (
        "read the setting where the component is built (worker start, make_app, the command) and pass it down "
        "as a parameter; a true per-call override goes in ALLOWED with its reason:\n" + "\n".join(bad)
    )


def test_every_listed_read_still_exists_and_says_why() -> None:
    """A listing outlives no read: a read moved to the edge takes its line here with it."""
    found = {
        (f, var) for f in python_files() for _, var in settings_reads((ROOT / f).read_text(encoding="utf-8"))
    }
    for name, variables in ALLOWED.items():
        for var, why in variables.items():
            assert (name, var) in found, f"{name}: {var} is listed but no longer read there"
            assert len(why) > 20, (name, var)


def test_the_stages_read_no_worker_setting_per_job() -> None:
    """The deep reads this list replaced stay gone: the sandbox, the math grader and a job's rate-limit store
    and allow-lists take values (worker/sandbox/settings.py, MathSettings, JobSettings), not the environment."""
    for name in (
        "worker/sandbox/budget.py",
        "worker/sandbox/bwrap.py",
        "worker/job.py",
        "worker/lifecycle.py",
    ):
        assert settings_reads((ROOT / name).read_text(encoding="utf-8")) == [], name


def test_the_walk_finds_every_spelling_and_not_other_is_set() -> None:
    """The check can fail: aliased and module-qualified reads are seen, an Event's is_set is not."""
    source = (
        "from elo_per_token.contracts.settings import read_str as rs, is_set\n"
        "from elo_per_token.contracts import settings as s\n"
        "import threading\n"
        'a = rs("EPT_A")\nb = s.read_float("EPT_B", {})\nc = is_set(NAME)\n'
        "d = threading.Event().is_set()\n"
        'e = other.read_str("EPT_NOT_OURS")\n'
    )
    assert settings_reads(source) == [(4, "EPT_A"), (5, "EPT_B"), (6, "NAME")]
    assert unlisted({"stage/m.py": source}, {"stage/m.py": {"EPT_A": "x", "NAME": "y"}}) == [
        "stage/m.py:5 EPT_B"
    ]
