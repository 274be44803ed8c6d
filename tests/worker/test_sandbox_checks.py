"""worker/sandbox/checks.py without a sandbox: what goes in, what the worker decides from what comes back."""

from __future__ import annotations

import pytest

from elo_per_token.worker.sandbox.checks import Tampered, parse_report, prepare, verdict


def ok(v):
    return {"v": v}


def test_expected_values_never_enter_the_sandbox():
    p = prepare("assert f(1) == 'secret-expected'\nassert sorted(g([3, 1])) == [1, 3]")
    assert "secret-expected" not in p.sandbox_src and "[1, 3]" not in p.sandbox_src
    assert [c.probes for c in p.checks.values()] == [("f(1)",), ("g([3, 1])",)]


def test_the_worker_compares_plain_values():
    p = prepare("assert f(1) == 2\nassert abs(f(2) - 0.5) < 1e-9")
    good = {"c": [[0, [ok(2)]], [1, [ok({"f": (0.5).hex()})]]], "e": None}
    assert verdict(p, good) is None
    bad = {"c": [[0, [ok(3)]], [1, [ok({"f": (0.5).hex()})]]], "e": None}
    assert verdict(p, bad) == "AssertionError: assert f(1) == 2 (got f(1) = 3)"
    err = {"c": [[0, [{"x": "ValueError: boom"}]], [1, [ok(1)]]], "e": None}
    assert verdict(p, err) == "ValueError: boom"


def test_skipped_or_reordered_asserts_fail():
    p = prepare("assert f(1) == 2\nassert f(2) == 3")
    assert "did not all run" in verdict(p, {"c": [[0, [ok(2)]]], "e": None})
    assert "did not all run" in verdict(p, {"c": [[1, [ok(3)]], [0, [ok(2)]]], "e": None})
    assert "did not all run" in verdict(p, {"c": [], "e": None})


def test_names_the_test_rebinds_are_not_the_builtins():
    p = prepare("max = 3\nassert f(1) == max")
    assert p.checks[0].probes == ("f(1)", "max")  # `max` is the test's, so it is read in the sandbox


def test_nested_asserts_must_run_at_least_once():
    p = prepare("def check(c):\n    for i in range(2):\n        assert c(i) == i\ncheck(f)")
    assert verdict(p, {"c": [[0, [ok(0), ok(0)]], [0, [ok(1), ok(1)]]], "e": None}) is None
    assert "did not all run" in verdict(p, {"c": [], "e": None})


@pytest.mark.parametrize(
    "stdout",
    [
        b'\x1eEPT:{"load": null}\n\x1eEPT:{"load": null}\n',  # two load reports
        b'\x1eEPT:{"load": null}\n\x1eEPT:{"t": 0, "c": [], "e": null}\n\x1eEPT:{"t": 0, "c": [], "e": null}\n',
        b"\x1eEPT:not json\n",
    ],
)
def test_a_written_over_channel_is_tampering(stdout):
    with pytest.raises(Tampered):
        parse_report(stdout, b"\x1eEPT:")


def test_values_with_wrong_shape_are_tampering():
    p = prepare("assert f(1) == 2")
    for line in (
        {"c": [[0, []]], "e": None},
        {"c": [[7, [ok(1)]]], "e": None},
        {"c": [[0, [{"q": 1}]]], "e": None},
        {"c": [[0, [ok({"zz": 1})]]], "e": None},
    ):
        with pytest.raises(Tampered):
            verdict(p, line)


def test_a_hostile_test_expression_is_not_evaluated_in_the_worker():
    # `*` on non-constants and attribute access stay in the sandbox (as probes), never in the worker.
    p = prepare("assert f(1) == 'x' * 10**9\nassert ().__class__ == f(2)")
    assert p.checks[0].probes == ("f(1)", "'x' * 10 ** 9")
    assert "().__class__" in p.checks[1].probes
