"""TaskBrain: the simulator's model of an LLM solving the built-in suites.

It finds the task a request is about (by the task's prompt text: the user message of a solve request,
or the text between <task> markers in verifier / tree-step / judge prompts, see contracts.prompts) and
answers with a known accuracy:

* P(correct) falls with the task's difficulty d: p = 0.93 - 0.8 d, minus the arm's `degrade`.
* temperature 0 is deterministic per task (the seed is ignored: greedy gives one fixed answer per task);
  temperature > 0 draws independently per request seed with slightly lower accuracy (p - 0.03).
* wrong answers come from the task's `distractors` with skewed weights (~.54/.30/.16), so the most
  common wrong answer can outvote the right one when p is low: majority voting can be fooled.
* verifier prompts get noisy scores correlated with correctness (right ~ N(.62,.2), wrong ~ N(.42,.2)).
* tree-search steps: each intermediate step is sound or flawed (a "Check value" line encodes which);
  a flawed path stays flawed, the last step is right with p .95 on a sound path and .1 on a flawed one,
  and the per-step soundness is set so that one unpruned path is right with the sampling accuracy —
  pruning by verifier score is what makes the search pay.
* tool tasks: with tools offered it calls the expected tool (right arguments with p^0.5), reads the
  result message, then answers (right with p^0.5 if its calls were right, else a distractor).
* judge prompts prefer the correct response (p .85) with a small bias towards position A.
* reply lengths grow with difficulty: hundreds of tokens of reasoning for a solve request.

Unknown prompts go to GenericBrain. Every reply is a pure function of the request (and its seed).
"""

from __future__ import annotations

import json
import math
import random
import re
from typing import Any

from elo_per_token.contracts.jobs import derive_seed
from elo_per_token.contracts.prompts import (
    TASK_CLOSE,
    TASK_OPEN,
    between,
    final_answer_line,
    prompt_kind,
    task_text,
)
from elo_per_token.contracts.tasks import Task
from elo_per_token.simulator.generic import (
    BrainReply,
    BrainRequest,
    GenericBrain,
    apply_limits,
    content_text,
    reasoning_budget,
    reasoning_gain,
)

SAMPLING_PENALTY = 0.03
P_FINAL_SOUND, P_FINAL_FLAWED = 0.95, 0.10
# Verifier scores: (mean, sd) for a right and a wrong candidate. Overlapping on purpose: a noisy
# verifier is what makes best-of-n returns diminish (more candidates, more lucky wrong scores).
VERIFY_RIGHT, VERIFY_WRONG = (0.62, 0.2), (0.42, 0.2)

_FRAGMENTS = [
    "Let me restate what is being asked",
    "first I identify the quantities involved",
    "the key constraint is stated in the second sentence",
    "I will work through it step by step",
    "an easy mistake here would be to skip one of the operations",
    "checking the units keeps this honest",
    "a quick estimate gives a rough idea of the size of the result",
    "now I combine the partial results",
    "it is worth double-checking the arithmetic",
    "the edge cases need a separate look",
    "this matches the pattern described in the task",
    "so the intermediate value follows directly",
    "rewriting the expression makes the structure clearer",
    "the order of operations matters here",
    "I consider an alternative approach to cross-check",
    "both approaches should agree",
    "nothing in the statement suggests a trick",
    "carrying the computation through carefully",
    "the remaining part is straightforward",
    "putting it all together",
]
_NUM_RE = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
_CODE_RE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_CHECK_RE = re.compile(r"Check value: ([0-9a-f]{4})")
_STEP_RE = re.compile(r"Write step (\d+) of (\d+)")


def _clip(p: float, lo: float = 0.02, hi: float = 0.99) -> float:
    return min(hi, max(lo, p))


def _prose(rng: random.Random, n_words: int) -> str:
    out, words = [], 0
    while words < n_words:
        s = rng.choice(_FRAGMENTS)
        out.append(s[0].upper() + s[1:] + ".")
        words += len(s.split())
    return " ".join(out)


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    found = _NUM_RE.findall(text.replace("$", ""))
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def _norm_code(code: str) -> str:
    return "\n".join(ln.rstrip() for ln in code.strip().splitlines() if ln.strip())


class TaskBrain:
    def __init__(self, tasks: list[Task] | None = None) -> None:
        if tasks is None:
            from elo_per_token.suites.load import builtin_suite_names, load_builtin_suite

            tasks = [t for name in builtin_suite_names() for t in load_builtin_suite(name)]
        self.by_text = {task_text(t).strip(): t for t in tasks}
        # Public suites repeat a question with different tools (BFCL); those are told apart by the tools.
        self.same_text: dict[str, list[Task]] = {}
        for t in tasks:
            self.same_text.setdefault(task_text(t).strip(), []).append(t)
        self.same_text = {k: v for k, v in self.same_text.items() if len(v) > 1}
        self.generic = GenericBrain()

    # ------------------------------------------------------------ dispatch

    def respond(self, req: BrainRequest) -> BrainReply:
        kind = prompt_kind(req.messages)
        task = self.find_task(req.messages, kind)
        if task is None:
            return self.generic.respond(req)
        if req.tools and task_text(task).strip() in self.same_text:
            offered = sorted(str((t.get("function") or {}).get("name")) for t in req.tools)
            task = next(
                (
                    t
                    for t in self.same_text[task_text(task).strip()]
                    if sorted(x["function"]["name"] for x in t.get("tools") or []) == offered
                ),
                task,
            )
        if kind == "verify":
            reply = self._verify(task, req)
        elif kind == "step":
            reply = self._step(task, req)
        elif kind == "judge":
            reply = self._judge(task, req)
        elif req.tools and task.get("tools"):
            reply = self._tool_turn(task, req)
        else:
            reply = self._solve(task, req)
        reply.reasoning_tokens = self.reasoning_tokens(task, req)
        return apply_limits(reply, req)

    def find_task(self, messages: list[dict[str, Any]], kind: str) -> Task | None:
        users = [content_text(m.get("content")) for m in messages if m.get("role") == "user"]
        for text in users:
            inner = between(text, TASK_OPEN, TASK_CLOSE) if kind in ("verify", "step", "judge") else None
            found = self.by_text.get((inner if inner is not None else text).strip())
            if found is not None:
                return found
        return None

    # ------------------------------------------------------------ accuracy model

    def reasoning_tokens(self, task: Task, req: BrainRequest) -> int:
        """Hidden thinking for this request: the effort's tokens scaled by difficulty (harder tasks think
        longer), capped by a thinking budget. Deterministic in (task, seed or greedy, effort)."""
        budget = reasoning_budget(req)
        if not budget:
            return 0
        d = float(task.get("difficulty", 0.5))
        salt = req.seed if req.temperature > 0 else 0
        r = int(
            budget
            * (0.4 + 0.8 * d)
            * random.Random(derive_seed("reason", task["task_id"], salt, budget)).uniform(0.7, 1.3)
        )
        return max(1, min(r, req.thinking_budget) if req.thinking_budget else r)

    def p_correct(self, task: Task, req: BrainRequest) -> float:
        p = 0.93 - 0.8 * float(task.get("difficulty", 0.5)) - req.degrade
        if req.temperature > 0:
            p -= SAMPLING_PENALTY
        r = self.reasoning_tokens(task, req)
        if req.max_tokens:
            r = min(r, req.max_tokens)
        p += (0.97 - p) * reasoning_gain(r) if p < 0.97 else 0.0
        return _clip(p)

    def _rng(self, task: Task, req: BrainRequest, *salt: object) -> random.Random:
        # Temperature 0 ignores the seed: the same task always gets the same greedy reply.
        if req.temperature <= 0:
            return random.Random(derive_seed("greedy", task["task_id"], req.degrade, *salt))
        return random.Random(derive_seed(req.seed, task["task_id"], *salt))

    def _wrong(self, task: Task, rng: random.Random) -> Any:
        ds = task.get("distractors") or []
        if not ds:
            ref = task.get("reference")
            return (ref + 1) if isinstance(ref, int | float) else f"not {ref}"
        weights = [0.55**i for i in range(len(ds))]
        return rng.choices(ds, weights=weights)[0]

    def is_correct(self, task: Task, text: str | None) -> bool:
        """Whether a reply's final answer matches the task's reference (the brain's own check)."""
        if not text:
            return False
        ref = task.get("reference")
        if task["grader"]["type"] == "code":
            blocks = _CODE_RE.findall(text)
            return bool(blocks) and _norm_code(blocks[-1]) == _norm_code(str(ref))
        # A bare answer (e.g. an arm's extracted answer shown to a judge) counts as its own answer line.
        ans = final_answer_line(text) or text.strip().splitlines()[-1]
        if isinstance(ref, int | float):
            got = _num(ans)
            return got is not None and math.isclose(got, float(ref), abs_tol=0.011)
        return ans is not None and ans.strip().lower() == str(ref).strip().lower()

    # ------------------------------------------------------------ replies

    def _answer_text(self, task: Task, answer: Any) -> str:
        if task["grader"]["type"] == "code":
            return f"```python\n{str(answer).rstrip()}\n```\nAnswer: the function `{task.get('entry_point')}` above."
        return f"Answer: {answer}"

    def _reasoning_words(self, task: Task, rng: random.Random, scale: float = 1.0) -> int:
        d = float(task.get("difficulty", 0.5))
        return max(8, int(scale * (90 + 350 * d) * rng.uniform(0.6, 1.4)))

    def _solve(self, task: Task, req: BrainRequest) -> BrainReply:
        rng = self._rng(task, req, "solve")
        right = rng.random() < self.p_correct(task, req)
        answer = task["reference"] if right else self._wrong(task, rng)
        text = _prose(rng, self._reasoning_words(task, rng)) + "\n" + self._answer_text(task, answer)
        return BrainReply(text=text)

    def _verify(self, task: Task, req: BrainRequest) -> BrainReply:
        user = next(content_text(m.get("content")) for m in req.messages if m.get("role") == "user")
        cand = between(user, "<candidate>", "</candidate>") or ""
        if final_answer_line(cand) is None and "Check value:" in cand:
            good = self._sound(task, cand)  # a partial tree-search solution
        else:
            good = self.is_correct(task, cand)
        rng = (
            random.Random(derive_seed("verify", task["task_id"], cand))
            if req.temperature <= 0
            else random.Random(derive_seed(req.seed, "verify", task["task_id"]))
        )
        score = _clip(
            rng.gauss(VERIFY_RIGHT[0], VERIFY_RIGHT[1])
            if good
            else rng.gauss(VERIFY_WRONG[0], VERIFY_WRONG[1]),
            0.0,
            1.0,
        )
        text = _prose(rng, int(rng.uniform(40, 120))) + f"\nScore: {score:.2f}"
        return BrainReply(text=text)

    # tree search ---------------------------------------------------------

    def _check_value(self, task: Task, level: int) -> str:
        return f"{derive_seed(task['task_id'], level, 'sound') % 65536:04x}"

    def _sound(self, task: Task, steps_text: str) -> bool:
        values = _CHECK_RE.findall(steps_text)
        return all(v == self._check_value(task, i + 1) for i, v in enumerate(values))

    def _step(self, task: Task, req: BrainRequest) -> BrainReply:
        user = next(content_text(m.get("content")) for m in req.messages if m.get("role") == "user")
        m = _STEP_RE.search(user)
        level, depth = (int(m.group(1)), int(m.group(2))) if m else (1, 1)
        steps = between(user, "<steps>", "</steps>") or ""
        sound_so_far = self._sound(task, steps)
        rng = self._rng(task, req, "step", level, steps)
        p = self.p_correct(task, req)
        words = self._reasoning_words(task, rng, scale=0.6)
        if level < depth:
            # Chosen so that a single unpruned path ends right with probability p.
            q = ((p - P_FINAL_FLAWED) / (P_FINAL_SOUND - P_FINAL_FLAWED)) if p > P_FINAL_FLAWED else 0.0
            q = _clip(q ** (1 / (depth - 1)), 0.0, 1.0)
            sound = sound_so_far and rng.random() < q
            value = self._check_value(task, level) if sound else f"{rng.randrange(65536):04x}"
            if value == self._check_value(task, level) and not sound:
                value = f"{(int(value, 16) + 1) % 65536:04x}"
            return BrainReply(text=_prose(rng, words) + f" Check value: {value}")
        p_final = P_FINAL_SOUND if sound_so_far else P_FINAL_FLAWED
        if depth == 1:
            p_final = p
        right = rng.random() < _clip(p_final - req.degrade)
        answer = task["reference"] if right else self._wrong(task, rng)
        return BrainReply(text=_prose(rng, words) + "\n" + self._answer_text(task, answer))

    # judge ---------------------------------------------------------------

    def _judge(self, task: Task, req: BrainRequest) -> BrainReply:
        user = next(content_text(m.get("content")) for m in req.messages if m.get("role") == "user")
        a = between(user, "<response_a>", "</response_a>") or ""
        b = between(user, "<response_b>", "</response_b>") or ""
        ok_a, ok_b = self.is_correct(task, a), self.is_correct(task, b)
        rng = random.Random(
            derive_seed("judge", task["task_id"], a, b, req.seed if req.temperature > 0 else 0)
        )
        if ok_a != ok_b:
            better, worse = ("A", "B") if ok_a else ("B", "A")
            winner = better if rng.random() < 0.85 else worse
        else:
            r = rng.random()
            winner = "tie" if r < 0.5 else ("A" if r < 0.8 else "B")  # slight position-A bias
        return BrainReply(text=_prose(rng, int(rng.uniform(40, 100))) + f"\nWinner: {winner}")

    # tools ---------------------------------------------------------------

    def _tool_turn(self, task: Task, req: BrainRequest) -> BrainReply:
        if task["grader"]["type"] == "bfcl":
            return self._bfcl_turn(task, req)
        expected = task["grader"].get("expect_calls", [])
        made = [
            _call_of(tc)
            for m in req.messages
            if m.get("role") == "assistant"
            for tc in (m.get("tool_calls") or [])
        ]
        turn = len(made)
        rng = self._rng(task, req, "tool", turn)
        p_half = math.sqrt(self.p_correct(task, req))
        if turn < len(expected):
            exp = expected[turn]
            args = self._tool_args(task, exp)
            if rng.random() >= p_half:
                args = self._wrong_args(task, exp, args, rng)
            intro = _prose(rng, int(rng.uniform(15, 50)))
            return BrainReply(
                text=intro, tool_calls=[{"name": exp["name"], "arguments": args}], finish_reason="tool_calls"
            )
        calls_ok = len(made) >= len(expected) and all(
            self._args_match(task, e, c) for e, c in zip(expected, made, strict=False)
        )
        right = calls_ok and rng.random() < p_half
        answer = task["reference"] if right else self._wrong(task, rng)
        text = (
            _prose(rng, self._reasoning_words(task, rng, scale=0.5)) + "\n" + self._answer_text(task, answer)
        )
        return BrainReply(text=text)

    def _bfcl_turn(self, task: Task, req: BrainRequest) -> BrainReply:
        """BFCL: all calls in the first turn (parallel ones together), right with p; then a short close."""
        from elo_per_token.suites.public.bfcl import right_calls, wrong_calls

        rng = self._rng(task, req, "bfcl")
        if any(m.get("tool_calls") for m in req.messages if m.get("role") == "assistant"):
            return BrainReply(text=_prose(rng, int(rng.uniform(10, 30))) + "\nAnswer: the calls above.")
        right = rng.random() < self.p_correct(task, req)
        calls = right_calls(task) if right else wrong_calls(task, rng.randrange(2))
        if not calls:  # irrelevance, answered right: no function fits the question
            return BrainReply(
                text=_prose(rng, int(rng.uniform(20, 60))) + "\nAnswer: none of the functions apply."
            )
        return BrainReply(
            text=_prose(rng, int(rng.uniform(15, 50))), tool_calls=calls, finish_reason="tool_calls"
        )

    def _tool_args(self, task: Task, exp: dict[str, Any]) -> dict[str, Any]:
        if exp.get("arguments"):
            return dict(exp["arguments"])
        if exp["name"] == "calculator":
            m = re.search(r"compute exactly:\s*(.+?)\.?\s*$", task_text(task))
            return {"expression": m.group(1) if m else "0"}
        return {}

    def _wrong_args(
        self, task: Task, exp: dict[str, Any], args: dict[str, Any], rng: random.Random
    ) -> dict[str, Any]:
        if exp["name"] == "lookup":
            tables = task.get("tool_impl", {}).get("lookup", {}).get("table", {})
            keys = [k for t in tables.values() for k in t if k != args.get("key")]
            return {**args, "key": rng.choice(keys)} if keys else {**args, "key": "unknown"}
        if "expression" in args:
            return {"expression": args["expression"].replace("-", "+", 1)}
        return args

    def _args_match(self, task: Task, exp: dict[str, Any], call: dict[str, Any]) -> bool:
        want = self._tool_args(task, exp)
        return call.get("name") == exp["name"] and all(
            str(call.get("arguments", {}).get(k, "")).strip().lower() == str(v).strip().lower()
            for k, v in want.items()
        )


def _call_of(tc: dict[str, Any]) -> dict[str, Any]:
    fn = tc.get("function", tc)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = {}
    return {"name": fn.get("name"), "arguments": args if isinstance(args, dict) else {}}
