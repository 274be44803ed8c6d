"""Verdicts the candidate cannot forge: tests are split into what runs in the sandbox and what is decided here.

Every `assert <expr>` of a test becomes, inside the sandbox, `__ept_check__(k, lambda: <probe>, ...)`: the
probes are the smallest sub-expressions that involve the candidate (anything that is not a literal or a
call of a few pure builtins), e.g. `f(1)` in `assert f(1) == 2`. The rest, here `<probe 0> == 2`, stays in
the worker and is evaluated on the plain values the sandbox sent back (decoded into real ints, lists, ...;
an object with its own `__eq__` cannot be sent). So the expected value never enters the sandbox, and a
candidate that prints a fake result line, exits early or returns an always-equal object still fails.

What the worker evaluates is restricted to literals, comparisons, boolean logic, + - / // %, indexing and
pure builtins (len, sorted, abs, math.isclose, ...): no attribute access, no comprehensions, no `*`/`**` on
non-constants, and `set`/`frozenset`/`dict`/`bytes` only of constants, so neither a hostile task file nor a
candidate's values can make it loop or allocate without bound (values are decoded under caps: MAX_INT_BITS,
MAX_ITEMS, MAX_SAME_HASH; past them the check fails with the reason). Anything outside that
subset is evaluated inside the sandbox as part of a probe (and is then only as trustworthy as the sandbox:
a comparison inside a comprehension or a helper function of the test runs next to the candidate).

Every top-level assert must report exactly once and in order, nested ones at least once: a candidate
that skips the checks (patching the harness, `os._exit(0)`) fails the test.
"""

from __future__ import annotations

import ast
import json
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, overload

_SAFE_FUNCS: dict[str, Any] = {
    f.__name__: f
    for f in (
        abs,
        all,
        any,
        bool,
        bytes,
        complex,
        dict,
        divmod,
        float,
        frozenset,
        int,
        isinstance,
        len,
        list,
        max,
        min,
        repr,
        reversed,
        round,
        set,
        sorted,
        str,
        sum,
        tuple,
        type,
    )
}
_SAFE_NAMES: dict[str, Any] = {**_SAFE_FUNCS, "math": math}
_BUILD_ONLY_PURE = {"set", "frozenset", "dict", "bytes"}  # called in the worker on constants only
_MATH = {"isclose", "isnan", "isinf", "isfinite", "sqrt", "floor", "ceil", "fabs", "pi", "e", "inf", "nan"}
_BINOPS = (ast.Add, ast.Sub, ast.Div, ast.FloorDiv, ast.Mod)
_GET = "__ept_get"
_CHECK = "__ept_check__"


@dataclass(frozen=True)
class Check:
    expr: Any  # compiled code object of the worker-side expression
    source: str  # the assert's text, for failure reasons
    probes: tuple[str, ...]  # probe sources, to name the value that failed
    top_level: bool


@dataclass(frozen=True)
class Prepared:
    sandbox_src: str  # the test as it runs in the sandbox (probes only: no expected values)
    checks: dict[int, Check]
    top_order: tuple[int, ...]  # ids of the top-level asserts, in order
    nested: tuple[int, ...]
    error: str | None = None  # the test itself does not parse


def _small_const(node: ast.AST) -> bool:
    # int or float, not bool (ast.parse makes no other subclasses of them)
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
        and abs(node.value) <= 1_000_000
    )


def _pure(node: ast.AST, shadow: frozenset[str] = frozenset()) -> bool:
    """Can the worker evaluate this subtree itself, cheaply and without candidate code? (`shadow`: names the
    test binds itself, e.g. `max = 3`, which then do not mean the builtin.)"""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in _SAFE_FUNCS and node.id not in shadow
    if isinstance(node, ast.Attribute):
        return (
            isinstance(node.value, ast.Name)
            and node.value.id == "math"
            and "math" not in shadow
            and node.attr in _MATH
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Pow):
        # Constant folding only (e.g. 2**31, 1e-9): `x * 10**9` could allocate without bound.
        return (
            _small_const(node.left)
            and _small_const(node.right)
            and not (isinstance(node.op, ast.Pow) and abs(node.right.value) > 64)  # type: ignore[attr-defined]
        )
    return _structural(node, shadow) and all(_pure(c, shadow) for c in _children(node))


def _structural(node: ast.AST, shadow: frozenset[str] = frozenset()) -> bool:
    """Node kinds the worker evaluates itself once their operands are known (children split further)."""
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, _BINOPS)
    if isinstance(
        node,
        ast.UnaryOp
        | ast.BoolOp
        | ast.Compare
        | ast.Tuple
        | ast.List
        | ast.Set
        | ast.Dict
        | ast.Subscript
        | ast.Slice
        | ast.IfExp,
    ):
        return not any(isinstance(c, ast.Starred) for c in _children(node))
    if isinstance(node, ast.Call):
        f = node.func
        safe_func = (isinstance(f, ast.Name) and f.id in _SAFE_FUNCS and f.id not in shadow) or (
            isinstance(f, ast.Attribute) and _pure(f, shadow)
        )
        if safe_func and isinstance(f, ast.Name) and f.id in _BUILD_ONLY_PURE:
            # set(<candidate list>) could be 300k keys crafted to collide, bytes(<candidate int>) 10**12 bytes:
            # on candidate values these run in the sandbox, and come back checked by decode().
            return all(_pure(c, shadow) for c in _children(node)) and all(k.arg for k in node.keywords)
        return safe_func and all(k.arg for k in node.keywords)
    return False


def _children(node: ast.AST) -> list[ast.AST]:
    kids = []
    for c in ast.iter_child_nodes(node):
        if isinstance(c, ast.expr_context | ast.boolop | ast.operator | ast.unaryop | ast.cmpop):
            continue
        kids.append(c.value if isinstance(c, ast.keyword) else c)
    return kids


class _Splitter(ast.NodeTransformer):
    """Replaces candidate-dependent subtrees of one assert expression by `__ept_get(j)`."""

    def __init__(self, shadow: frozenset[str]) -> None:
        self.probes: list[ast.expr] = []
        self.shadow = shadow

    # An expression always comes back an expression (itself, or the probe call that replaces it).
    @overload
    def visit(self, node: ast.expr) -> ast.expr: ...
    @overload
    def visit(self, node: ast.AST) -> ast.AST: ...

    def visit(self, node: ast.AST) -> ast.AST:
        if not isinstance(node, ast.expr) or _pure(node, self.shadow):
            return node
        if _structural(node, self.shadow):
            if isinstance(node, ast.Call):  # keep the (safe) function itself, split the arguments
                node.args = [self.visit(a) for a in node.args]
                for k in node.keywords:
                    k.value = self.visit(k.value)
                return node
            return self.generic_visit(node)
        self.probes.append(node)
        call = ast.Call(ast.Name(_GET, ast.Load()), [ast.Constant(len(self.probes) - 1)], [])
        return ast.copy_location(call, node)


class _Rewriter(ast.NodeTransformer):
    def __init__(self) -> None:
        self.checks: dict[int, Check] = {}
        self.top: list[int] = []
        self.nested: list[int] = []
        self.top_nodes: set[int] = set()
        self.shadow: frozenset[str] = frozenset()

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        k = len(self.checks)
        source = ast.unparse(node)
        sp = _Splitter(self.shadow)
        expr = sp.visit(ast.parse(ast.unparse(node.test), mode="eval").body)
        code = compile(ast.fix_missing_locations(ast.Expression(expr)), "<check>", "eval")
        top = id(node) in self.top_nodes
        self.checks[k] = Check(code, source, tuple(ast.unparse(p) for p in sp.probes), top)
        (self.top if top else self.nested).append(k)
        lambdas = [ast.Lambda(ast.arguments([], [], None, [], [], None, []), p) for p in sp.probes]
        call = ast.Call(ast.Name(_CHECK, ast.Load()), [ast.Constant(k), *lambdas], [])
        return ast.copy_location(ast.Expr(call), node)


def _bound_names(tree: ast.AST) -> frozenset[str]:
    """Every name the test binds (assignments, defs, arguments, imports other than `import math`)."""
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(n.name)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
        elif isinstance(n, ast.alias) and not (n.name == "math" and n.asname is None):
            names.add(n.asname or n.name.split(".")[0])
        elif isinstance(n, ast.Global | ast.Nonlocal):
            names.update(n.names)
    return frozenset(names)


def prepare(test: str) -> Prepared:
    """Split one test (Python source with asserts) into its sandbox program and its worker-side checks."""
    try:
        tree = ast.parse(test, mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return Prepared("", {}, (), (), f"the test does not parse: {type(e).__name__}: {str(e)[:200]}")
    rw = _Rewriter()
    rw.top_nodes = {id(n) for n in tree.body if isinstance(n, ast.Assert)}
    rw.shadow = _bound_names(tree)
    try:
        new = ast.fix_missing_locations(rw.visit(tree))
        src = ast.unparse(new)
    except (RecursionError, MemoryError, ValueError, SyntaxError) as e:
        return Prepared("", {}, (), (), f"the test cannot be prepared: {type(e).__name__}: {str(e)[:200]}")
    return Prepared(src, rw.checks, tuple(rw.top), tuple(rw.nested))


# ---- values coming back from the sandbox ------------------------------------------------------------


class Tampered(ValueError):
    """The result channel holds something the harness never writes: the candidate wrote into it."""


class TooLarge(ValueError):
    """A value from the sandbox the worker will not build or compare (a check with it fails, nothing else)."""


# What the worker builds from one value the sandbox sent (the report itself is capped at 8 MB): ints of at
# most MAX_INT_BITS (arithmetic on them stays in milliseconds), at most MAX_ITEMS items in all, and no set or
# dict whose keys share a hash value more than MAX_SAME_HASH times. 300k distinct ints that all hash alike
# (k * (2**61 - 1)) made one set() take > 11 min of worker CPU: every insert walked every earlier key.
MAX_INT_BITS = 1 << 17
MAX_ITEMS = 1_000_000
MAX_SAME_HASH = 64


def decode(v: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """Encoded value from the sandbox -> a real plain Python value (whose __eq__ is the builtin one).

    Raises Tampered for what the harness never writes, TooLarge past the limits above."""
    if budget is None:
        budget = [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0:
        raise TooLarge(f"value too large to compare (more than {MAX_ITEMS:,} items)")
    if depth > 200:
        raise Tampered("value nested too deeply")
    if v is None or type(v) in (bool, str, int):
        return v
    if type(v) is list:
        return [decode(x, depth + 1, budget) for x in v]
    if type(v) is dict and len(v) == 1:
        ((tag, x),) = v.items()
        try:
            return _decode_tagged(tag, x, depth, budget)
        except (TypeError, ValueError, AttributeError, IndexError, OverflowError) as e:
            if isinstance(e, TooLarge | Tampered):
                raise
            raise Tampered(f"malformed value: {type(e).__name__}: {str(e)[:100]}") from None
    raise Tampered("malformed value")


def _decode_tagged(tag: str, x: Any, depth: int, budget: list[int]) -> Any:
    if tag == "i":
        if type(x) is not str or len(x) > MAX_INT_BITS // 4 + 3:  # '-0x' + hex digits
            raise TooLarge(f"integer too large to compare (more than {MAX_INT_BITS:,} bits)")
        return int(x, 16)
    if tag == "f":
        return float.fromhex(x)  # a forged '0x1p99999' raises OverflowError: malformed, not a crash
    if tag == "t":
        return tuple(decode(e, depth + 1, budget) for e in x)
    if tag == "d":
        pairs = [(decode(k, depth + 1, budget), decode(e, depth + 1, budget)) for k, e in x]
        _check_hashes([k for k, _ in pairs])
        return dict(pairs)
    if tag in ("s", "fs"):
        items = [decode(e, depth + 1, budget) for e in x]
        _check_hashes(items)
        return set(items) if tag == "s" else frozenset(items)
    if tag == "b":
        return bytes.fromhex(x)
    if tag == "c":
        return complex(float.fromhex(x[0]), float.fromhex(x[1]))
    raise Tampered("malformed value")


def _check_hashes(keys: list[Any]) -> None:
    """Refuse keys crafted to collide before a set or dict is built of them (hashing is linear; a Counter of
    distinct hash values does not collide)."""
    if len(keys) <= MAX_SAME_HASH:
        return
    counts = Counter(hash(k) for k in keys)  # TypeError for an unhashable key: malformed
    if max(counts.values()) > MAX_SAME_HASH:
        raise TooLarge(f"set or dict keys crafted to collide (more than {MAX_SAME_HASH} share a hash value)")


class _ProbeFailed(Exception):
    pass


def _short(v: Any) -> str:
    try:
        r = repr(v)
    except (ValueError, RecursionError, MemoryError):  # an int past CPython's 4,300-digit repr limit
        n = v.bit_length() if type(v) is int else 0
        return f"<int of {n:,} bits>" if n else f"<{type(v).__name__} too large to show>"
    return r if len(r) <= 80 else r[:77] + "..."


def evaluate(check: Check, results: list[Any]) -> str | None:
    """None if the assert holds on these probe results, else why not."""
    if not isinstance(results, list) or len(results) != len(check.probes):
        raise Tampered("wrong number of values for a check")
    values: list[Any] = []
    for r in results:
        if not isinstance(r, dict) or len(r) != 1 or not ({"v", "x"} >= r.keys()):
            raise Tampered("malformed probe result")
        if "x" in r:
            values.append(("err", str(r["x"])[:300]))
            continue
        try:
            values.append(("ok", decode(r["v"])))
        except TooLarge as e:
            values.append(("err", str(e)))

    def get(j: int) -> Any:
        kind, v = values[j]
        if kind == "err":
            raise _ProbeFailed(v)
        return v

    try:
        ok = eval(check.expr, {"__builtins__": _SAFE_NAMES, _GET: get})
    except _ProbeFailed as e:
        return str(e)
    except (Exception, RecursionError) as e:
        return f"{type(e).__name__}: {str(e)[:200]} (in {check.source[:120]})"
    if type(ok) is not bool:
        ok = bool(ok)  # plain values only: their truth cannot be faked
    if ok:
        return None
    got = "; ".join(
        f"{p[:60]} = {_short(v)}" for p, (kind, v) in zip(check.probes, values, strict=True) if kind == "ok"
    )
    return f"AssertionError: {check.source[:120]}" + (f" (got {got})" if got else "")


def verdict(prep: Prepared, line: dict[str, Any] | None) -> str | None:
    """None if the test passed, else the reason; `line` is the harness's report for this test."""
    if prep.error:
        return prep.error
    if line is None:
        return "no result for this test"
    events, err = line.get("c"), line.get("e")
    if not isinstance(events, list):
        raise Tampered("malformed test report")
    seen_top: list[int] = []
    seen_nested: set[int] = set()
    for ev in events:
        if not (isinstance(ev, list) and len(ev) == 2 and type(ev[0]) is int and ev[0] in prep.checks):
            raise Tampered("unknown check in the report")
        k, results = ev
        check = prep.checks[k]
        (seen_top.append(k) if check.top_level else seen_nested.add(k))
        why = evaluate(check, results)
        if why is not None:
            return why
    if err is not None:
        return str(err)[:300]
    if tuple(seen_top) != prep.top_order or not seen_nested >= set(prep.nested):
        return "the test's assertions did not all run (the harness was interfered with)"
    return None


def parse_report(stdout: bytes, marker: bytes) -> tuple[str | None, dict[int, dict[str, Any]], bool]:
    """(load error, per-test lines, done) from the harness's stdout; lines not starting with the marker
    (the candidate's own writes to fd 1) are ignored, duplicates mean tampering."""
    load: str | None = None
    seen_load = False
    tests: dict[int, dict[str, Any]] = {}
    done = False
    for raw in stdout.split(b"\n"):
        if not raw.startswith(marker):
            continue
        try:
            obj = json.loads(raw[len(marker) :])
        except (ValueError, RecursionError) as e:
            raise Tampered(f"unreadable report line: {type(e).__name__}") from None
        if not isinstance(obj, dict):
            raise Tampered("malformed report line")
        if "load" in obj:
            if seen_load:
                raise Tampered("two load reports")
            seen_load, load = True, (None if obj["load"] is None else str(obj["load"])[:300])
        elif "t" in obj:
            i = obj["t"]
            if type(i) is not int or i in tests:
                raise Tampered("duplicate or malformed test report")
            tests[i] = obj
        elif "done" in obj:
            done = True
    if not seen_load:
        done = False
    return load, tests, done


def printed_output(stdout: bytes, marker: bytes, limit: int = 64_000) -> tuple[str, int]:
    """(text, characters cut in the sandbox) of the harness's {"o": ..., "cut": n} lines: what the candidate
    printed. Evidence for the transcript only: no verdict ever depends on it (a candidate can forge these lines
    with raw writes to fd 1; it then forges only what is shown as its output). At most `limit` characters."""
    parts: list[str] = []
    kept = cut = 0
    for raw in stdout.split(b"\n"):
        if not raw.startswith(marker) or b'"o"' not in raw:
            continue
        try:
            obj = json.loads(raw[len(marker) :])
        except (ValueError, RecursionError):
            continue
        if not (isinstance(obj, dict) and obj.keys() == {"o", "cut"} and type(obj["o"]) is str):
            continue
        c = obj["cut"]
        cut += c if type(c) is int and 0 <= c < 2**53 else 0
        room = limit - kept
        parts.append(obj["o"][: max(room, 0)])
        kept += len(parts[-1])
        cut += len(obj["o"]) - len(parts[-1])
    return "".join(parts), cut
