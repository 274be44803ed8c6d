"""Strategy parameters are a frozen dataclass per strategy: typed fields, checked once (Strategy.check) with
the same messages as before, handed to the strategy typed; `supports_n` is the provider client's own
attribute. A tree search run shows the parameters reach the algorithm."""

from __future__ import annotations

from collections import Counter
from dataclasses import FrozenInstanceError, dataclass
from typing import Annotated, Literal

import pytest
from annotated_types import Interval
from bounds import bounded
from fixtures_sim import SIM_KEY
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.jobs import Job
from elo_per_token.egress.client import ProviderClient
from elo_per_token.egress.profiles import Profile
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.job import run_job
from elo_per_token.worker.strategies import STRATEGIES, Strategy, StrategyResult
from elo_per_token.worker.strategies.base import MAX_INT_PARAM, JobContext, NoParams
from elo_per_token.worker.strategies.best_of_n import BestOfNParams
from elo_per_token.worker.strategies.tree_search import TreeSearchParams, level_sizes

TASK = {"task_id": "t", "family": "f"}


def job(strategy: str, n: int = 2, **params: object) -> Job:
    return Job("r", TASK, strategy, n, params=dict(params))


def test_check_returns_typed_parameters_with_defaults():
    tree = STRATEGIES["tree_search"]
    assert tree.check(job("tree_search")) == TreeSearchParams(depth=3, beam=2)
    got = tree.check(job("tree_search", depth=5))
    assert got == TreeSearchParams(depth=5, beam=2) and isinstance(got.depth, int)
    assert STRATEGIES["best_of_n"].check(job("best_of_n", verifier="tests")) == BestOfNParams("tests")
    assert STRATEGIES["majority"].check(job("majority")) == NoParams()
    with pytest.raises(FrozenInstanceError):
        got.depth = 1  # type: ignore[misc]


@pytest.mark.parametrize("strategy, params, message", [
    ("tree_search", {"depht": 2}, "strategy 'tree_search' has no parameter 'depht' (known: beam, depth)"),
    ("majority", {"depth": 2}, "strategy 'majority' has no parameter 'depth' (known: none)"),
    ("tree_search", {"depth": 0}, f"strategy 'tree_search' parameter 'depth' must be an integer in 1..{MAX_INT_PARAM}"),
    ("tree_search", {"beam": True}, "parameter 'beam' must be an integer"),
    ("tree_search", {"beam": 10**9}, "parameter 'beam' must be an integer"),
    ("tree_search", {"beam": "2"}, "parameter 'beam' must be an integer"),
    ("best_of_n", {"verifier": "vibes"}, "strategy 'best_of_n' parameter 'verifier' must be one of: auto, llm, tests"),
])  # fmt: skip
def test_bad_parameters_fail_with_the_field(strategy, params, message):
    with pytest.raises(InputError) as e:
        STRATEGIES[strategy].check(job(strategy, **params))
    assert e.value.field == "params" and message in e.value.message


def test_any_declared_parameter_type_is_checked_by_the_model_and_params_must_be_frozen():
    """The parameters' model (common.checked) checks whatever the dataclass declares: a bounded float, a Literal, a
    str (the hand checks knew int, str and Literal only and refused the rest); a mutable dataclass still fails
    when the strategy is defined."""

    def run(ctx: JobContext) -> StrategyResult:
        return StrategyResult(None)

    @dataclass(frozen=True)
    class Floaty:
        temperature: Annotated[float, Interval(ge=0, le=2)] = 0.5

    @dataclass
    class Mutable:
        k: int = 1

    s = Strategy("floaty", run, budget_meaning="n", params=Floaty)
    assert s.check(Job("r", TASK, "floaty", 1, params={"temperature": 1})) == Floaty(1.0)
    for bad, shown in ((3, "got 3"), ("hot", "got 'hot'"), (float("nan"), "got nan")):
        with pytest.raises(InputError) as e:
            s.check(Job("r", TASK, "floaty", 1, params={"temperature": bad}))
        assert e.value.field == "params" and "parameter 'temperature'" in e.value.message
        assert shown in e.value.message
    with pytest.raises(TypeError, match="frozen dataclass"):
        Strategy("mutable", run, budget_meaning="n", params=Mutable)

    @dataclass(frozen=True)
    class Mode:
        mode: Literal["a", "b"] = "a"
        label: str = "x"

    s = Strategy("mode", run, budget_meaning="n", params=Mode)
    assert s.check(Job("r", TASK, "mode", 1, params={"mode": "b", "label": "y"})) == Mode("b", "y")
    with pytest.raises(InputError, match="must be a string"):
        s.check(Job("r", TASK, "mode", 1, params={"label": 3}))


def profile(protocol: str, supports_n: bool) -> Profile:
    return Profile(
        name="p",
        protocol=protocol,
        base_url="http://127.0.0.1:9/v1",
        api_key_env="K",
        model="m",
        supports_n=supports_n,
    )


@pytest.mark.parametrize("protocol, supports_n, batched", [
    ("openai", True, True), ("openai", False, False), ("anthropic", True, False), ("anthropic", False, False),
])  # fmt: skip
def test_supports_n_is_the_clients_attribute(protocol, supports_n, batched):
    c = ProviderClient(profile(protocol, supports_n), api_key="k")
    assert c.supports_n is batched
    assert JobContext(job("majority"), c).supports_n is batched


def test_tree_search_runs_with_the_checked_parameters(sim):
    task = load_builtin_suite("math")[0]
    c = ProviderClient(sim.profile(supports_n=False), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05)
    res = run_job(Job("r", task, "tree_search", 2, params={"depth": 2, "beam": 1}, seed=1), c)
    nodes = sum(level_sizes(2, 2, 1))
    assert Counter(c.role for c in res.calls) == {"search_node": nodes, "verifier": nodes} and res.ok
    assert res.outcome.grader["strategy"]["levels"] == [2, 2]


SECRET = "sk-secret-ABCDEFGH1234"
_param_values = st.recursive(
    st.one_of(
        st.integers(-(2**70), 2**70),
        st.sampled_from([0, 1, 64, 65, 10**400, True, "auto", "tests", "", SECRET]),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.text(max_size=12),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(
    strategy=st.sampled_from(sorted(STRATEGIES)),
    params=st.dictionaries(
        st.one_of(st.sampled_from(["depth", "beam", "verifier"]), st.text(max_size=6)),
        _param_values,
        max_size=3,
    ),
)
def test_hostile_parameters_are_typed_or_refused_naming_the_parameter_and_value(strategy, params):
    """Any parameters a plan or a broker message carries: the strategy's typed, bounded dataclass, or an InputError
    (field `params`) naming the strategy, the parameter and, when short, the value refused (the hand checks never
    showed it); never a pasted key, never another exception; bounded CPU time and memory."""
    s = STRATEGIES[strategy]
    budget = s.fixed_budget or 2
    try:
        got = bounded(
            lambda: s.check(Job("r", TASK, strategy, budget, params=params)), time_s=2, memory_mb=32
        )
    except InputError as e:
        assert e.field == "params" and e.message.startswith(f"strategy '{strategy}' "), e
        assert SECRET not in e.message and len(e.message) < 500, e
        bad = next(k for k in params if f"'{k}'" in e.message)
        value = params[bad]
        if "has no parameter" not in e.message and isinstance(value, int) and abs(value) < 10**6:
            assert f"got {value}" in e.message, e
    else:
        assert isinstance(got, s.params)
        for k, v in params.items():
            assert getattr(got, k) == v and type(getattr(got, k)) is type(v)
        if isinstance(got, TreeSearchParams):
            assert 1 <= got.depth <= MAX_INT_PARAM and 1 <= got.beam <= MAX_INT_PARAM
