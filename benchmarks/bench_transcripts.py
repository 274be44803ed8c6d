"""Benchmark: does `ept analyze` of a large run get slower or bigger when the run holds transcripts? (issue 28)

Generates a local-folder run of N jobs (testkit/fixtures_ledger.py, as bench_scale.py does), declares its keys
as a sweep would, then adds one transcript object per job under runs/r/transcripts/<job_key>.json.gz (the
layout of contracts/transcripts.py; ~6 KB gzip each, the size measured on the demo). It then measures
`ept analyze` (wall time and peak RSS, GNU time, each in its own process) with the transcripts folder present
and moved away (a rename: the same files), alternating the order, best of `--repeat`: uncompacted first
(unless --compacted-only), then after `ept compact`.

    python benchmarks/bench_transcripts.py [--sizes 100000] [--compacted-only 1000000]
                                           [--uncompacted-only 1000000] [--repeat 2] [--dir DIR]

Prints a markdown table (docs/benchmarks.md, "Transcripts: `ept analyze` with and without them").
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from bench_scale import EPT, ledger_gen, run_measured

TRANSCRIPT_BYTES = 6_000  # gzip size per job, as measured on `ept demo` (6.3 KB)


def _templates(n: int = 32, seed: int = 0) -> list[bytes]:
    """A few realistic-size transcript blobs (schema 1 shape; text that compresses like prose and code)."""
    rng = random.Random(seed)
    words = [f"w{rng.randrange(4000)}" for _ in range(5000)]
    out = []
    for _ in range(n):
        text = " ".join(rng.choice(words) for _ in range(2200))
        doc = {"schema": 1, "job_key": "x", "calls": [{"call_index": 0, "role": "answer",
               "messages": [{"role": "user", "content": text[:3000]}], "completion": text[3000:],
               "usage": {"prompt_tokens": 500, "completion_tokens": 900}}],
               "grader": {"score": 0.0, "verdict": "fail", "evidence": {}}, "truncated": False}  # fmt: skip
        out.append(gzip.compress(json.dumps(doc).encode(), 6))
    return out


def add_transcripts(run_dir: Path, n: int) -> tuple[int, int]:
    """One transcript object per job of the generated run; returns (objects, bytes)."""
    blobs = _templates()
    base = run_dir / "transcripts"
    made: set[str] = set()
    count = size = 0
    for start in range(0, n, 50_000):
        keys = ledger_gen.job_frame("r", min(50_000, n - start), offset=start)["job_key"].to_list()
        for i, k in enumerate(keys):
            d = k.rpartition("/")[0]
            if d not in made:
                os.makedirs(base / d, exist_ok=True)
                made.add(d)
            b = blobs[i % len(blobs)]
            (base / (k + ".json.gz")).write_bytes(b)
            count += 1
            size += len(b)
    return count, size


def measure_pair(
    run_dir: Path, ledger: Path, out: Path, rounds: int, repeat: int, tag: str
) -> dict[str, tuple]:
    """Best-of-`repeat` (seconds, GB) of `ept analyze` with and without the transcripts folder, alternating."""
    on, off = run_dir / "transcripts", run_dir.parent / f".transcripts-away-{run_dir.name}"
    argv = [*EPT, "analyze", "--rounds", str(rounds), "--no-plots", "--out"]
    best: dict[str, tuple] = {}
    for rep in range(repeat):
        for which in ("with", "without") if rep % 2 == 0 else ("without", "with"):
            if which == "without":
                on.rename(off)
            try:
                got = run_measured([*argv, str(out / f"{tag}-{which}"), "r", "--ledger", str(ledger)])[:2]
            finally:
                if which == "without":
                    off.rename(on)
            print(f"  {tag} {which}: {got[0]:.1f} s / {got[1]:.3f} GB", flush=True)
            best[which] = min(best.get(which, got), got)
    same = (out / f"{tag}-with" / "arms.csv").read_bytes() == (
        out / f"{tag}-without" / "arms.csv"
    ).read_bytes()
    best["arms_equal"] = (same,)
    return best


def bench(n: int, work: Path, rounds: int, repeat: int, uncompacted: bool, compacted: bool = True) -> dict:
    ledger = work / f"ledger-{n}"
    run_dir = ledger / "runs" / "r"
    if not (run_dir / ".complete").exists():
        shutil.rmtree(ledger, ignore_errors=True)
        ledger_gen.write_local(ledger, "r", n)
        ledger_gen.declare(str(ledger), "r", n)
        count, size = add_transcripts(run_dir, n)
        (run_dir / ".complete").write_text(json.dumps([count, size]))
    count, size = json.loads((run_dir / ".complete").read_text())
    shutil.rmtree(run_dir / "compact", ignore_errors=True)
    row: dict = {"jobs": n, "transcripts": count, "transcript_bytes": size}
    if uncompacted:
        row["uncompacted"] = measure_pair(run_dir, ledger, work / "out", rounds, repeat, f"u{n}")
    if not compacted:
        return row
    run_measured([*EPT, "compact", "r", "--ledger", str(ledger)])
    row["compacted"] = measure_pair(run_dir, ledger, work / "out", rounds, repeat, f"c{n}")
    return row


def fmt_row(r: dict) -> str:
    cells = []
    for mode in ("uncompacted", "compacted"):
        m = r.get(mode)
        if m is None:
            cells += ["not measured", "not measured"]
            continue
        cells += [f"{m[w][0]:.1f} s / {m[w][1]:.2f} GB" for w in ("with", "without")]
        cells[-1] += "" if m["arms_equal"][0] else " (arms.csv DIFFERS)"
    return (
        f"| {r['jobs']:,} | {r['transcripts']:,} objects, {r['transcript_bytes'] / 1e9:.2f} GB | "
        + " | ".join(cells)
        + " |"
    )


HEADER = (
    "| jobs | transcripts | uncompacted, with | uncompacted, without | compacted, with | compacted, without |\n"
    "|---|---|---|---|---|---|"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000", help="Sizes measured uncompacted and compacted.")
    ap.add_argument("--compacted-only", default="", help="Sizes measured compacted only (e.g. 1000000).")
    ap.add_argument("--uncompacted-only", default="", help="Sizes measured uncompacted only.")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=None, help="Work folder (kept; generated ledgers are reused).")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="ept-bench-transcripts-"))
    work.mkdir(parents=True, exist_ok=True)
    plan = [(int(x), True, True) for x in args.sizes.split(",") if x]
    plan += [(int(x), False, True) for x in args.compacted_only.split(",") if x]
    plan += [(int(x), True, False) for x in args.uncompacted_only.split(",") if x]
    rows = []
    for n, unc, comp in plan:
        rows.append(bench(n, work, args.rounds, args.repeat, unc, comp))
        print(HEADER + "\n" + "\n".join(fmt_row(r) for r in rows), flush=True)
    (work / "bench_transcripts.json").write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
