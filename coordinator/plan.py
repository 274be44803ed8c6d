"""The sweep plan: a TOML file, parsed and fully validated before anything runs.

name = "my-sweep"                 # the run id (letters, digits, - _ .)
profile = "simulator"             # provider profile NAME (profiles.toml); never a key
suites = ["math", "suites/my.jsonl"]   # built-in names or JSONL files (relative to the plan file)
tasks_per_family = 40             # optional: first N tasks of each family (quick demos)
replicates = 1
seed = 7
ledger = "./ept-out/ledger"       # a folder (relative to the working dir), file://…, or s3://bucket/prefix
executor = "local"                # local | celery
concurrency = 16                  # local: threads; celery: jobs in flight hint (workers set their own)
queue = "ept"                     # celery queue name
batch_size = 200                  # celery: messages enqueued per batch
jobs_per_message = 4              # celery: jobs per message (slow jobs come back and go one per message)
transcripts = true                # keep each job's transcript beside its result (false: private data)

[weights]                         # family weights for the merged Elo (default: equal)
math = 2.0

[[arms]]                          # strategy x budgets x params
strategy = "majority"
budgets = [4, 8]
params = {}                       # other strategy parameters, e.g. { depth = 2, beam = 2 }

[[arms]]                          # generation settings on an arm name it: majority@4[effort=low]
strategy = "majority"
budgets = [4]
reasoning_effort = ["low", "high"]  # a list is an arm dimension: one arm per value (thinking_budget too)
max_tokens = 1024

[generation]                      # for every arm (contracts.generation): max_tokens, temperature, top_p,
max_tokens = 2048                 # stop, seed, reasoning_effort, thinking_budget, extra_body

[rate_limits.simulator]           # per profile, shared by all workers (requests / tokens per minute)
rpm = 6000
tpm = 2000000

[budget]                          # a cap on the run's total spend (`ept sweep --max-tokens/--max-cost`)
max_tokens = 5000000              # strategy tokens, all sessions of the run together
max_cost = 20.0                   # USD at the profile's prices (counted at the higher of in/out)
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from elo_per_token.common.tomlpos import toml_line
from elo_per_token.contracts import generation
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.jobs import MAX_JOBS_PER_MESSAGE
from elo_per_token.contracts.manifest import MAX_BOOTSTRAP_ROUNDS, MAX_SEED
from elo_per_token.contracts.tasks import Task
from elo_per_token.ledger.store import DEFAULT_LEDGER

if TYPE_CHECKING:  # the bounds in the annotations, resolved by common.checked when a plan is parsed
    from annotated_types import Ge, Gt, Interval, MinLen, Predicate

    from elo_per_token.common.checked import ModelError

Executor = Literal["local", "celery"]
EXECUTORS: tuple[Executor, ...] = get_args(Executor)
# The task of the jobs built only to check an arm's strategy or name its label: neither reads the task beyond its
# id and family (a job key's task part), so any schema-valid record does.
PROBE_TASK: Task = {"task_id": "t", "family": "f", "grader": {"type": "none"}}
# Upper bounds: a plan is untrusted input, and a budget of 10^9 or 10^10 replicates must fail here, in
# milliseconds, with file:line:field — not as a MemoryError inside a job or a hang while jobs are built.
MAX_BUDGET = 4096  # budget_n per job (samples / branching factor); the simulator serves n <= 128 per request
MAX_REPLICATES = 10_000
MAX_CONCURRENCY = 4096
MAX_BATCH_SIZE = 100_000
# bootstrap_rounds and seed: MAX_BOOTSTRAP_ROUNDS, MAX_SEED (contracts.manifest; the analysis checks a
# manifest's settings with the same bounds).
# Jobs per plan (tasks x budgets x replicates), checked from counts before any job is built; raise it with
# `max_jobs = N` in the plan or `ept sweep --max-jobs N`.
DEFAULT_MAX_JOBS = 2_000_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def valid_run_name(name: str) -> bool:
    """Whether `name` may name a run (a folder/prefix in the ledger): the plan's `name` rule."""
    return bool(_NAME.match(name))


def _run_name_ok(name: str) -> bool:
    # Names and places are compared and joined as given minus the spaces around them.
    return valid_run_name(name.strip())


def _distinct(values: list[Any]) -> bool:
    return len(set(values)) == len(values)


@dataclass(frozen=True)
class Arm:
    strategy: str
    budgets: tuple[int, ...]
    params: dict[str, Any] = field(default_factory=dict)
    gens: tuple[dict[str, Any], ...] = (
        {},
    )  # arm-level generation settings, one entry per arm-dimension value


@dataclass(frozen=True)
class RateLimit:
    """[rate_limits.<profile>]: requests and tokens per minute, shared by all workers."""

    rpm: Annotated[int, Ge(1)] | None = field(default=None, metadata={"must": "a positive integer"})
    tpm: Annotated[int, Ge(1)] | None = field(default=None, metadata={"must": "a positive integer"})


@dataclass(frozen=True)
class Budget:
    """[budget]: a cap on the run's total spend (strategy tokens; USD at the profile's prices)."""

    max_tokens: Annotated[int, Ge(1)] | None = field(default=None, metadata={"must": "a positive integer"})
    max_cost: Annotated[float, Gt(0)] | None = field(
        default=None, metadata={"must": "a finite number of USD > 0"}
    )


# A string setting: non-blank (stripped after the check).
_TEXT = {"must": "a non-empty string"}


@dataclass(frozen=True)
class ArmTable:
    """One [[arms]] table as written, but its generation settings (checked by contracts.generation): `budget = N`
    is short for `budgets = [N]`."""

    strategy: Annotated[str, Predicate(str.strip)] = field(metadata=_TEXT)
    budgets: (
        Annotated[list[Annotated[int, Interval(ge=1, le=MAX_BUDGET)]], MinLen(1), Predicate(_distinct)] | None
    ) = field(default=None, metadata={"must": f"a non-empty list of distinct integers in 1..{MAX_BUDGET:,}"})
    budget: Annotated[int, Interval(ge=1, le=MAX_BUDGET)] | None = field(
        default=None, metadata={"must": f"an integer in 1..{MAX_BUDGET:,}"}
    )
    params: dict[str, Any] = field(default_factory=dict, metadata={"must": "a table of strategy parameters"})


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What names a run and how it runs, declared once for the plan file (`PlanFile`) and the parsed `Plan`: the
    annotations (types, bounds) are the check (common.checked); `metadata["must"]` is the rule in the words an
    error shows."""

    name: Annotated[str, Predicate(_run_name_ok)] = field(
        metadata={"must": "letters, digits, '-', '_' or '.' (it names the run in the ledger)"}
    )
    profile: Annotated[str, Predicate(str.strip)] = field(default="default", metadata=_TEXT)
    replicates: Annotated[int, Interval(ge=1, le=MAX_REPLICATES)] = field(
        default=1, metadata={"must": f"an integer in 1..{MAX_REPLICATES:,}"}
    )
    seed: Annotated[int, Interval(ge=0, le=MAX_SEED)] = field(
        default=0, metadata={"must": f"an integer in 0..{MAX_SEED:,}"}
    )
    tasks_per_family: Annotated[int, Ge(1)] | None = field(default=None, metadata={"must": "an integer >= 1"})
    ledger: Annotated[str, Predicate(str.strip)] = field(default=DEFAULT_LEDGER, metadata=_TEXT)
    executor: Executor = field(default="local", metadata={"must": f"one of {', '.join(EXECUTORS)}"})
    # local: threads; celery: jobs in flight hint (workers set their own)
    concurrency: Annotated[int, Interval(ge=1, le=MAX_CONCURRENCY)] = field(
        default=8, metadata={"must": f"an integer in 1..{MAX_CONCURRENCY:,}"}
    )
    queue: Annotated[str, Predicate(str.strip)] = field(default="ept", metadata=_TEXT)
    batch_size: Annotated[int, Interval(ge=1, le=MAX_BATCH_SIZE)] = field(
        default=200, metadata={"must": f"an integer in 1..{MAX_BATCH_SIZE:,}"}
    )
    # celery: jobs per message: divides Celery's own cost per job; a batch hands back the jobs it has not started
    # after 1 s, sent again one per message (worker.celery_batch)
    jobs_per_message: Annotated[int, Interval(ge=1, le=MAX_JOBS_PER_MESSAGE)] = field(
        default=4, metadata={"must": f"an integer in 1..{MAX_JOBS_PER_MESSAGE}"}
    )
    # [weights]: family = weight for the merged Elo (finite: nan or inf would poison it)
    weights: dict[str, Annotated[float, Ge(0)]] = field(default_factory=dict)
    bootstrap_rounds: Annotated[int, Interval(ge=0, le=MAX_BOOTSTRAP_ROUNDS)] = field(
        default=200, metadata={"must": f"an integer in 0..{MAX_BOOTSTRAP_ROUNDS:,}"}
    )
    anchor: Annotated[str, Predicate(str.strip)] | None = field(default=None, metadata=_TEXT)
    max_jobs: Annotated[int, Ge(1)] = field(default=DEFAULT_MAX_JOBS, metadata={"must": "an integer >= 1"})
    # Keep each job's transcript (prompts, completions, grader evidence) beside its result; false for private data.
    transcripts: bool = field(default=True, metadata={"must": "true or false"})


@dataclass(frozen=True, kw_only=True)
class PlanFile(RunSettings):
    """A plan file as written: the run settings, its lists and its tables' shapes (each table's own fields are then
    checked by its model: ArmTable, RateLimit, Budget, contracts.generation, adaptive.settings)."""

    suites: str | Annotated[list[Annotated[str, Predicate(str.strip)]], MinLen(1)] = field(
        metadata={
            "must": "a non-empty list of suite names or files",
            "missing": "built-in suite names or JSONL files",
        }
    )
    arms: Annotated[list[dict[str, Any]], MinLen(1)] = field(
        metadata={
            "must": "a non-empty list of [[arms]] tables",
            "missing": "[[arms]] tables, each: strategy, budgets",
        }
    )
    rate_limits: dict[str, dict[str, Any]] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)
    adaptive: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Plan(RunSettings):
    """A validated plan (`parse_plan`): the run settings plus its suites, arms and tables, checked."""

    suites: tuple[str, ...] = ()
    arms: tuple[Arm, ...] = ()
    rate_limits: dict[str, RateLimit] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)  # plan-level generation settings (every arm)
    max_total_tokens: int | None = None  # [budget] max_tokens: the run's token cap (None: no cap)
    max_cost: float | None = None  # [budget] max_cost: the run's cap in USD
    source: str = "<plan>"
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.name

    @property
    def digest(self) -> str:
        """Hash of what defines the jobs (not where they run): a resumed run must have the same digest."""
        keep = {
            k: self.raw.get(k)
            for k in ("name", "profile", "suites", "tasks_per_family", "replicates", "seed", "arms")
        }
        if "generation" in self.raw:  # only when present: digests of plans without it stay as they were
            keep["generation"] = self.raw["generation"]
        return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def limits_for(self, profile: str) -> RateLimit:
        return self.rate_limits.get(profile, RateLimit())

    def with_overrides(self, **kw: Any) -> Plan:
        import dataclasses

        return dataclasses.replace(self, **{k: v for k, v in kw.items() if v is not None})


class _V:
    """Validation helpers bound to one file, so every error names the file, line and field."""

    def __init__(self, file: str, text: str) -> None:
        self.file, self.text = file, text

    def err(self, msg: str, fieldname: str, key: str | None = None, table: str | None = None) -> InputError:
        m = re.match(r"^(\w+)\[(\d+)\]", fieldname)
        nth = int(m.group(2)) if m and table == m.group(1) else 0
        line = toml_line(self.text, key or fieldname.split(".")[-1], table, nth)
        if line is None:  # an inline table (`weights = { math = -1 }`): the line of its top-level key
            line = toml_line(self.text, fieldname.split(".")[0].split("[")[0])
        return InputError(msg, file=self.file, line=line, field=fieldname)

    def checked(self, cls: type, data: Any, where: str = "", table: str | None = None) -> dict[str, Any]:
        """`data`'s fields checked by `cls` (common.checked); InputError naming the file, line and field. `where`
        prefixes the field (`arms[1]`), `table` is the TOML table its keys sit in (`arms`, `budget`)."""
        from elo_per_token.common.checked import ModelError, checked_fields  # pydantic: when a plan is parsed

        try:
            return checked_fields(cls, data)
        except ModelError as e:
            raise self.model_err(e, where, table) from None

    def model_err(self, e: ModelError, where: str = "", table: str | None = None) -> InputError:
        """A common.checked.ModelError as an InputError at its file, line and field."""
        fieldname = ".".join(p for p in (where, e.field) if p) or where
        # A top-level table's key: `weights.math` is `math` in [weights].
        if table is None and len(e.path) > 1:
            table = ".".join(e.path[:-1])
        return self.err(e.message, fieldname, e.path[-1] if e.path else None, table)


def parse_plan(text: str, file: str = "<plan>", base_dir: str | Path | None = None) -> Plan:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        # tomllib reports "(at end of document)" without a line: that is the last line of the file.
        line = int(m.group(1)) if m else max(1, text.count("\n") + (0 if text.endswith("\n") else 1))
        raise InputError(f"not valid TOML: {e}", file=file, line=line) from None
    except RecursionError:
        raise InputError("not valid here: TOML nested too deeply", file=file) from None
    except ValueError as e:  # tomllib lets int()'s digit limit through: `seed = 1111…` (4,300+ digits)
        raise InputError(f"not valid TOML: {e}", file=file) from None
    return _from_raw(raw, file, text, base_dir)


def plan_from_raw(raw: dict[str, Any], source: str = "<plan>") -> Plan:
    """Rebuild a plan from its parsed TOML (as stored in a run manifest); relative suite files resolve
    against the original plan file's folder."""
    base = Path(source).parent if source and not source.startswith("<") else None
    return _from_raw(raw, source, "", base)


def _from_raw(raw: dict[str, Any], file: str, text: str, base_dir: str | Path | None) -> Plan:
    # The file's shape and run settings first (PlanFile), then each table's fields in the order a reader meets
    # them (arms, then the tables), so a plan with several mistakes always reports the same, first one.
    v = _V(file, text)
    values = v.checked(PlanFile, raw)
    arms = [_arm(a, i, v) for i, a in enumerate(values.pop("arms"))]
    _check_strategies(arms, v)
    _check_distinct_arms(arms, v)
    suites = _suites(values.pop("suites"), base_dir)
    limits = {
        prof: RateLimit(**v.checked(RateLimit, lim, f"rate_limits.{prof}", f"rate_limits.{prof}"))
        for prof, lim in values.pop("rate_limits").items()
    }
    plan_gen = generation.check(
        values.pop("generation"), lambda msg, k: v.err(msg, f"generation.{k}", key=k, table="generation")
    )
    budget = Budget(**v.checked(Budget, values.pop("budget"), "budget", "budget"))
    from elo_per_token.coordinator.adaptive.settings import check_adaptive  # the plan's [adaptive] table

    check_adaptive(values.pop("adaptive"), v)
    # Names and places are compared and joined as given minus the spaces around them.
    settings: dict[str, Any] = {k: val.strip() if isinstance(val, str) else val for k, val in values.items()}
    return Plan(
        suites=tuple(suites),
        arms=tuple(arms),
        rate_limits=limits,
        generation=plan_gen,
        max_total_tokens=budget.max_tokens,
        max_cost=budget.max_cost,
        source=file,
        raw=raw,
        **settings,
    )


def _suites(given: str | list[str], base_dir: str | Path | None) -> list[str]:
    """Suite names and files; a relative JSONL file is resolved against the plan file's folder."""
    base = Path(base_dir) if base_dir else None
    suites = []
    for s in [given] if isinstance(given, str) else given:
        s = s.strip()
        if s.endswith(".jsonl") and base is not None and not Path(s).is_absolute():
            s = str((base / s).resolve())
        suites.append(s)
    return suites


def _arm(a: dict[str, Any], i: int, v: _V) -> Arm:
    """One [[arms]] table (ArmTable's annotations): its strategy, budgets, parameters and generation settings."""
    where = f"arms[{i}]"
    from elo_per_token.common.checked import ModelError, checked_fields

    try:
        t = checked_fields(ArmTable, {k: x for k, x in a.items() if k not in generation.FIELDS})
    except ModelError as e:
        if e.kind == "extra_forbidden":
            known = ", ".join(["strategy", "budgets", "params", *generation.FIELDS])
            e = ModelError(e.path, f"unknown field (known: {known})")
        raise v.model_err(e, where, "arms") from None
    budgets = t["budgets"] if t["budgets"] is not None else [t["budget"]] if t["budget"] is not None else None
    if budgets is None:
        raise v.err("missing required field (a list of budgets)", f"{where}.budgets", "budgets", "arms")
    return Arm(t["strategy"].strip(), tuple(budgets), dict(t["params"]), _arm_gens(a, where, v))


def _arm_gens(a: dict[str, Any], where: str, v: _V) -> tuple[dict[str, Any], ...]:
    """The arm's generation settings, one dict per combination of its dimension values (lists)."""
    nth = int(where[5:-1])
    fixed = {
        k: a[k]
        for k in generation.FIELDS
        if k in a and not (k in generation.DIMENSIONS and isinstance(a[k], list))
    }

    def err(msg: str, k: str) -> InputError:
        return InputError(msg, file=v.file, line=toml_line(v.text, k, "arms", nth), field=f"{where}.{k}")

    combos: list[dict[str, Any]] = [generation.check(fixed, err)]
    for k in generation.DIMENSIONS:
        if k in a and isinstance(a[k], list):
            if not a[k] or len({json.dumps(x) for x in a[k]}) != len(a[k]):
                raise err("must be a non-empty list of distinct values", k)
            vals = [generation.check({k: x}, err)[k] for x in a[k]]
            combos = [{**c, k: x} for c in combos for x in vals]
    return tuple(combos)


def _check_strategies(arms: list[Arm], v: _V) -> None:
    """Unknown strategies, budgets or parameters fail here, before anything runs (when the registry is installed)."""
    try:
        from elo_per_token.worker.strategies import STRATEGIES as registry
    except ImportError:  # the registry is optional for plan parsing (e.g. a coordinator-only install)
        return
    from elo_per_token.contracts.jobs import Job

    for i, a in enumerate(arms):
        if a.strategy not in registry:
            raise v.err(
                f"unknown strategy {a.strategy!r} (known: {', '.join(sorted(registry))})",
                f"arms[{i}].strategy",
                key="strategy",
                table="arms",
            )
        for b in a.budgets:
            probe = Job(
                run_id="check",
                task=PROBE_TASK,
                strategy=a.strategy,
                budget_n=b,
                params=a.params,
            )
            try:
                registry[a.strategy].check(probe)
            except InputError as e:
                key = "budgets" if e.field == "budget_n" else "params"
                raise v.err(e.message, f"arms[{i}].{key}", key=key, table="arms") from None


def _check_distinct_arms(arms: list[Arm], v: _V) -> None:
    """Two arms with the same label would share every job key (one arm counted twice): named here, at the second
    arm's table, rather than as a key clash without a line once the tasks are loaded."""
    from elo_per_token.contracts.jobs import Job

    seen: dict[str, int] = {}
    for i, a in enumerate(arms):
        for b in a.budgets:
            for g in a.gens:
                job = Job(
                    run_id="x", task=PROBE_TASK, strategy=a.strategy, budget_n=b, params=dict(a.params), gen=g
                )
                if seen.setdefault(job.arm, i) != i:
                    raise v.err(
                        f"the same arm as arms[{seen[job.arm]}] ({job.arm}): their jobs would share keys",
                        f"arms[{i}]",
                        table="arms",
                    )


def check_job_count(plan: Plan, n_tasks: int) -> int:
    """The plan's job count from counts alone (tasks x budgets x replicates); InputError above plan.max_jobs.
    Called before any job is built, so 10^10 jobs fail at once instead of filling memory."""
    n_arms = sum(len(a.budgets) * len(a.gens) for a in plan.arms)  # reasoning-effort lists multiply arms too
    n = n_tasks * n_arms * plan.replicates
    if n > plan.max_jobs:
        raise InputError(
            f"the plan expands to {n:,} jobs ({n_tasks:,} tasks x {n_arms} arms "
            f"x {plan.replicates:,} replicates), over the limit of {plan.max_jobs:,}; if that is intended, "
            "raise it with `max_jobs = N` in the plan or `ept sweep --max-jobs N`",
            file=plan.source,
            field="max_jobs",
        )
    return n


def load_plan(path: str | Path) -> Plan:
    p = Path(path)
    if not p.is_file():
        raise InputError("plan file not found", file=str(path))
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read plan: {e}", file=str(path)) from None
    return parse_plan(text, file=str(path), base_dir=p.resolve().parent)


def arm_labels(plan: Plan) -> list[str]:
    """Every arm label of the plan (strategy@budget[variant]), in plan order."""
    from elo_per_token.contracts.jobs import Job

    probe = PROBE_TASK
    return [
        Job(run_id="x", task=probe, strategy=a.strategy, budget_n=b, params=dict(a.params), gen=dict(g)).arm
        for a in plan.arms
        for b in a.budgets
        for g in a.gens
    ]


def select_arms(plan: Plan, pattern: str) -> Plan:
    """The plan restricted to the arms whose label matches PATTERN (shell wildcards; several separated by ','):
    `--arms 'majority@*'`. Labels and job keys are those of the full plan, so a partial run fills the same run."""
    import fnmatch

    from elo_per_token.contracts.jobs import Job

    pats = [p.strip() for p in pattern.split(",") if p.strip()]
    probe = PROBE_TASK
    kept: list[Arm] = []
    for a in plan.arms:
        for b in a.budgets:
            for g in a.gens:
                label = Job(
                    run_id="x",
                    task=probe,
                    strategy=a.strategy,
                    budget_n=b,
                    params=dict(a.params),
                    gen=dict(g),
                ).arm
                if any(fnmatch.fnmatchcase(label, p) for p in pats):
                    kept.append(Arm(a.strategy, (b,), dict(a.params), (dict(g),)))
    if not kept:
        raise InputError(
            f"no arm matches {pattern!r}; the plan's arms: {', '.join(arm_labels(plan))}",
            file=plan.source,
            field="--arms",
        )
    return plan.with_overrides(arms=tuple(kept))


def limit_tasks(plan: Plan, n: int) -> Plan:
    """The plan with at most N tasks per family this session (`--limit N`): the first N, as tasks_per_family."""
    if n < 1:
        raise InputError(f"must be >= 1, got {n}", field="--limit")
    cur = plan.tasks_per_family
    return plan.with_overrides(tasks_per_family=n if cur is None else min(cur, n))
