"""What every strategy shares: the job context, one recorded chat call, sampling, and the registry entry type.

Call indices are fixed by each algorithm (sample i, verifier i, tree node (level, parent, child)), never
by completion order, and every call's seed is job.call_seed(index): results do not depend on
scheduling or concurrency.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, is_dataclass
from typing import Any, Generic

from typing_extensions import TypeVar  # TypeVar defaults (PEP 696, used by Strategy) before Python 3.13

from elo_per_token.contracts import generation
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.jobs import Job, derive_seed
from elo_per_token.contracts.prompts import parse_score, solve_messages, verify_messages
from elo_per_token.contracts.records import CallRecord
from elo_per_token.contracts.tasks import Task
from elo_per_token.egress.client import ChatResponse, ProviderClient
from elo_per_token.egress.errors import Discarded, ProviderError
from elo_per_token.worker.graders import final_answer
from elo_per_token.worker.tools import execute_tool
from elo_per_token.worker.transcript import Recorder

T = TypeVar("T")
R = TypeVar("R")

SAMPLE_TEMPERATURE = 0.7  # for n > 1 samples: diverse enough to vote or rerank; one sample is greedy (0)
DEFAULT_CONCURRENCY = 8
MAX_TOOL_STEPS = 4  # agent-loop turns per tool-use episode (tool calls + the final answer)
MAX_INT_PARAM = 64  # e.g. tree depth/beam: calls grow with their product, so a plan's 10^9 must fail up front
INT_PARAM = {
    "must": f"an integer in 1..{MAX_INT_PARAM}"
}  # the rule in words, for a strategy's integer parameter


@dataclass
class Candidate:
    index: int  # sample index within the strategy (ties break towards the lower index)
    text: str | None  # the final reply
    answer: str | None  # extracted final answer (the code block for code tasks)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # calls made during a tool episode
    note: str | None = None  # e.g. "step limit reached"


@dataclass
class StrategyResult:
    chosen: Candidate | None
    details: dict[str, Any] = field(default_factory=dict)


class JobContext:
    """One job's calls: records every call (success or failure) with its algorithm-fixed index."""

    def __init__(
        self,
        job: Job,
        provider: ProviderClient,
        concurrency: int = DEFAULT_CONCURRENCY,
        params: object = None,
    ) -> None:
        self.job = job
        self.task = job.task
        self.provider = provider
        self.concurrency = max(1, concurrency)
        self.params = (
            params  # the strategy's checked parameters (Strategy.check); read with Strategy.params_of
        )
        self.calls: list[CallRecord] = []
        self._lock = threading.Lock()
        # Generation settings in effect: profile < plan < arm (contracts.generation).
        self.gen = generation.merge(provider.profile.generation, job.base_gen, job.gen)
        self.seed_base = int(self.gen.get("seed", job.seed))
        self.transcript: Recorder | None = None  # set by run_job when the plan keeps transcripts

    @property
    def supports_n(self) -> bool:
        return self.provider.supports_n

    def chat(
        self,
        index: int,
        role: str,
        messages: list[dict[str, Any]],
        *,
        temperature: float,
        n: int = 1,
        tools: list[dict[str, Any]] | None = None,
    ) -> ChatResponse:
        seed = (
            derive_seed(self.seed_base, self.job.key, index)
            if "seed" in self.gen
            else self.job.call_seed(index)
        )
        meta = {"Job": self.job.key, "Arm": self.job.arm, "Role": role}
        if temperature > 0 and "temperature" in self.gen:
            temperature = self.gen[
                "temperature"
            ]  # the configured sampling temperature; greedy calls stay at 0
        sent = {
            "temperature": temperature,
            **{k: v for k, v in self.gen.items() if k not in ("temperature", "seed")},
        }
        try:
            resp = self.provider.chat(
                messages, temperature=temperature, n=n, seed=seed, tools=tools, meta=meta, gen=self.gen
            )
        except ProviderError as e:
            if self.transcript is not None:
                self.transcript.call(index, role, messages, error=f"{e.error_class}: {e.message}")
            self._record_discarded(index, role, seed, n, e.discarded, e.usage_bound)
            self._record(_failed_record(index, role, seed, n, e, sent))
            raise
        self._record_discarded(index, role, seed, n, resp.discarded, getattr(resp, "usage_bound", None))
        if self.transcript is not None:
            self.transcript.call(index, role, messages, resp)
        if resp.max_tokens is not None:
            sent["max_tokens"] = resp.max_tokens  # as sent: a profile's context_length may have lowered it
        self._record(_answered_record(index, role, seed, resp, sent))
        if not resp.choices:
            raise ProviderError("permanent", "the server returned no choices", attempts=resp.attempts)
        return resp

    def _record_discarded(
        self, index: int, role: str, seed: int, n: int, discarded: list[Discarded], bound: int | None
    ) -> None:
        # A 2xx response that was discarded (malformed) and retried was still billed: it is a call of its own
        # (one attempt, error class "discarded") at the same index; the call's own record counts the other attempts,
        # so attempts summed over records = requests sent.
        for d in discarded:
            self._record(
                CallRecord(
                    call_index=index,
                    role=role,
                    model=None,
                    usage=d["usage"],
                    latency_s=0.0,
                    attempts=1,
                    seed=seed,
                    n_requested=n,
                    n_returned=0,
                    finish_reason=None,
                    error={"class": "discarded", "message": f"billed response discarded: {d['message']}"},
                    usage_missing=d["usage"] is None,
                    usage_invalid=d["usage_invalid"],
                    usage_estimate=bound if d["usage"] is None else None,
                )
            )

    def _record(self, rec: CallRecord) -> None:
        from elo_per_token.worker.journal import note_call

        with self._lock:
            self.calls.append(rec)
        note_call(self.job, rec)  # on a Celery worker: on the broker too, until the attempt is in the ledger

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """fn over items with bounded concurrency, results in item order; the first error (in item
        order) is raised after every call has finished, so the record of calls made is complete."""
        if len(items) <= 1 or self.concurrency == 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            futures = [pool.submit(fn, x) for x in items]
            errors = [f.exception() for f in futures]
        for e in errors:
            if e is not None:
                raise e
        return [f.result() for f in futures]


# ---------------------------------------------------------------- sampling


def sample_stride(task: Task) -> int:
    """Call indices one sample occupies: 1, or the turns of a tool-use episode."""
    return MAX_TOOL_STEPS if task.get("tools") else 1


def sample(ctx: JobContext, base_index: int, k: int, temperature: float) -> list[Candidate]:
    """k candidate solutions. Sample i uses call indices [base + i*stride, base + (i+1)*stride)."""
    task = ctx.task
    if task.get("tools"):
        return ctx.map(
            lambda i: episode(ctx, i, base_index + i * MAX_TOOL_STEPS, temperature), list(range(k))
        )
    if ctx.supports_n and k > 1:
        return _sample_batched(ctx, base_index, k, temperature)
    msgs = solve_messages(task)

    def one(i: int) -> Candidate:
        text = ctx.chat(base_index + i, "sample", msgs, temperature=temperature).choices[0].text
        return Candidate(i, text, final_answer(task, text))

    return ctx.map(one, list(range(k)))


def _sample_batched(ctx: JobContext, base_index: int, k: int, temperature: float) -> list[Candidate]:
    # One request with n=k; a server that returns fewer choices gets follow-up requests for the shortfall,
    # each at the index of the first sample it fills, so indices stay within [base, base + k).
    msgs = solve_messages(ctx.task)
    texts: list[str | None] = []
    while len(texts) < k:
        resp = ctx.chat(base_index + len(texts), "sample", msgs, temperature=temperature, n=k - len(texts))
        texts.extend(c.text for c in resp.choices[: k - len(texts)])
    return [Candidate(i, t, final_answer(ctx.task, t)) for i, t in enumerate(texts)]


def episode(ctx: JobContext, i: int, base_index: int, temperature: float) -> Candidate:
    """A tool-use agent loop: offer the tools, run the model's tool calls, send results back, repeat."""
    task = ctx.task
    messages = solve_messages(task)
    made: list[dict[str, Any]] = []
    for step in range(MAX_TOOL_STEPS):
        ch = ctx.chat(
            base_index + step, "tool_turn", messages, temperature=temperature, tools=task["tools"]
        ).choices[0]
        if not ch.tool_calls:
            return Candidate(i, ch.text, final_answer(task, ch.text), made)
        messages.append(
            {
                "role": "assistant",
                "content": ch.text,
                "tool_calls": [
                    {
                        "id": tc["id"],
                        "type": "function",
                        "function": {"name": tc["name"], "arguments": tc["arguments"]},
                    }
                    for tc in ch.tool_calls
                ],
            }
        )
        for tc in ch.tool_calls:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": tc["id"],
                    "content": execute_tool(task, tc["name"], tc["arguments"]),
                }
            )
            made.append({"name": tc["name"], "arguments": tc["arguments"]})
    return Candidate(
        i, None, None, made, note=f"step limit ({MAX_TOOL_STEPS}) reached without a final answer"
    )


def llm_verify(ctx: JobContext, base_index: int, cands: list[Candidate]) -> list[float | None]:
    """One verifier call per candidate that has text (index base + candidate index); None = not scored."""

    def one(c: Candidate) -> float | None:
        if not c.text:
            return None
        reply = ctx.chat(base_index + c.index, "verifier", verify_messages(ctx.task, c.text), temperature=0.0)
        return parse_score(reply.choices[0].text)

    return ctx.map(one, cands)


# ---------------------------------------------------------------- registry entry


@dataclass(frozen=True)
class NoParams:
    """The parameters of a strategy that has none besides its budget."""


# The default lets a strategy without parameters be written `Strategy("name", run, ...)` and still be typed.
P = TypeVar("P", default=NoParams)


@dataclass(frozen=True)
class Strategy(Generic[P]):
    """A registry entry: the algorithm plus what its budget and parameters mean.

    `params` is a frozen dataclass whose fields are the strategy's parameters other than the budget, with
    their types, bounds and defaults, checked by a model (common.checked): e.g.
    `Annotated[int, Interval(ge=1, le=MAX_INT_PARAM)]` with `metadata=INT_PARAM`, a `Literal["a", "b"]`, a `str`.
    `check(job)` validates a job's parameters once, before any call, and returns them as that dataclass;
    run_job hands them to the strategy through `ctx`, read typed with `params_of(ctx)`.
    """

    name: str
    run: Callable[[JobContext], StrategyResult]
    budget_meaning: str  # what budget_n counts for this strategy
    params: type[P] = NoParams  # type: ignore[assignment]  # the default is for strategies without parameters
    description: str = ""
    fixed_budget: int | None = None  # e.g. greedy only makes sense at budget 1

    def __post_init__(self) -> None:
        if not (is_dataclass(self.params) and self.params.__dataclass_params__.frozen):  # type: ignore[attr-defined]
            raise TypeError(f"strategy '{self.name}': params must be a frozen dataclass")

    def check(self, job: Job) -> P:
        """The job's parameters, typed; InputError for a budget or parameter this strategy cannot run."""
        if job.budget_n < 1 or (self.fixed_budget is not None and job.budget_n != self.fixed_budget):
            want = f"= {self.fixed_budget}" if self.fixed_budget is not None else ">= 1"
            raise InputError(
                f"strategy '{self.name}' needs budget_n {want}, got {job.budget_n}", field="budget_n"
            )
        if (
            job.params == {}
        ):  # the declared defaults: nothing to check (and no pydantic on a worker that runs none)
            return self.params()
        from elo_per_token.common.checked import (
            ModelError,
            checked,
            known_fields,
        )  # pydantic: when params are

        try:
            return checked(self.params, job.params)
        except ModelError as e:
            if e.kind == "extra_forbidden":
                known = ", ".join(known_fields(self.params)) or "none"
                msg = f"strategy '{self.name}' has no parameter '{e.key}' (known: {known})"
            else:
                msg = f"strategy '{self.name}' parameter{f' {e.key!r}' if e.key else 's'} {e.message}"
            raise InputError(msg, field="params") from None

    def params_of(self, ctx: JobContext) -> P:
        """The parameters run_job checked for this job (checked here when the context was built without them)."""
        got = ctx.params
        return got if isinstance(got, self.params) else self.check(ctx.job)


def _failed_record(
    index: int, role: str, seed: int, n: int, e: ProviderError, sent: dict[str, Any]
) -> CallRecord:
    """The record of a call that failed after its retries (its discarded 2xx replies are recorded apart)."""
    bad = e.usage_invalid
    return CallRecord(
        call_index=index,
        role=role,
        model=None,
        usage=e.usage,
        latency_s=0.0,
        attempts=e.attempts - len(e.discarded),
        seed=seed,
        n_requested=n,
        n_returned=0,
        finish_reason=None,
        error={"class": e.error_class, "message": e.message},
        usage_missing=bad is not None,
        usage_invalid=bad,
        gen=sent,
        usage_estimate=e.usage_bound if bad is not None else None,
    )


def _answered_record(
    index: int, role: str, seed: int, resp: ChatResponse, sent: dict[str, Any]
) -> CallRecord:
    """The record of a call the server answered (its discarded 2xx replies are recorded apart)."""
    return CallRecord(
        call_index=index,
        role=role,
        model=resp.model,
        usage=resp.usage,
        latency_s=resp.latency_s,
        attempts=resp.attempts - len(resp.discarded),
        seed=seed,
        n_requested=resp.n_requested,
        n_returned=resp.n_returned,
        finish_reason=resp.choices[0].finish_reason if resp.choices else None,
        error=None,
        usage_missing=resp.usage is None,
        usage_invalid=resp.usage_invalid,
        gen=sent,
        finish_reasons=[c.finish_reason for c in resp.choices],
        usage_estimate=getattr(resp, "usage_bound", None) if resp.usage is None else None,
    )
