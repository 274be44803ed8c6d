"""Issue 23, "Imports and inputs": other tools' files are bounded before they are read — an inspect_ai `.eval` zip
bomb, a Parquet declaring 60M rows, a `--id-template` against a 100k-character custom_id (the lazy regex was
cubic), and arm names carrying terminal escapes (OSC 52 writes the clipboard). Each fails on c20688e."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import zipfile

import polars as pl
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from elo_per_token.analysis.imports.batch import compile_template, import_batch
from elo_per_token.contracts.errors import InputError, printable

OSC52 = "\x1b]52;c;aGFja2Vk\x07"


def _batch_line(cid: str, tokens: int = 5) -> dict:
    body = {"id": "c", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Answer: 1"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": tokens, "completion_tokens": tokens, "total_tokens": 2 * tokens}}  # fmt: skip
    return {"id": "b", "custom_id": cid, "response": {"status_code": 200, "body": body}, "error": None}


def test_id_template_is_linear_on_a_long_custom_id(tmp_path):
    """100k characters that almost match a four-field template: refused in well under a second (the regex took
    2.9 s at 2,000 characters and grew with the cube)."""
    out = tmp_path / "out.jsonl"
    cid = "a__" * 33_333 + "x"
    out.write_text(json.dumps(_batch_line(cid)) + "\n")
    t0 = time.process_time()
    col = import_batch([str(out)], id_template="{task_id}__{arm}__{family}__r{replicate}", skip_bad=True)
    assert time.process_time() - t0 < 2.0  # a hang guard: linear is milliseconds
    assert len(col.skipped) == 1 and "does not match --id-template" in col.skipped[0].message


@seed(23)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.text(alphabet="ab_r0123\x1b", max_size=60),
    st.sampled_from(
        [
            "{task_id}__{arm}__r{replicate}",
            "{task_id}_{arm}",
            "x{task_id}__{strategy}@{budget_n}_r{replicate}y",
        ]
    ),
)
def test_id_template_match_reassembles_the_id(cid, template):
    """Whatever the id, a match splits it exactly: literals and values put back together give the id, digit
    fields hold digits, and no field is empty."""
    t = compile_template(template)
    m = t.match(cid)
    if m is None:
        return
    rebuilt = t.literals[0] + "".join(m[f] + t.literals[i + 1] for i, f in enumerate(t.fields))
    assert rebuilt == cid and all(m.values())
    assert all(m[f].isdigit() for f in ("replicate", "budget_n") if f in m)


def test_import_batch_escapes_terminal_control_characters(tmp_path):
    """Arm names from a batch file reach the terminal with ESC and BEL shown escaped, not executed."""
    out = tmp_path / "out.jsonl"
    lines = [_batch_line(f"t{i}__arm{OSC52}{i % 2}__r0") for i in range(4)]
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    p = subprocess.run([sys.executable, "-m", "elo_per_token", "import", "batch", str(out), "--out",
                        str(tmp_path / "rec.jsonl"), "--id-template", "{task_id}__{arm}__r{replicate}"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "arm" in p.stdout and "\\x1b]52" in p.stdout, p.stdout
    assert "\x1b" not in p.stdout + p.stderr and "\x07" not in p.stdout + p.stderr


@seed(23)
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_printable_leaves_no_control_characters(text):
    shown = printable(text)
    assert not any((ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F or 0x202A <= ord(c) <= 0x202E
                   for c in shown)  # fmt: skip
    assert len(shown) <= 6 * len(text) + 1  # escapes are bounded: at most \uXXXX per character


def test_input_error_escapes_names_from_user_files():
    e = InputError(f"'{OSC52}' is not in the mapping", file="a.jsonl", line=3, field="custom_id")
    assert "\x1b" not in str(e) and "\\x1b]52" in str(e) and str(e).startswith("a.jsonl:3: field 'custom_id'")


def test_eval_zip_bomb_is_refused_before_inflating(tmp_path, monkeypatch):
    """A small `.eval` whose member inflates past EPT_MAX_IMPORT_MB is refused from the zip's declared sizes
    (Python's zipfile never inflates past them), so memory stays flat."""
    pytest.importorskip("inspect_ai")
    from elo_per_token.analysis.imports.inspect_log import import_inspect

    bomb = tmp_path / "bomb.eval"
    with (
        zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z,
        z.open("samples/1_epoch_1.json", "w", force_zip64=True) as fh,
    ):
        for _ in range(96):
            fh.write(b" " * 2**20)
    assert bomb.stat().st_size < 2**20  # under 1 MB on disk, 96 MB inflated
    monkeypatch.setenv("EPT_MAX_IMPORT_MB", "16")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(InputError, match="inflates to 96 MB, over EPT_MAX_IMPORT_MB=16") as ei:
        import_inspect([str(bomb)])
    assert "bomb.eval" in str(ei.value)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 48


def test_parquet_declaring_millions_of_rows_is_refused_from_its_footer(tmp_path):
    """2M rows of a constant in a few KB (the 60M-row attack, scaled down): refused with the file named, before
    any column is read; and a cap on rows (EPT_MAX_PARQUET_ROWS) for real files too large to read."""
    f = tmp_path / "bomb.parquet"
    pl.DataFrame({"kind": ["call"] * 2_000_000}).write_parquet(f)
    assert f.stat().st_size < 100_000
    p = subprocess.run([sys.executable, "-m", "elo_per_token", "analyze", str(f)], capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert p.returncode == 2, p.stdout + p.stderr
    assert "2,000,000 rows in" in p.stdout + p.stderr and "bomb.parquet" in p.stdout + p.stderr
    small = tmp_path / "ok.parquet"
    pl.DataFrame({"kind": ["call"] * 10, "task_id": [f"t{i}" for i in range(10)]}).write_parquet(small)
    p = subprocess.run([sys.executable, "-m", "elo_per_token", "analyze", str(small)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "EPT_MAX_PARQUET_ROWS": "5"})  # fmt: skip
    assert p.returncode == 2 and "EPT_MAX_PARQUET_ROWS=5" in p.stdout + p.stderr, p.stdout + p.stderr
