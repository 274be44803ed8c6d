"""tree_search: step-wise beam search. budget_n = branching b; params depth d and beam width w.

Level 1 expands the empty solution into b children; each later level expands every beam node into b
children. Every child is scored by the verifier (role 'verifier'), the best w survive (ties: lower
node index), and at depth d the best complete solution is the answer. Call indices: node j of level L
is off_L + parent*b + child (role 'search_node'); its verifier call is total_nodes + that index.

Tool-use tasks have no step structure here: tree_search runs b agent episodes and picks the best by
verifier score (best-of-b), as documented in docs/strategies.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from elo_per_token.contracts.prompts import parse_score, partial_verify_messages, step_messages
from elo_per_token.worker.graders import final_answer
from elo_per_token.worker.strategies.base import (
    INT_PARAM,
    MAX_INT_PARAM,
    SAMPLE_TEMPERATURE,
    Candidate,
    JobContext,
    Strategy,
    StrategyResult,
    llm_verify,
    sample,
    sample_stride,
)

if TYPE_CHECKING:  # the bounds in the annotations, resolved by common.checked when parameters are checked
    from annotated_types import Interval


@dataclass(frozen=True)
class TreeSearchParams:
    """Checked by a model (Strategy.check): calls grow with depth x beam, so both are bounded."""

    depth: Annotated[int, Interval(ge=1, le=MAX_INT_PARAM)] = field(default=3, metadata=INT_PARAM)  # levels d
    beam: Annotated[int, Interval(ge=1, le=MAX_INT_PARAM)] = field(
        default=2, metadata=INT_PARAM
    )  # nodes w per level


@dataclass
class Node:
    index: int
    steps: list[str]
    score: float = -1.0


def level_sizes(b: int, d: int, w: int) -> list[int]:
    """Nodes generated per level: b, then min(w, previous level's nodes) * b per level."""
    sizes, beam = [], 1
    for _ in range(d):
        sizes.append(beam * b)
        beam = min(w, beam * b)
    return sizes


def run(ctx: JobContext) -> StrategyResult:
    job, task = ctx.job, ctx.task
    params = STRATEGY.params_of(ctx)
    b, d, w = job.budget_n, params.depth, params.beam
    if task.get("tools"):
        return _tool_fallback(ctx, b)
    sizes = level_sizes(b, d, w)
    total = sum(sizes)
    beam, offset = [Node(-1, [])], 0
    for level in range(1, d + 1):
        slots = [(p, c) for p in range(len(beam)) for c in range(b)]

        def expand(
            slot: tuple[int, int], beam: list[Node] = beam, offset: int = offset, level: int = level
        ) -> Node:
            p, c = slot
            idx = offset + p * b + c
            msgs = step_messages(task, beam[p].steps, level, d)
            text = ctx.chat(idx, "search_node", msgs, temperature=SAMPLE_TEMPERATURE).choices[0].text or ""
            node = Node(idx, [*beam[p].steps, text.strip()])
            reply = ctx.chat(
                total + idx, "verifier", partial_verify_messages(task, node.steps), temperature=0.0
            )
            s = parse_score(reply.choices[0].text)
            node.score = -1.0 if s is None else s
            return node

        children = ctx.map(expand, slots)
        offset += len(slots)
        beam = sorted(children, key=lambda nd: (-nd.score, nd.index))[:w]
    best = beam[0]
    text = "\n".join(best.steps)
    cand = Candidate(best.index, text, final_answer(task, text))
    return StrategyResult(cand, {"levels": sizes, "best_score": best.score, "chosen_node": best.index})


def _tool_fallback(ctx: JobContext, b: int) -> StrategyResult:
    cands = sample(ctx, 0, b, SAMPLE_TEMPERATURE)
    scores = llm_verify(ctx, b * sample_stride(ctx.task), cands)
    ranked = [(s, c.index) for s, c in zip(scores, cands, strict=True) if s is not None]
    if not ranked:
        return StrategyResult(cands[0], {"mode": "tool episodes", "scores": scores})
    best = min(ranked, key=lambda sc: (-sc[0], sc[1]))
    return StrategyResult(
        cands[best[1]], {"mode": "tool episodes", "scores": scores, "chosen_index": best[1]}
    )


STRATEGY: Strategy[TreeSearchParams] = Strategy(
    "tree_search",
    run,
    budget_meaning="branching factor b",
    params=TreeSearchParams,
    description="step-wise beam search pruned by verifier scores",
)
