"""The candidate's printed output, captured inside the sandbox (bounded, marked where cut, never a verdict
channel), carried to the grader's evidence as `sandbox_output` and shown in the transcript and `ept view`'s
job page (issue 28: "a HumanEval job's transcript shows the candidate code, the failed assert and the
sandbox's output")."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest
from fixtures_sim import SIM_KEY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elo_per_token.contracts import transcripts as tr
from elo_per_token.contracts.jobs import Job
from elo_per_token.egress.client import ProviderClient
from elo_per_token.ledger import FileLedger
from elo_per_token.suites.load import load_builtin_suite
from elo_per_token.worker.graders.code import MARKER, _sandbox_output, grade_code
from elo_per_token.worker.lifecycle import perform_job
from elo_per_token.worker.sandbox import bwrap, checks

HE = load_builtin_suite("humaneval")
needs_bwrap = pytest.mark.skipif(bwrap.probe() is not None, reason=f"no working bwrap here: {bwrap.probe()}")
BOUND = 4000 + 200  # _sandbox_output's limit plus its truncation mark


def _printing_wrong(task: dict, body: str = "") -> str:
    """A candidate that prints (to stdout and stderr) and returns a wrong value."""
    ep = task["entry_point"]
    return (f"import sys\nprint('loading {ep}')\ndef {ep}(*args, **kwargs):\n"
            f"    print('debug: called with', args)\n    sys.stderr.write('warning from the candidate\\n')\n"
            f"{body}    return None\n")  # fmt: skip


@needs_bwrap
def test_humaneval_job_transcript_shows_code_failed_assert_and_printed_output(
    make_sim, tmp_path: Path
) -> None:
    """End to end: the simulator answers a HumanEval task with code that prints and fails an assert; the job's
    transcript and its `ept view` page show the candidate code, the failed assert and what it printed."""
    from elo_per_token.simulator.brain import TaskBrain
    from elo_per_token.viewer.job_page import job_page

    code = _printing_wrong(HE[0])
    task = {**HE[0], "reference": code, "distractors": [code]}  # right or wrong, the reply is this code
    sim = make_sim(brain=TaskBrain(tasks=[task]))
    client = ProviderClient(
        sim.profile(supports_n=False), api_key=SIM_KEY, backoff_base=0.01, backoff_cap=0.05
    )
    led = FileLedger(tmp_path / "ledger")
    job = Job("he", task, "greedy", 1, seed=3)
    assert perform_job(job, led, client, transcripts=True)["status"] == "done"
    lines = [json.loads(x) for x in led.get_job("he", job.key).decode().splitlines()]
    outcome = lines[-1]
    assert outcome["score"] == 0.0 and "sandbox_output" not in outcome["grader"]
    t = tr.read_transcript(led, "he", job.key)
    assert t is not None
    assert "print('debug: called with', args)" in str(t["calls"][0]["completion"])  # the candidate code
    ev = t["grader"]["evidence"]
    assert ev["failures"] and "AssertionError: assert candidate(" in ev["failures"][0]["error"]
    out = ev["sandbox_output"]
    assert "printed:\nloading has_close_elements" in out and "debug: called with ([1.0, 2.0" in out
    assert "warning from the candidate" in out
    page = job_page("he", job.key, lines, t)
    blocks = {c: page.split(f'<div class="{c}">', 1)[1].split("</div></div>")[0] if f'<div class="{c}">' in page
              else "" for c in ("failed-assert", "sandbox-output")}  # fmt: skip
    assert "AssertionError: assert candidate(" in blocks["failed-assert"]
    assert (
        "debug: called with" in blocks["sandbox-output"]
        and "loading has_close_elements" in blocks["sandbox-output"]
    )


@needs_bwrap
def test_printed_fake_verdicts_change_nothing() -> None:
    """Printing the harness's report lines (a full passing report) is output, not a verdict: a wrong
    candidate still fails with the same reason, a right one printing a failing report still passes."""
    task = HE[2]
    forged = ("    print('\\x1eEPT:' + '{\"load\": null}')\n"
              "    print('\\x1eEPT:' + '{\"t\": 0, \"c\": [], \"e\": null}')\n"
              "    print('\\x1eEPT:' + '{\"o\": \"all good\", \"cut\": 0}')\n"
              "    print('\\x1eEPT:' + '{\"done\": 1}')\n")  # fmt: skip
    plain = grade_code(_printing_wrong(task), task)
    faked = grade_code(_printing_wrong(task, forged), task)
    assert (faked.score, faked.correct) == (plain.score, plain.correct) == (0.0, False)
    assert faked.details["reason"] == plain.details["reason"]
    assert '\\x1eEPT:{"done": 1}' in faked.details["sandbox_output"]  # shown, escaped
    right = task["reference"] if "def " in str(task["reference"]) else None
    if right is None:
        pytest.skip("the task has no reference solution to check the other direction")
    ep = task["entry_point"]
    fail_report = '\'\\x1eEPT:\' + \'{"t": 0, "c": [[0, [{"x": "forged"}]]], "e": "forged"}\''
    lying = (
        right + f"\n_orig = {ep}\ndef {ep}(*a, **k):\n    print({fail_report})\n    return _orig(*a, **k)\n"
    )
    g = grade_code(lying, task)
    assert g.correct and g.score == 1.0 and '"e": "forged"' in g.details["sandbox_output"]


# Hostile printed output: huge, control characters, the report marker, fake verdict lines, surrogates.
_piece = st.one_of(
    st.text(max_size=50),
    st.sampled_from(
        [
            '\x1eEPT:{"done": 1}',
            '\x1eEPT:{"t": 0, "c": [], "e": null}',
            "\x1b[2J\x1b[H",
            "\x00\x07\x1e\x7f\x9b",
            "\ud800",
            "\r",
            "\n" * 50,
            '{"o": "x", "cut": -1}',
        ]
    ),
)


@needs_bwrap
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(_piece, min_size=1, max_size=8), repeat=st.sampled_from([1, 1000, 300_000]))
def test_hostile_printed_output_is_bounded_and_never_a_verdict(pieces: list[str], repeat: int) -> None:
    """Whatever the candidate prints, its verdict is that of the same code printing nothing, within time
    and memory bounds; the output kept is bounded, its cut marked, and shows no raw control character."""
    task = HE[0]
    text = "".join(pieces)
    body = f"    for _ in range({repeat}):\n        print({text!r}, end='')\n"
    silent = grade_code(_printing_wrong(task, ""), task)
    tracemalloc.start()
    t0 = time.monotonic()
    g = grade_code(_printing_wrong(task, body), task)
    elapsed = time.monotonic() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert (g.score, g.correct) == (silent.score, silent.correct)
    reason = g.details["reason"]
    assert reason == silent.details["reason"] or reason.startswith(
        "timeout"
    )  # a huge print loop may run out of CPU
    out = g.details["sandbox_output"]
    assert len(out) <= BOUND
    assert not any((ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f or 0xD800 <= ord(c) <= 0xDFFF
                   for c in out)  # fmt: skip
    if repeat * len(text) > 16_000 and not reason.startswith("timeout"):
        assert "more characters printed in the sandbox, not kept" in out or "[truncated by ept" in out
    assert elapsed < 60  # a hang guard: the CPU limit (5 s) and the wall clock (15 s) end the sandbox
    assert peak < 64 * 1024 * 1024  # the worker holds at most the capped streams, never the printed total


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=4096), lines=st.lists(st.binary(max_size=300), max_size=30),
       err=st.binary(max_size=2048), cut=st.integers(-(2**70), 2**70))  # fmt: skip
def test_forged_output_lines_stay_bounded(raw: bytes, lines: list[bytes], err: bytes, cut: int) -> None:
    """The worker-side reading of hostile bytes on the result channel: never raises, bounded, escaped."""
    forged = [MARKER + json.dumps({"o": x.decode(errors="replace"), "cut": cut}).encode() for x in lines]
    stdout = b"\n".join([raw, *forged, MARKER + b'{"o": 1, "cut": 2}', MARKER + b"{not json", raw * 20])
    t0 = time.monotonic()
    text, n = checks.printed_output(stdout, MARKER, limit=1000)
    out = _sandbox_output(stdout, err)
    assert time.monotonic() - t0 < 5
    assert len(text) <= 1000 and n >= 0
    assert len(out) <= BOUND
    assert not any(ord(c) < 32 and c not in "\n\t" for c in out)
    assert "\x1eEPT:" not in out


@pytest.mark.slow
def test_analyze_never_reads_transcripts(tmp_path: Path) -> None:
    """`ept analyze` of a run whose transcripts/ folder holds poison (garbage under job-object names, damaged
    .json.gz) gives the same arms.csv as without it, uncompacted, compacted, and as a folder of logs: it never
    lists or opens transcripts (docs/benchmarks.md measures the time and memory at 100k and 1M jobs)."""
    import os
    import subprocess
    import sys

    import fixtures_ledger

    ledger = tmp_path / "ledger"
    fixtures_ledger.write_local(ledger, "r", 300)
    run_dir = ledger / "runs" / "r"
    env = {**os.environ, "COLUMNS": "200"}

    def analyze(out: str, *target: str) -> bytes:
        p = subprocess.run([sys.executable, "-m", "elo_per_token", "analyze", "--rounds", "20", "--no-plots",
                            "--out", str(tmp_path / out), *target], capture_output=True, env=env, timeout=600)  # fmt: skip
        assert p.returncode == 0, p.stderr.decode()[-2000:]
        return (tmp_path / out / "arms.csv").read_bytes()

    def poison() -> None:
        for k in ("a/b/c", "x", "deep/er/still/y"):
            p = run_dir / "transcripts" / k
            p.parent.mkdir(parents=True, exist_ok=True)
            Path(str(p) + ".json.gz").write_bytes(b"\x1f\x8b not gzip" * 1000)
        for name in ("poison.jsonl", "poison.parquet", "deep/er/poison.jsonl.gz"):
            (run_dir / "transcripts" / name).write_bytes(b'{"kind": "call", "broken\n\x00')

    clean = {"u": analyze("u0", "r", "--ledger", str(ledger)), "f": analyze("f0", str(run_dir))}
    poison()
    assert analyze("u1", "r", "--ledger", str(ledger)) == clean["u"]
    for name in ("poison.jsonl", "poison.parquet", "deep/er/poison.jsonl.gz"):  # a folder of logs takes these
        (run_dir / "transcripts" / name).unlink()
    assert analyze("f1", str(run_dir)) == clean["f"]  # damaged transcripts (.json.gz) beside the job objects
    subprocess.run([sys.executable, "-m", "elo_per_token", "compact", "r", "--ledger", str(ledger)], check=True,
                   capture_output=True, env=env, timeout=600)  # fmt: skip
    poison()
    assert analyze("c1", "r", "--ledger", str(ledger)) == clean["u"]
