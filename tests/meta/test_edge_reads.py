"""The process environment is read in one place: contracts/settings.py, for every `EPT_*` variable.

Outside it (and outside tests/, testkit/ and benchmarks/), every use of `os.environ`/`os.getenv`/`os.putenv` in the
repository's Python files is a documented edge read, listed in EDGE_READS with its reason: a subprocess's
environment, a variable another program owns (PATH, AWS_*, OPENAI_*, the terminal width), the secret a profile
names. A new site, or one more use in a listed file, fails the test with its file and line: read the
variable through contracts/settings.py (declare it there) and pass the value down instead. No stage writes the
environment to hand a value to another (the one write left sets the memory allocator's options before
polars loads, which only the environment can do).

The walk parses each file (`ast`), so `import os as _os`, `from os import environ` and a use split over lines
are all seen; strings and comments naming os.environ are not counted.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_MODULE = "contracts/settings.py"
NOT_SCANNED = ("tests/", "testkit/", "benchmarks/")
ENV_NAMES = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})

# file -> (number of uses, why it reads the environment itself). Keep the reason true when editing the file.
EDGE_READS: dict[str, tuple[int, str]] = {
    "elo_per_token/__init__.py": (
        2,
        "reads and extends _RJEM_MALLOC_CONF: polars' allocator takes its options only from the environment, "
        "before polars is imported (the one write, and not a channel between stages)",
    ),
    "coordinator/services.py": (
        1,
        "builds the environment of the Redis/S3/worker processes `ept services` starts",
    ),
    "worker/graders/mathproc.py": (2, "copies an allow-list of variables into the math child's environment"),
    "worker/sandbox/bwrap.py": (1, "PATH, to find the distribution's bwrap (EPT_BWRAP=PATH)"),
    "ledger/s3config.py": (1, "the AWS_* variables (AWS' names, read as boto3 would): the one read of them"),
    "egress/profiles.py": (
        3,
        "the key variable a profile names (api_key_env: a secret, named by the user, not by ept), and "
        "OPENAI_BASE_URL / OPENAI_MODEL of the implicit `default` profile (the OpenAI SDK's names)",
    ),
    "ept/cli.py": (
        2,
        "TERMINAL_WIDTH / COLUMNS: typer's and click's own width variables, for help in a pipe",
    ),
    "analysis/runcache.py": (
        1,
        "XDG_CACHE_HOME, the user's cache folder the analysis cache (`ept analyze`, `ept view`) goes under",
    ),
    "contracts/secrets.py": (
        2,
        "every key-like value in the environment is a secret the scrubber masks (the raw mapping compared to skip an unchanged environment)",
    ),
    "docs/make_doctor_docs.py": (1, "builds the environment of the `ept doctor` run it documents"),
    ".ci/compose_check.py": (1, "CI: the S3 endpoint the compose file's check was started with"),
}


def python_files(root: Path = ROOT) -> list[str]:
    """The repository's tracked Python files (relative paths), minus tests, benchmarks and the settings module."""
    out = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    return sorted(f for f in out if not f.startswith(NOT_SCANNED) and f != SETTINGS_MODULE)


def environment_uses(source: str) -> list[int]:
    """The line of every use of the os module's environment functions in `source`, however os is imported."""
    tree = ast.parse(source)
    os_names = {"os"}
    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_names |= {a.asname or a.name for a in node.names if a.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            lines += [node.lineno for a in node.names if a.name in ENV_NAMES]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in ENV_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in os_names
        ):
            lines.append(node.lineno)
    return sorted(lines)


def unlisted(files: dict[str, str], listed: dict[str, tuple[int, str]]) -> list[str]:
    """`file:line, ...` for each file whose environment uses are not exactly the listed count."""
    bad = []
    for name, source in sorted(files.items()):
        uses = environment_uses(source)
        expected = listed.get(name, (0, ""))[0]
        if len(uses) != expected:
            where = ", ".join(f"{name}:{n}" for n in uses)
            bad.append(f"{where or name}: {len(uses)} environment use(s), {expected} listed")
    return bad


def test_only_documented_edge_reads_touch_the_environment() -> None:
    files = {f: (ROOT / f).read_text(encoding="utf-8") for f in python_files()}
    assert len(files) > 100 and "worker/lifecycle.py" in files  # the walk is not vacuous
    bad = unlisted(files, EDGE_READS)
    assert not bad, (
        "read EPT_* variables through contracts/settings.py and pass values down; a true edge read goes in "
        "EDGE_READS with its reason:\n" + "\n".join(bad)
    )


def test_every_listed_edge_read_exists_and_says_why() -> None:
    for name, (count, why) in EDGE_READS.items():
        assert (ROOT / name).is_file(), f"{name} is listed but gone"
        assert count >= 1 and len(why) > 20, name


def test_the_walk_finds_every_spelling_of_an_environment_use() -> None:
    """The check can fail: aliased, from-imported and multi-line uses are all counted; a string is not."""
    source = (
        "import os\nimport os as _o\nfrom os import environ, getenv\n\n"
        'a = os.environ.get("EPT_X")\nb = _o.getenv("Y")\nos.environ[\n    "Z"\n] = "1"\n'
        's = "os.environ is mentioned in a string"  # and os.getenv in a comment\n'
    )
    assert environment_uses(source) == [3, 3, 5, 6, 7]
    assert unlisted({"stage/m.py": source}, {}) == [
        "stage/m.py:3, stage/m.py:3, stage/m.py:5, stage/m.py:6, stage/m.py:7: 5 environment use(s), 0 listed"
    ]
    assert unlisted({"stage/m.py": source}, {"stage/m.py": (5, "a reason that is long enough")}) == []


def test_no_stage_writes_the_environment_as_a_channel() -> None:
    """The writes the old code used to hand values between stages (--verify-jobs, `ept worker --profiles
    /--broker`, the demo's key) are gone: no product file assigns to os.environ except the allocator line."""
    writers = []
    for name in python_files():
        for node in ast.walk(ast.parse((ROOT / name).read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for t in targets:
                if isinstance(t, ast.Subscript) and ast.unparse(t.value).endswith("os.environ"):
                    writers.append(f"{name}:{node.lineno}")
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
                ("os.environ.update", "os.environ.setdefault", "os.putenv")
            ):
                writers.append(f"{name}:{node.lineno}")
    assert [w.split(":")[0] for w in writers] == ["elo_per_token/__init__.py"], writers
