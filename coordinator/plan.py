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
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from elo_per_token.common.tomlpos import toml_line
from elo_per_token.contracts import generation
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.manifest import MAX_BOOTSTRAP_ROUNDS, MAX_SEED
from elo_per_token.contracts.tasks import Task
from elo_per_token.ledger.store import DEFAULT_LEDGER

if TYPE_CHECKING:  # the bounds in the annotations, resolved by common.checked when a plan is parsed
    from annotated_types import Ge, Gt, Interval, Predicate

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


_TOP_FIELDS = {
    "name",
    "profile",
    "suites",
    "tasks_per_family",
    "replicates",
    "seed",
    "ledger",
    "executor",
    "concurrency",
    "queue",
    "batch_size",
    "weights",
    "arms",
    "rate_limits",
    "bootstrap_rounds",
    "anchor",
    "max_jobs",
    "generation",
    "transcripts",
    "budget",
    "adaptive",
}


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
class Plan:
    """A validated plan. The run settings' annotations (types, bounds) are their check (`_run_settings`, through
    common.checked); `metadata["must"]` is the rule in the words an error shows. The structure (name, suites,
    arms, tables) is checked by the functions below."""

    name: str
    profile: Annotated[str, Predicate(str.strip)] = field(metadata=_TEXT)
    suites: tuple[str, ...] = ()
    arms: tuple[Arm, ...] = ()
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
    weights: dict[str, float] = field(default_factory=dict)
    rate_limits: dict[str, RateLimit] = field(default_factory=dict)
    bootstrap_rounds: Annotated[int, Interval(ge=0, le=MAX_BOOTSTRAP_ROUNDS)] = field(
        default=200, metadata={"must": f"an integer in 0..{MAX_BOOTSTRAP_ROUNDS:,}"}
    )
    anchor: Annotated[str, Predicate(str.strip)] | None = field(default=None, metadata=_TEXT)
    generation: dict[str, Any] = field(default_factory=dict)  # plan-level generation settings (every arm)
    max_jobs: Annotated[int, Ge(1)] = field(default=DEFAULT_MAX_JOBS, metadata={"must": "an integer >= 1"})
    # Keep each job's transcript (prompts, completions, grader evidence) beside its result; false for private data.
    transcripts: bool = field(default=True, metadata={"must": "true or false"})
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
        return InputError(msg, file=self.file, line=line, field=fieldname)

    def int_(
        self,
        v: Any,
        name: str,
        lo: int,
        table: str | None = None,
        key: str | None = None,
        hi: int | None = None,
    ) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.err(f"must be an integer, got {type(v).__name__}", name, key, table)
        if v < lo:
            raise self.err(f"must be >= {lo}, got {v}", name, key, table)
        if hi is not None and v > hi:
            raise self.err(f"must be <= {hi:,}, got {v:,}", name, key, table)
        return v

    def str_(self, v: Any, name: str) -> str:
        if not isinstance(v, str) or not v.strip():
            raise self.err("must be a non-empty string", name)
        return v.strip()


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


# Plan fields that are not scalar run settings: checked by the functions below, or not from the file at all.
_CHECKED_APART = frozenset({"name", "suites", "arms", "weights", "rate_limits", "generation"})
_STRUCTURE = _CHECKED_APART | {"max_total_tokens", "max_cost", "source", "raw"}


def _from_raw(raw: dict[str, Any], file: str, text: str, base_dir: str | Path | None) -> Plan:
    # The checks run in the order a reader meets the fields (name, suites, arms, then the run settings), so
    # a plan with several mistakes always reports the same, first one.
    v = _V(file, text)
    unknown = sorted(set(raw) - _TOP_FIELDS)
    if unknown:
        raise v.err(f"unknown field (known: {', '.join(sorted(_TOP_FIELDS))})", unknown[0])
    name = _name(raw, v)
    suites = _suites(raw, v, base_dir)
    arms = _arms(raw, v)
    _check_strategies(arms, v)
    settings = _run_settings(raw, v)
    weights = _weights(raw, v)
    limits = _rate_limits(raw, v)
    plan_gen = _plan_generation(raw, v)
    budget = _budget(raw, v)
    from elo_per_token.coordinator.adaptive.settings import check_adaptive  # the plan's [adaptive] table

    check_adaptive(raw.get("adaptive"), v)
    return Plan(
        name=name,
        suites=tuple(suites),
        arms=tuple(arms),
        weights=weights,
        rate_limits=limits,
        generation=plan_gen,
        max_total_tokens=budget.max_tokens,
        max_cost=budget.max_cost,
        source=file,
        raw=raw,
        **settings,
    )


def _run_settings(raw: dict[str, Any], v: _V) -> dict[str, Any]:
    """The plan's run settings (profile, replicates, seed, executor, ...), checked by Plan's annotations."""
    from elo_per_token.common.checked import ModelError, checked_fields  # pydantic: when a plan is parsed

    given = {k: raw[k] for k in raw if k not in _STRUCTURE and k not in ("budget", "adaptive")}
    try:
        values = checked_fields(Plan, {"profile": "default", **given}, _STRUCTURE)
    except ModelError as e:
        raise v.err(e.message, e.field) from None
    # Names and places are compared and joined as given minus the spaces around them.
    return {k: val.strip() if isinstance(val, str) else val for k, val in values.items()}


def _name(raw: dict[str, Any], v: _V) -> str:
    """The run id: required, and safe as a folder/prefix name in the ledger."""
    if "name" not in raw:
        raise InputError("missing required field", file=v.file, field="name")
    name = v.str_(raw["name"], "name")
    if not _NAME.match(name):
        raise v.err("must be letters, digits, '-', '_' or '.' (it names the run in the ledger)", "name")
    return name


def _suites(raw: dict[str, Any], v: _V, base_dir: str | Path | None) -> list[str]:
    """Suite names and files; a relative JSONL file is resolved against the plan file's folder."""
    suites_raw = raw.get("suites")
    if suites_raw is None:
        raise InputError(
            "missing required field (built-in suite names or JSONL files)", file=v.file, field="suites"
        )
    if isinstance(suites_raw, str):
        suites_raw = [suites_raw]
    if not isinstance(suites_raw, list) or not suites_raw:
        raise v.err("must be a non-empty list of suite names or files", "suites")
    base = Path(base_dir) if base_dir else None
    suites = []
    for s in suites_raw:
        s = v.str_(s, "suites")
        if s.endswith(".jsonl") and base is not None and not Path(s).is_absolute():
            s = str((base / s).resolve())
        suites.append(s)
    return suites


def _arms(raw: dict[str, Any], v: _V) -> list[Arm]:
    arms_raw = raw.get("arms")
    if not isinstance(arms_raw, list) or not arms_raw:
        raise InputError("missing or empty [[arms]] (each: strategy, budgets)", file=v.file, field="arms")
    return [_arm(a, f"arms[{i}]", v) for i, a in enumerate(arms_raw)]


def _arm(a: Any, where: str, v: _V) -> Arm:
    """One [[arms]] table: its strategy, budgets (distinct, bounded), parameters and generation settings."""
    if not isinstance(a, dict):
        raise v.err("must be a table", where)
    extra = sorted(set(a) - {"strategy", "budgets", "budget", "params", *generation.FIELDS})
    if extra:
        raise v.err(
            f"unknown field (known: strategy, budgets, params, {', '.join(generation.FIELDS)})",
            f"{where}.{extra[0]}",
        )
    if "strategy" not in a:
        raise v.err("missing strategy", f"{where}.strategy", key="strategy", table="arms")
    strategy = v.str_(a["strategy"], f"{where}.strategy")
    budgets = a.get("budgets", [a["budget"]] if "budget" in a else None)
    if not isinstance(budgets, list) or not budgets:
        raise v.err("must be a non-empty list of integers", f"{where}.budgets", key="budgets", table="arms")
    budgets = tuple(
        v.int_(b, f"{where}.budgets", 1, table="arms", key="budgets", hi=MAX_BUDGET) for b in budgets
    )
    if len(set(budgets)) != len(budgets):
        raise v.err("budgets repeat", f"{where}.budgets", key="budgets", table="arms")
    params = a.get("params", {})
    if not isinstance(params, dict):
        raise v.err("must be a table of strategy parameters", f"{where}.params", key="params", table="arms")
    return Arm(strategy, budgets, dict(params), _arm_gens(a, where, v))


def _weights(raw: dict[str, Any], v: _V) -> dict[str, float]:
    """[weights]: family = a finite weight >= 0 (nan or inf would poison the merged Elo)."""
    weights: dict[str, float] = {}
    w_raw = raw.get("weights", {})
    if not isinstance(w_raw, dict):
        raise v.err("must be a table family = weight", "weights")
    for fam, w in w_raw.items():
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
            raise v.err(
                "must be a finite number >= 0 (not nan or inf)", f"weights.{fam}", key=fam, table="weights"
            )
        weights[fam] = float(w)
    return weights


def _rate_limits(raw: dict[str, Any], v: _V) -> dict[str, RateLimit]:
    """[rate_limits.<profile>]: rpm and/or tpm, positive integers (RateLimit's annotations)."""
    from elo_per_token.common.checked import ModelError, checked

    limits: dict[str, RateLimit] = {}
    rl_raw = raw.get("rate_limits", {})
    if not isinstance(rl_raw, dict):
        raise v.err("must be a table of [rate_limits.<profile>]", "rate_limits")
    for prof, lim in rl_raw.items():
        t = f"rate_limits.{prof}"
        try:
            limits[prof] = checked(RateLimit, lim)
        except ModelError as e:
            raise v.err(e.message, f"{t}.{e.field}" if e.field else t, table=t, key=e.key or "rpm") from None
    return limits


def _budget(raw: dict[str, Any], v: _V) -> Budget:
    """[budget]: max_tokens and/or max_cost (Budget's annotations)."""
    from elo_per_token.common.checked import ModelError, checked

    try:
        return checked(Budget, raw.get("budget", {}))
    except ModelError as e:
        field = f"budget.{e.field}" if e.field else "budget"
        raise v.err(e.message, field, table="budget", key=e.key or "max_tokens") from None


def _plan_generation(raw: dict[str, Any], v: _V) -> dict[str, Any]:
    """[generation]: settings for every arm, checked by contracts.generation."""
    gen_raw = raw.get("generation", {})
    if not isinstance(gen_raw, dict):
        raise v.err("must be a table of generation settings", "generation")
    return generation.check(gen_raw, lambda msg, k: v.err(msg, f"generation.{k}", key=k, table="generation"))


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
