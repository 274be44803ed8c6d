"""The simulator's "brain" protocol, and a generic brain that writes plausible text.

The HTTP server (simulator/completion.py) turns each request into one BrainRequest per choice and asks a
Brain for a BrainReply. simulator/brain.py (TaskBrain) knows the built-in suites; GenericBrain is the
fallback for anything else. A brain must be deterministic: the same BrainRequest gives the same reply.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any, Protocol

# ~4 characters per token, plus a few tokens of chat framing per message: close to what
# OpenAI-style tokenizers report for English prose, which is all a simulator needs.
CHARS_PER_TOKEN = 4
PER_MESSAGE_OVERHEAD = 4
PER_REQUEST_OVERHEAD = 3


@dataclass
class BrainRequest:
    messages: list[dict[str, Any]]  # OpenAI-style chat messages (anthropic requests are converted)
    temperature: float
    seed: int  # per choice: choice i of a request uses a seed derived from (request seed, i)
    tools: list[dict[str, Any]] | None = None  # OpenAI-style tool specs
    model: str = ""
    meta: dict[str, str] = field(default_factory=dict)  # X-EPT-* headers without the prefix: Job, Arm, Role…
    degrade: float = 0.0  # the server's config `degrade[meta["Arm"]]` (0 = none): lower accuracy by this much
    max_tokens: int | None = None
    reasoning_effort: str | None = None  # OpenAI-style effort (none/minimal/low/medium/high)
    thinking_budget: int | None = None  # Anthropic thinking.budget_tokens
    stop: list[str] | None = None


@dataclass
class BrainReply:
    text: str | None
    tool_calls: list[dict[str, Any]] | None = None  # [{"name": str, "arguments": dict}]
    finish_reason: str = "stop"
    completion_tokens: int | None = None  # None = estimate from the text and tool calls
    reasoning_tokens: int = 0  # hidden thinking, counted inside completion_tokens (as real servers do)


# Hidden reasoning per request at each effort (before the task's difficulty scales it). An explicit
# thinking budget is a cap the model uses part of. More reasoning closes part of the gap to a perfect
# answer with diminishing returns: gain(r) = REASONING_GAIN * (1 - exp(-r / REASONING_SCALE)).
EFFORT_TOKENS = {"none": 0, "minimal": 48, "low": 256, "medium": 1024, "high": 3072}
REASONING_GAIN, REASONING_SCALE = 0.6, 600.0


def reasoning_budget(req: BrainRequest) -> int:
    if req.thinking_budget:
        return int(req.thinking_budget)
    return EFFORT_TOKENS.get(req.reasoning_effort or "none", 0)


def reasoning_gain(tokens: int) -> float:
    """Share of the gap between the model's accuracy and 0.97 that `tokens` of thinking closes."""
    return REASONING_GAIN * (1 - math.exp(-tokens / REASONING_SCALE)) if tokens > 0 else 0.0


def apply_limits(reply: BrainReply, req: BrainRequest) -> BrainReply:
    """Stop sequences and max_tokens like a real server: thinking is spent first (a budget eaten by thinking
    leaves no visible answer), then the visible text is cut, finish_reason 'length'."""
    text, finish = reply.text, reply.finish_reason
    for s in req.stop or []:
        if text and s in text:
            text, finish = text[: text.index(s)], "stop"
    r = reply.reasoning_tokens
    if req.max_tokens:
        if r >= req.max_tokens:
            return BrainReply(
                text=None, finish_reason="length", reasoning_tokens=req.max_tokens, completion_tokens=0
            )
        room = (req.max_tokens - r) * CHARS_PER_TOKEN
        if text and len(text) > room:
            return BrainReply(
                text=text[:room], tool_calls=reply.tool_calls, finish_reason="length", reasoning_tokens=r
            )
    return BrainReply(
        text=text,
        tool_calls=reply.tool_calls,
        finish_reason=finish,
        completion_tokens=reply.completion_tokens,
        reasoning_tokens=r,
    )


class Brain(Protocol):
    def respond(self, req: BrainRequest) -> BrainReply: ...


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def content_text(content: Any) -> str:
    """Text of an OpenAI or Anthropic message content (string or list of parts/blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict):
                parts.append(str(p.get("text") or p.get("content") or json.dumps(p.get("input", ""))))
            else:
                parts.append(str(p))
        return "\n".join(parts)
    return str(content)


def prompt_tokens(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, system: str = ""
) -> int:
    """Prompt tokens of a whole request: system prompt, every message (with tool calls) and tool definitions."""
    n = PER_REQUEST_OVERHEAD
    if system:
        n += PER_MESSAGE_OVERHEAD + estimate_tokens(system)
    for m in messages:
        n += PER_MESSAGE_OVERHEAD + estimate_tokens(content_text(m.get("content")))
        if m.get("tool_calls"):
            n += estimate_tokens(json.dumps(m["tool_calls"]))
    if tools:
        n += estimate_tokens(json.dumps(tools))
    return n


def completion_tokens(reply: BrainReply) -> int:
    """Visible output plus hidden reasoning (usage.completion_tokens includes reasoning_tokens)."""
    if reply.completion_tokens is not None:
        return reply.completion_tokens + reply.reasoning_tokens
    n = estimate_tokens(reply.text or "")
    for tc in reply.tool_calls or []:
        n += estimate_tokens(tc["name"]) + estimate_tokens(json.dumps(tc.get("arguments", {}))) + 3
    return max(n, 1) + reply.reasoning_tokens


_WORDS = [
    "the",
    "approach",
    "first",
    "restates",
    "the",
    "problem",
    "then",
    "checks",
    "each",
    "constraint",
    "in",
    "turn",
    "before",
    "settling",
    "on",
    "a",
    "result",
    "we",
    "consider",
    "edge",
    "cases",
    "compare",
    "two",
    "candidate",
    "methods",
    "and",
    "keep",
    "the",
    "simpler",
    "one",
    "because",
    "it",
    "is",
    "easier",
    "to",
    "verify",
    "a",
    "quick",
    "estimate",
    "agrees",
    "with",
    "the",
    "careful",
    "computation",
    "so",
    "the",
    "answer",
    "follows",
]


def _example_value(schema: dict[str, Any], rng: random.Random) -> Any:
    t = schema.get("type")
    if schema.get("enum"):
        return schema["enum"][0]
    if t == "integer":
        return rng.randint(1, 100)
    if t == "number":
        return round(rng.uniform(1, 100), 2)
    if t == "boolean":
        return True
    if t == "array":
        return []
    if t == "object":
        return {}
    return rng.choice(_WORDS)


class GenericBrain:
    """Plausible, deterministic text for prompts the simulator knows nothing about.

    With tools offered and no tool result yet, it calls the first tool with schema-shaped arguments;
    after a tool result it answers in text. Reply length varies with the seed (40-400 tokens).
    """

    def respond(self, req: BrainRequest) -> BrainReply:
        rng = random.Random(req.seed)
        if req.tools and not any(m.get("role") == "tool" for m in req.messages):
            fn = req.tools[0].get("function", req.tools[0])
            props = (fn.get("parameters") or {}).get("properties", {})
            args = {k: _example_value(v, rng) for k, v in props.items()}
            return BrainReply(
                text=None,
                tool_calls=[{"name": fn.get("name", "tool"), "arguments": args}],
                finish_reason="tool_calls",
            )
        n_words = int(rng.uniform(30, 300))
        limit = req.max_tokens * CHARS_PER_TOKEN // 6 if req.max_tokens else None  # ~6 chars per word
        finish = "stop"
        if limit is not None and n_words > limit:
            n_words, finish = max(limit, 1), "length"
        words = [rng.choice(_WORDS) for _ in range(n_words)]
        text = " ".join(words).capitalize() + "."
        if finish == "stop":
            text += f"\nAnswer: {rng.randint(0, 99)}"
        r = int(reasoning_budget(req) * rng.uniform(0.5, 1.0))
        return apply_limits(BrainReply(text=text, finish_reason=finish, reasoning_tokens=r), req)
