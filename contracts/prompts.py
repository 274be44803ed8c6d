"""Prompt templates shared by the strategies (worker) and the simulator's task brain.

Each prompt kind starts its system message with a fixed header line, so the simulator can tell a
solve request from a verifier, tree-search step or judge request, and each embeds the task text
between fixed markers, so the simulator can find which task a request is about. Real models just
read them as ordinary instructions.
"""

from __future__ import annotations

import re
from typing import Any

from elo_per_token.contracts.tasks import Task

SOLVE_HEADER = "You are a careful problem solver."
VERIFY_HEADER = "You are a strict verifier of candidate solutions."
STEP_HEADER = "You are solving a problem one step at a time."
JUDGE_HEADER = "You are an impartial judge comparing two responses."

TASK_OPEN = "<task>"
TASK_CLOSE = "</task>"

SOLVE_SYSTEM = (
    f"{SOLVE_HEADER} Think step by step. When you are done, end your reply with a final line of the "
    "form 'Answer: <final answer>'. For programming tasks, put the complete function in a single "
    "```python code block before that line."
)

TOOL_SYSTEM = (
    f"{SOLVE_HEADER} You can call the tools provided. Call a tool whenever it is needed to get facts "
    "or exact arithmetic; when you have what you need, end your reply with a final line of the form "
    "'Answer: <final answer>'."
)

VERIFY_SYSTEM = (
    f"{VERIFY_HEADER} Read the task and the candidate solution, check the reasoning and the final "
    "answer, and end with a line 'Score: x' where x is a number from 0 (certainly wrong) to 1 "
    "(certainly correct)."
)

STEP_SYSTEM = (
    f"{STEP_HEADER} Continue the partial solution with exactly one next step. On the last step, "
    "finish the solution and end with a final line 'Answer: <final answer>'."
)

JUDGE_SYSTEM = (
    f"{JUDGE_HEADER} Decide which response answers the question better (correctness first, then "
    "clarity). Position must not matter. End with a line 'Winner: A', 'Winner: B' or 'Winner: tie'."
)

KINDS = {
    SOLVE_HEADER: "solve",
    VERIFY_HEADER: "verify",
    STEP_HEADER: "step",
    JUDGE_HEADER: "judge",
}


def wrap_task(text: str) -> str:
    """The task's text between <task> tags, so the model reads it as data, not instructions.

    Args:
        text: A model's reply (None: no reply).
    """
    return f"{TASK_OPEN}\n{text}\n{TASK_CLOSE}"


def task_text(task: Task) -> str:
    """The task's prompt as plain text (the last user message for chat-style tasks).

    Args:
        task: The task record.
    """
    if "prompt" in task and task["prompt"] is not None:
        return str(task["prompt"])
    users = [m for m in task.get("messages") or [] if m.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


def solve_messages(task: Task) -> list[dict[str, Any]]:
    """Messages for one solve attempt. Chat-style tasks keep their own messages after our system line.

    Args:
        task: The task record.
    """
    system = TOOL_SYSTEM if task.get("tools") else SOLVE_SYSTEM
    if msgs := task.get("messages"):
        own = [m for m in msgs if m.get("role") != "system"]
        return [{"role": "system", "content": system}, *own]
    return [{"role": "system", "content": system}, {"role": "user", "content": task_text(task)}]


def verify_messages(task: Task, candidate: str) -> list[dict[str, Any]]:
    """Messages asking the verifier to score `candidate` as a solution of the task.

    Args:
        task: The task record.
        candidate: The solution to score.
    """
    user = (
        f"Task:\n{wrap_task(task_text(task))}\n\nCandidate solution:\n<candidate>\n{candidate}\n</candidate>"
    )
    return [{"role": "system", "content": VERIFY_SYSTEM}, {"role": "user", "content": user}]


def step_messages(task: Task, steps: list[str], step_no: int, depth: int) -> list[dict[str, Any]]:
    """Messages asking for step `step_no` of a `depth`-step solution, after `steps`.

    Args:
        task: The task record.
        steps: The steps written so far, in order.
        step_no: The step to write (1-based).
        depth: The number of steps in all (the last one gives the final answer).
    """
    done = "\n".join(f"Step {i + 1}: {s}" for i, s in enumerate(steps)) or "(no steps yet)"
    last = " This is the last step: finish and give the final answer." if step_no == depth else ""
    user = (
        f"Task:\n{wrap_task(task_text(task))}\n\nPartial solution:\n<steps>\n{done}\n</steps>\n\n"
        f"Write step {step_no} of {depth}.{last}"
    )
    return [{"role": "system", "content": STEP_SYSTEM}, {"role": "user", "content": user}]


def partial_verify_messages(task: Task, steps: list[str]) -> list[dict[str, Any]]:
    """Verifier prompt for a partial (tree-search) solution: same verifier, steps as the candidate.

    Args:
        task: The task record.
        steps: The steps written so far, in order.
    """
    return verify_messages(task, "\n".join(f"Step {i + 1}: {s}" for i, s in enumerate(steps)))


def judge_messages(task: Task, response_a: str, response_b: str) -> list[dict[str, Any]]:
    """Messages asking the judge which of two responses answers the task better (or a tie).

    Args:
        task: The task record.
        response_a: The response shown as A.
        response_b: The response shown as B.
    """
    user = (
        f"Question:\n{wrap_task(task_text(task))}\n\nResponse A:\n<response_a>\n{response_a}\n</response_a>\n\n"
        f"Response B:\n<response_b>\n{response_b}\n</response_b>"
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


# ---- parsing (shared so the simulator and the worker read the same format) ----

# Replies are untrusted and often degenerate (a newline flood at max_tokens): every pattern here runs in
# time linear in the reply. The answer label is matched with possessive quantifiers at one position at a
# time (final_answer_line), never by a MULTILINE search whose `^\s*` can restart at every newline (that
# search, `^\s*\**\s*(?:final\s+)?answer\s*\**\s*[:：]\s*(.+?)\s*$`, was cubic in the newlines: 1,200
# newlines cost 8.7 s with the GIL held).
_ANSWER_LABEL = re.compile(r"\**+\s*+(?:final\s++)?answer\s*+\**+\s*+[:：]", re.IGNORECASE)
_NON_SPACE = re.compile(r"\S")
_SPACES = re.compile(r"\s*+")
_SCORE_RE = re.compile(r"score\s*+[:=]\s*+([01](?:\.\d+)?|\.\d+)", re.IGNORECASE)
_WINNER_RE = re.compile(r"winner\s*+[:=]\s*+\**+\s*+(A|B|tie)\b", re.IGNORECASE)


def prompt_kind(messages: list[dict[str, Any]]) -> str:
    """'solve' | 'verify' | 'step' | 'judge' | 'unknown', from the system message header.

    Args:
        messages: The messages of a request (the simulator reads the kind of call from them).
    """
    for m in messages:
        if m.get("role") == "system" and isinstance(m.get("content"), str):
            for header, kind in KINDS.items():
                if m["content"].startswith(header):
                    return kind
    return "unknown"


def between(text: str, open_tag: str, close_tag: str) -> str | None:
    """The text between the first `open_tag` and the next `close_tag`, newlines at its ends stripped; None when either tag is missing.

    Args:
        text: The text to search.
        open_tag: The opening tag (e.g. '<answer>').
        close_tag: The closing tag (e.g. '</answer>').
    """
    i = text.find(open_tag)
    if i < 0:
        return None
    j = text.find(close_tag, i + len(open_tag))
    return None if j < 0 else text[i + len(open_tag) : j].strip("\n")


def final_answer_line(text: str | None) -> str | None:
    """The last 'Answer: ...' line of a reply, without the label; None when there is none.

    Args:
        text: A model's reply (None: no reply).
    """
    if not text:
        return None
    found = answer_lines(text)
    return found[-1].strip() if found else None


def answer_lines(text: str) -> list[str]:
    """Every 'Answer: ...' value of a reply in order (what the old MULTILINE regex's findall returned), in
    time linear in the reply: each character is looked at a bounded number of times.

    A label is the first non-blank thing on a line: optional `**`, optional `final`, `answer` (any case),
    optional `**`, a colon; the value is the rest of the first non-blank line after the colon (it may be
    on the next line), right-stripped.

    Args:
        text: A model's reply.
    """
    found: list[str] = []
    pos, n = 0, len(text)
    while pos < n:
        first = _NON_SPACE.search(text, pos)  # blank lines before a line's content change nothing
        if first is None:
            break
        p0 = first.start()
        label = _ANSWER_LABEL.match(text, p0)
        if label is None:
            nl = text.find("\n", p0)
            if nl < 0:
                break
            pos = nl + 1
            continue
        blanks = _SPACES.match(text, label.end())
        value_at = blanks.end() if blanks else label.end()
        if value_at >= n:  # only blanks after the colon: the old regex took one of them as the value
            rest = text[label.end() :].rstrip("\n")
            if rest:
                found.append(rest[-1])
            break
        eol = text.find("\n", value_at)
        eol = n if eol < 0 else eol
        found.append(text[value_at:eol].rstrip())
        pos = eol + 1
    return found


def parse_score(text: str | None) -> float | None:
    """The last 'Score: x' in a verifier reply, clipped to 0..1; None when absent.

    Args:
        text: A model's reply (None: no reply).
    """
    if not text:
        return None
    found = _SCORE_RE.findall(text)
    return min(1.0, max(0.0, float(found[-1]))) if found else None


def parse_winner(text: str | None) -> str | None:
    """'A' | 'B' | 'tie' from a judge reply; None when absent.

    Args:
        text: A model's reply (None: no reply).
    """
    if not text:
        return None
    found = _WINNER_RE.findall(text)
    if not found:
        return None
    w = found[-1]
    return "tie" if w.lower() == "tie" else w.upper()
